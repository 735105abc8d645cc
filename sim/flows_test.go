package sim

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/sim/netsim"
)

func TestCDFMeansMatchTheGenerator(t *testing.T) {
	// The traffic generator's CustomRand.getAvg on the same files
	// (../shared/reference/congestion.md §4.1).
	for name, want := range map[string]float64{"websearch": 1711250, "fbhadoop": 120421} {
		c, err := (&FlowsSpec{CDF: name}).cdf()
		require.NoError(t, err)
		assert.InDelta(t, want, c.mean(), 1, name)
	}
	_, err := (&FlowsSpec{CDF: "nope"}).cdf()
	assert.Error(t, err)
	for _, bad := range [][][2]float64{{{0, 0}}, {{0, 0}, {10, 50}}, {{0, 0}, {10, 60}, {5, 100}}, {{0, 0}, {10, 60}, {20, 50}, {30, 100}}} {
		_, err := (&FlowsSpec{Points: bad}).cdf()
		assert.Error(t, err, "%v", bad)
	}
}

func TestCDFDraws(t *testing.T) {
	c, err := (&FlowsSpec{CDF: "websearch"}).cdf()
	require.NoError(t, err)
	r := fault.Stream(1, "t")
	const n = 200_000
	var sum float64
	below := 0
	for range n {
		s := c.draw(r)
		require.True(t, s >= 0 && s <= 30_000_000)
		sum += float64(s)
		if s <= 80000 {
			below++
		}
	}
	assert.InDelta(t, 1711250, sum/n, 1711250*0.03)
	assert.InDelta(t, 0.53, float64(below)/n, 0.01, "53%% of WebSearch flows are at most 80 KB")
}

func TestNegLnQ32(t *testing.T) {
	for _, x := range []uint64{1, 2, 3, 1000, 1 << 20, 1<<52 + 12345, 1<<53 - 1} {
		want := -math.Log(float64(x) / (1 << 53))
		got := float64(negLnQ32(x)) / (1 << 32)
		assert.InDelta(t, want, got, 1e-6+want*1e-8, "x=%d", x)
	}
}

// TestArrivalsFillTheLoad: the flows a workload draws offer, per host, the
// load asked for (within sampling error), in arrival order, never to the
// source itself, the same for the same seed.
func TestArrivalsFillTheLoad(t *testing.T) {
	w, err := resolveWorkload(0, WorkloadSpec{Name: "f", From: []string{"*"}, To: []string{"*"},
		Flows: &FlowsSpec{CDF: "fbhadoop", Load: 0.4, For: Duration(500 * netsim.Millisecond)}})
	require.NoError(t, err)
	hosts := []int{0, 1, 2, 3}
	bw := func(int) int64 { return 10_000_000_000 }
	fl, err := w.arrivals(7, hosts, hosts, bw, nil)
	require.NoError(t, err)
	bytes := map[int]int64{}
	for i, f := range fl {
		assert.NotEqual(t, f.src, f.dst)
		if i > 0 {
			assert.GreaterOrEqual(t, f.at, fl[i-1].at)
		}
		bytes[f.src] += f.size
	}
	for _, h := range hosts {
		load := float64(bytes[h]) * 8 / (10e9 * 0.5)
		assert.InDelta(t, 0.4, load, 0.15, "host %d", h)
	}
	again, err := w.arrivals(7, hosts, hosts, bw, nil)
	require.NoError(t, err)
	assert.Equal(t, fl, again)

	_, err = resolveWorkload(0, WorkloadSpec{Name: "g", Ops: map[string]int{"READ": 1}, Flows: &FlowsSpec{CDF: "websearch", Load: 0.3, For: 1}})
	assert.Error(t, err)
}

// TestFCTAloneIsIdeal: one flow on an idle network completes in about the
// ideal time the slowdown divides by, whatever its size.
func TestFCTAloneIsIdeal(t *testing.T) {
	// A long flow alone is held below line rate by RC's window of 128
	// unacknowledged PSNs (rxe's, 128 KB at path MTU 1024) against one ACK
	// per 64 KiB WRITE: the ideal does not model that.
	tolerance := map[int]float64{100: 0.1, 5000: 0.1, 200_000: 0.1, 3_000_000: 0.25}
	for _, size := range []int{100, 5000, 200_000, 3_000_000} {
		// Flows a few milliseconds apart: each is alone on the network.
		load := float64(size) * 8 / (100e9 * 0.0025)
		sc, err := Parse([]byte(fmt.Sprintf(`{"name": "alone", "duration": "1s", "host_count": 2,
			"star": {"bandwidth": "100Gbps", "latency": "500ns"},
			"workloads": [{"name": "one", "from": ["h0"], "to": ["h1"],
				"flows": {"points": [[%d, 0], [%d, 100]], "load": %g, "for": "10ms"}}]}`, size, size, load)))
		require.NoError(t, err)
		res, err := Run(sc, 1)
		require.NoError(t, err)
		require.True(t, res.OK(), res.Failures())
		require.NotNil(t, res.FCT, "size %d", size)
		require.NotEmpty(t, res.FCT.Flows)
		for _, f := range res.FCT.Flows {
			assert.InDelta(t, 1, float64(f.FCT)/float64(f.Ideal), tolerance[size], "size %d: fct %d ideal %d", size, f.FCT, f.Ideal)
		}
	}
}

func TestTopologies(t *testing.T) {
	ft := &Scenario{Name: "ft", FatTree: &FatTreeSpec{K: 4}}
	x, err := ft.withTopology()
	require.NoError(t, err)
	assert.Equal(t, 16, x.HostCount)
	assert.Len(t, x.Switches, 20)
	assert.Len(t, x.Links, 48)
	assert.Nil(t, x.FatTree, "expanded: the generator is gone")
	assert.NotNil(t, ft.FatTree, "the original is left alone")

	ls := &Scenario{Name: "ls", LeafSpine: &LeafSpineSpec{Leaves: 4, Spines: 2, HostsPerLeaf: 8}}
	x, err = ls.withTopology()
	require.NoError(t, err)
	assert.Equal(t, 32, x.HostCount)
	assert.Len(t, x.Switches, 6)
	assert.Len(t, x.Links, 32+8)

	for _, bad := range []*Scenario{
		{Name: "odd", FatTree: &FatTreeSpec{K: 3}},
		{Name: "both", FatTree: &FatTreeSpec{K: 4}, LeafSpine: &LeafSpineSpec{Leaves: 1, Spines: 1, HostsPerLeaf: 1}},
		{Name: "hosts too", FatTree: &FatTreeSpec{K: 4}, HostCount: 3},
		{Name: "empty", LeafSpine: &LeafSpineSpec{}},
	} {
		_, err := bad.withTopology()
		assert.Error(t, err, bad.Name)
	}
}

// TestFatTreeRunsAcrossPods: every host pair of a k=4 fat-tree reaches
// each other (through the cores for other pods), and ECMP spreads QPs.
func TestFatTreeRunsAcrossPods(t *testing.T) {
	sc := &Scenario{Name: "ft", Duration: Duration(netsim.Second), FatTree: &FatTreeSpec{K: 4},
		Workloads: []WorkloadSpec{{From: []string{"*"}, To: []string{"*"}, Ops: map[string]int{"WRITE": 1, "SEND": 1, "READ": 1}, Count: 3}}}
	res, err := Run(sc, 1)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Failures())
	assert.Equal(t, 16*15, res.Flows)
	cores := 0
	for _, l := range res.Links {
		if len(l.Name) > 4 && l.Name[:4] == "core" && l.Delivered > 0 {
			cores++
		}
	}
	assert.Equal(t, 16, cores, "every core's every downlink carried traffic")
}
