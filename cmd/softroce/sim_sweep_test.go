package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimSweepAndMerge runs a small sweep in two shards, as two machines
// would, and merges their outputs: every run appears once, the table has
// a row per parameter value.
func TestSimSweepAndMerge(t *testing.T) {
	dir := t.TempDir()
	sc := filepath.Join(dir, "s.json")
	require.NoError(t, os.WriteFile(sc, []byte(`{"name": "s", "duration": "1s", "host_count": 3,
		"congestion": {"dcqcn": true},
		"star": {"bandwidth": "10Gbps", "downlink": {"bandwidth": "10Gbps", "ecn": {"kmin": "10KB", "kmax": "40KB", "pmax": 0.2}}},
		"workloads": [{"from": ["h1", "h2"], "to": ["h0"], "ops": {"WRITE": 1}, "size": {"fixed": 65536}, "count": 20, "window": 4}]}`), 0o644))
	for shard := range 2 {
		code, out, errOut := runCmd(t, "sim", "sweep", sc, "--seeds", "3", "--param", "rp_ai_rate=5,40",
			"--shard", []string{"0/2", "1/2"}[shard], "--workers", "2", "--out", filepath.Join(dir, "out", []string{"a", "b"}[shard]))
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "rp_ai_rate=")
	}
	code, out, errOut := runCmd(t, "sim", "merge", filepath.Join(dir, "out", "a"), filepath.Join(dir, "out", "b"))
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Regexp(t, `^rp_ai_rate=5 +3 +3 `, lines[1])
	assert.Regexp(t, `^rp_ai_rate=40 +3 +3 `, lines[2])

	code, _, _ = runCmd(t, "sim", "sweep", sc, "--shard", "2/2")
	assert.Equal(t, exitTrouble, code)
}

// TestSweepManifest keeps the Kubernetes example in step with the command:
// its shards, completions and parallelism agree, and its flags exist.
func TestSweepManifest(t *testing.T) {
	b, err := os.ReadFile("../../deploy/k8s/sim-sweep.yaml")
	require.NoError(t, err)
	m := string(b)
	shards := regexp.MustCompile(`\$JOB_COMPLETION_INDEX/(\d+)`).FindStringSubmatch(m)
	require.NotNil(t, shards)
	assert.Contains(t, m, "completions: "+shards[1])
	assert.Contains(t, m, "parallelism: "+shards[1])
	assert.Contains(t, m, "completionMode: Indexed")
	cmd := newSimSweepCmd()
	for _, f := range regexp.MustCompile(`--([a-z]+)`).FindAllStringSubmatch(m, -1) {
		if f[1] == "depth" { // git's
			continue
		}
		assert.NotNil(t, cmd.Flags().Lookup(f[1]), "--%s", f[1])
	}
}
