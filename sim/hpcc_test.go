package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHPCCInputs reads a topology and a flow file in the HPCC simulator's
// formats and runs them: hosts and switches by node ID, links with their
// rates and delays (the 400 Gb/s one marks by its own RED), flows at their
// start times less the whole second.
func TestHPCCInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) { require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)) }
	write("t.txt", "5 2 4\n3 4\n0 3 100Gbps 1000ns 0.000000\n1 3 100Gbps 1000ns 0.000000\n2 4 100Gbps 2000ns 0.000000\n3 4 400Gbps 1000ns 0\n")
	write("f.txt", "3\n0 2 3 100 5000 2.000001\n1 2 3 100 200000 2.000002500\n2 0 3 100 30000 2.00005\n")
	write("s.json", `{"name": "s", "duration": "1s",
		"hpcc_topology": {"file": "t.txt", "queue": "1MB", "ecn": [{"bandwidth": "400Gbps", "kmin": "1KB", "kmax": "2KB", "pmax": 1}]},
		"workloads": [{"name": "f", "from": ["*"], "to": ["*"], "flows": {"file": "f.txt"}}]}`)
	sc, err := Load(filepath.Join(dir, "s.json"))
	require.NoError(t, err)
	require.Len(t, sc.Hosts, 3)
	assert.Equal(t, []string{"h0", "h1", "h2"}, []string{sc.Hosts[0].Name, sc.Hosts[1].Name, sc.Hosts[2].Name})
	require.Len(t, sc.Switches, 2)
	require.Len(t, sc.Links, 4)
	assert.Equal(t, Bandwidth(400_000_000_000), sc.Links[3].Bandwidth)
	assert.NotNil(t, sc.Links[3].ECN)
	assert.Nil(t, sc.Links[0].ECN)
	assert.Equal(t, Duration(2000), sc.Links[2].Delay)
	res, err := Run(sc, 1)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Failures())
	require.NotNil(t, res.FCT)
	starts := map[int64]int64{}
	for _, f := range res.FCT.Flows {
		starts[f.Size] = f.Start
	}
	assert.Equal(t, map[int64]int64{5000: 1000, 200000: 2500, 30000: 50000}, starts)

	// Files are read by Load only; broken ones are refused with the line.
	_, err = Parse([]byte(`{"name": "p", "hpcc_topology": {"file": "t.txt"}, "workloads": []}`))
	assert.ErrorContains(t, err, "Load")
	write("bad.txt", "5 2 4\n3 4\n0 3 100Gbps\n")
	write("b.json", `{"name": "b", "hpcc_topology": {"file": "bad.txt"}, "workloads": []}`)
	_, err = Load(filepath.Join(dir, "b.json"))
	assert.Error(t, err)
}

func TestParseSecondsNs(t *testing.T) {
	for s, want := range map[string]int64{"2": 2e9, "2.5": 2_500_000_000, "2.000000106": 2_000_000_106, "0.0000000019": 1} {
		got, err := parseSecondsNs(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, int64(got), s)
	}
	for _, s := range []string{"", "x", "-1", "1.x"} {
		_, err := parseSecondsNs(s)
		assert.Error(t, err, s)
	}
}

// FuzzHPCCFiles: the HPCC topology and flow-file readers take any bytes
// without panicking, and what they accept is within their bounds.
func FuzzHPCCFiles(f *testing.F) {
	f.Add([]byte("5 2 4\n3 4\n0 3 100Gbps 1000ns 0.000000\n1 3 100Gbps 1000ns 0\n2 4 100Gbps 2000ns 0\n3 4 400Gbps 1000ns 0\n"),
		[]byte("2\n0 2 3 100 5000 2.000001\n1 2 3 100 200000 2.000002500\n"))
	f.Add([]byte("1 0 0\n\n"), []byte("0\n"))
	f.Add([]byte("3 1 9999999\n2\n"), []byte("1\n0 1 3 100 -5 x\n"))
	f.Fuzz(func(t *testing.T, topo, flows []byte) {
		h := &HPCCTopologySpec{File: "t", data: topo}
		var sc Scenario
		if err := h.expand(&sc); err == nil {
			if len(sc.Hosts)+len(sc.Switches) > maxHosts+maxGeneratedHosts {
				t.Fatalf("%d nodes accepted", len(sc.Hosts)+len(sc.Switches))
			}
		}
		hosts := map[string]int{"h0": 0, "h1": 1, "h2": 2}
		fl, err := hpccFlows("f", flows, firstStartSecond(flows), hosts)
		if err == nil {
			for _, x := range fl {
				if x.size < 1 || x.size > maxFlowSize || x.at < 0 || x.src == x.dst {
					t.Fatalf("accepted %+v", x)
				}
			}
		}
	})
}
