package sweep

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/sim"
)

func TestJobsShardsCoverEveryRunOnce(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	params := []Param{{"rp_ai_rate", []string{"5", "20"}}, {"rp_threshold", []string{"1", "5"}}}
	all, err := Jobs(seeds, params, 0, 1)
	require.NoError(t, err)
	require.Len(t, all, 12)
	seen := map[string]int{}
	for shard := range 5 {
		js, err := Jobs(seeds, params, shard, 5)
		require.NoError(t, err)
		for _, j := range js {
			assert.Equal(t, shard, j.Index%5)
			seen[j.Name()]++
		}
	}
	require.Len(t, seen, 12)
	for name, n := range seen {
		assert.Equal(t, 1, n, name)
	}
	_, err = Jobs(seeds, nil, 2, 2)
	assert.Error(t, err)
}

func TestParse(t *testing.T) {
	s, err := ParseSeeds("3")
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 2, 3}, s)
	s, err = ParseSeeds("7-9")
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 8, 9}, s)
	for _, bad := range []string{"", "x", "9-7", "0-9999999"} {
		_, err := ParseSeeds(bad)
		assert.Error(t, err, bad)
	}
	p, err := ParseParam("rp_ai_rate=5,20")
	require.NoError(t, err)
	assert.Equal(t, Param{"rp_ai_rate", []string{"5", "20"}}, p)
	_, err = ParseParam("rp_ai_rate")
	assert.Error(t, err)
}

// TestRunAndMerge: a sweep's parameter values reach the runs (a bad value
// fails its runs with the parameter's error), outcomes round-trip through
// their files, and Merge tabulates per combination.
func TestRunAndMerge(t *testing.T) {
	sc, err := sim.Load("../../testdata/scenarios/dcqcn-convergence.json")
	require.NoError(t, err)
	sc.Workloads = sc.Workloads[:2]
	sc.Workloads[0].Count, sc.Workloads[1].Count = 6, 6
	sc.Workloads[1].Start = 0
	sc.Expect = sim.ExpectSpec{}
	jobs, err := Jobs([]uint64{1, 2}, []Param{{"rp_ai_rate", []string{"5", "40"}}}, 0, 1)
	require.NoError(t, err)
	dir := t.TempDir()
	outs, err := Run(sc, jobs, 2, dir, nil)
	require.NoError(t, err)
	require.Len(t, outs, 4)
	for _, o := range outs {
		assert.True(t, o.OK, o.Name())
		assert.Positive(t, o.CNPs, o.Name())
	}
	back, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, outs, back)
	table := Merge(back)
	assert.Contains(t, table, "rp_ai_rate=5 ")
	assert.Contains(t, table, "rp_ai_rate=40 ")
	assert.Equal(t, 3, len(strings.Split(strings.TrimSpace(table), "\n")))

	bad, err := Run(sc, []Job{{Seed: 1, Params: map[string]string{"rp_gd": "99"}}}, 1, "", nil)
	require.NoError(t, err)
	assert.Contains(t, bad[0].Error, "rp_gd")
}
