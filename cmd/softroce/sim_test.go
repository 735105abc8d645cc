package main

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const lossyScenario = "../../testdata/scenarios/lossy-link.json"

func TestSimRun(t *testing.T) {
	dir := t.TempDir()
	p1, p2 := filepath.Join(dir, "a.pcapng"), filepath.Join(dir, "b.pcapng")
	code, out, errOut := runCmd(t, "sim", "run", lossyScenario, "--seed", "5", "--pcap", p1)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "scenario lossy-link seed 5")
	assert.Contains(t, out, "exactly-once   ok")
	code, _, errOut = runCmd(t, "sim", "run", lossyScenario, "--seed", "5", "--pcap", p2)
	require.Equal(t, 0, code, errOut)
	a, err := os.ReadFile(p1)
	require.NoError(t, err)
	b, err := os.ReadFile(p2)
	require.NoError(t, err)
	require.NotEmpty(t, a)
	assert.Equal(t, sha256.Sum256(a), sha256.Sum256(b), "same seed, same capture")

	code, out, _ = runCmd(t, "sim", "run", lossyScenario, "--seed", "5", "--json")
	require.Equal(t, 0, code)
	var res struct {
		Scenario   string            `json:"scenario"`
		ByStatus   map[string]uint64 `json:"by_status"`
		Invariants []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"invariants"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, "lossy-link", res.Scenario)
	assert.Positive(t, res.ByStatus["SUCCESS"])
	assert.NotEmpty(t, res.Invariants)
}

// TestSimRunCPUProfile: --cpuprofile writes a CPU profile of the run, in
// pprof's format (a gzipped protocol buffer whose string table names the
// sample types and the functions sampled; bench/pgo.sh reads it). The run
// is one of the library's longer ones (about half a second), so that the
// profiler's 100 samples a second surely catch it.
func TestSimRunCPUProfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pprof")
	code, _, errOut := runCmd(t, "sim", "run", "../../testdata/scenarios/incast-dcqcn-pfc.json", "--cpuprofile", p)
	require.Equal(t, 0, code, errOut)
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err, "a pprof profile is gzipped")
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Contains(t, string(b), "cpu")
	assert.Contains(t, string(b), "nanoseconds")
	assert.Contains(t, string(b), "sim.RunWith", "the run was sampled")

	code, _, errOut = runCmd(t, "sim", "run", lossyScenario, "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir"))
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--cpuprofile")
}

func TestSimRunErrors(t *testing.T) {
	code, _, errOut := runCmd(t, "sim", "run", "no-such-file.json")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "no-such-file.json")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"name": "x", "workloads": [], "bogus": 1}`), 0o644))
	code, _, errOut = runCmd(t, "sim", "run", bad)
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "bogus")

	// A scenario whose work cannot finish in time fails its liveness invariant.
	short := filepath.Join(t.TempDir(), "short.json")
	require.NoError(t, os.WriteFile(short, []byte(`{"name": "short", "duration": "10us", "host_count": 2,
		"links": [{"a": "h0", "b": "h1"}], "workloads": [{"from": ["h0"], "to": ["h1"], "count": 100}]}`), 0o644))
	code, _, errOut = runCmd(t, "sim", "run", short)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "liveness")
}

func TestSimFuzzAndGen(t *testing.T) {
	code, out, errOut := runCmd(t, "sim", "fuzz", "--seeds", "4", "--from", "10", "--workers", "2")
	require.Equal(t, 0, code, errOut+out)
	assert.Contains(t, out, "4 runs")
	assert.Contains(t, out, "0 failed")

	code, gen, _ := runCmd(t, "sim", "gen", "--seed", "10")
	require.Equal(t, 0, code)
	file := filepath.Join(t.TempDir(), "fuzz-10.json")
	require.NoError(t, os.WriteFile(file, []byte(gen), 0o644))
	code, out, errOut = runCmd(t, "sim", "run", file, "--seed", "10")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "scenario fuzz-10 seed 10")

	// The sharded simulator's fault search: seed 1 is a star it runs
	// parallel, and its scenario file says so.
	code, out, errOut = runCmd(t, "sim", "fuzz", "--seeds", "4", "--from", "1", "--parallel")
	require.Equal(t, 0, code, errOut+out)
	assert.Contains(t, out, "0 failed")
	code, gen, _ = runCmd(t, "sim", "gen", "--seed", "1", "--parallel")
	require.Equal(t, 0, code)
	assert.Contains(t, gen, `"parallel": true`)
	code, gen, _ = runCmd(t, "sim", "gen", "--seed", "1")
	require.Equal(t, 0, code)
	assert.NotContains(t, gen, `"parallel"`)
}
