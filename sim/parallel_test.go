package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"testing"

	"github.com/softroce/softroce/sim/netsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParallelSameOnAnyCores: a Parallel scenario (a fat-tree with faults
// and ECN marking and DCQCN; PFC with a victim flow) gives the same event
// log, byte for byte, and the same result on one core as on two, passes
// its checks, and moves the same work as the serial run of the scenario.
func TestParallelSameOnAnyCores(t *testing.T) {
	for _, name := range []string{"fat-tree-websearch", "pfc-victim", "incast"} {
		t.Run(name, func(t *testing.T) {
			sc, err := Load("../testdata/scenarios/" + name + ".json")
			require.NoError(t, err)
			serial, err := Run(sc, 1)
			require.NoError(t, err)
			sc.Parallel = true
			var logs [2]string
			var res [2]*Result
			for i, procs := range []int{1, 2} {
				prev := runtime.GOMAXPROCS(procs)
				var log bytes.Buffer
				res[i], err = RunWith(sc, 1, Options{Log: &log})
				runtime.GOMAXPROCS(prev)
				require.NoError(t, err)
				require.True(t, res[i].OK(), "%s", res[i].Failures())
				sum := sha256.Sum256(log.Bytes())
				logs[i] = hex.EncodeToString(sum[:])
				assert.Equal(t, logs[i], res[i].EventLog)
			}
			assert.Equal(t, logs[0], logs[1])
			// A report samples between windows, without moving them.
			rep, err := RunWith(sc, 1, Options{Report: 50 * netsim.Microsecond})
			require.NoError(t, err)
			require.NotNil(t, rep.Report)
			assert.NotZero(t, rep.Report.Samples)
			assert.Equal(t, logs[0], rep.EventLog)
			assert.Equal(t, res[0].Events, res[1].Events)
			assert.Equal(t, res[0].Network, res[1].Network)
			assert.Equal(t, res[0].Frames, res[1].Frames)
			// The same work (in another order of simultaneous events,
			// where a window's shards have some).
			assert.Equal(t, serial.Completed, res[0].Completed)
		})
	}
}

// TestParallelRefuses: what a Parallel scenario cannot do is refused with
// the cause.
func TestParallelRefuses(t *testing.T) {
	base := func() *Scenario {
		sc, err := Load("../testdata/scenarios/incast.json")
		require.NoError(t, err)
		sc.Parallel = true
		return sc
	}
	for _, tc := range []struct {
		name string
		edit func(*Scenario)
		opt  Options
		want string
	}{
		{"timed fault", func(sc *Scenario) { sc.Faults = []FaultSpec{{Link: "*", Spec: "loss=1%"}} }, Options{}, "timed faults"},
		{"partition", func(sc *Scenario) { sc.Partitions = []PartitionSpec{{Link: "*"}} }, Options{}, "partitions"},
		{"capture", func(*Scenario) {}, Options{Pcap: &bytes.Buffer{}}, "no capture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := base()
			tc.edit(sc)
			_, err := RunWith(sc, 1, tc.opt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Hosts straight on each other have nothing to run apart.
	sc, err := Load("../testdata/scenarios/lossy-link.json")
	require.NoError(t, err)
	sc.Parallel = true
	_, err = Run(sc, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lookahead")
}

// TestParallelUnderFaults: the fault search's generated scenarios (loss,
// bursts, duplicates, reordering, corruption, jitter on every link of a
// star) that a parallel run can take hold every invariant run parallel
// (sim fuzz --parallel).
func TestParallelUnderFaults(t *testing.T) {
	n := 0
	rep := FuzzOpts(100, 1, FuzzOptions{Workers: 2, Parallel: true, Each: func(seed uint64, res *Result, err error) {
		if res != nil && GenerateParallel(seed).Parallel {
			n++
		}
	}})
	assert.Empty(t, rep.Failures)
	for _, f := range rep.Failures {
		assert.Contains(t, f.Command, "--parallel")
	}
	assert.Greater(t, n, 30)
}
