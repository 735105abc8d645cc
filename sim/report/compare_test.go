package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/sim"
)

// TestHPCCReferenceGroups: grouped our way, the HPCC ns-3 run's own FCTs
// give the slowdowns its analysis reported (../shared/reference/
// congestion.md §4.3: DCQCN, all flows 1.18 / 4.10 / 5.79; smallest half
// 1.05 / 3.70 / 5.79; top 5 % 2.00 / 4.31 / 6.35): the grouping is theirs.
func TestHPCCReferenceGroups(t *testing.T) {
	ref, err := ReadHPCCFCT("../../testdata/hpcc/fct_fat_ws30_10ms_dcqcn.txt")
	require.NoError(t, err)
	assert.Len(t, ref, 6578)
	g := sim.GroupFCT(ref)
	byName := map[string]sim.FCTGroup{}
	for _, x := range g {
		byName[x.Name] = x
	}
	for name, want := range map[string][3]float64{"all": {1.18, 4.10, 5.79}, "0-50%": {1.05, 3.70, 5.79}, "95-100%": {2.00, 4.31, 6.35}} {
		got := byName[name]
		assert.InDelta(t, want[0], got.P50, 0.01, name)
		assert.InDelta(t, want[1], got.P95, 0.01, name)
		assert.InDelta(t, want[2], got.P99, 0.01, name)
	}
	_, err = ReadHPCCFCT("compare_test.go")
	assert.Error(t, err)
}

func TestWriteComparison(t *testing.T) {
	sc, err := sim.Load("../../testdata/scenarios/fat-tree-websearch.json")
	require.NoError(t, err)
	sc.Workloads[0].Flows.For = sim.Duration(200_000)
	sc.Expect = sim.ExpectSpec{}
	res, err := sim.Run(sc, 1)
	require.NoError(t, err)
	ref, err := ReadHPCCFCT("../../testdata/hpcc/fct_fat_ws30_10ms_dcqcn.txt")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, WriteComparison(dir, res, "HPCC ns-3", ref))
	txt, err := os.ReadFile(filepath.Join(dir, "fct-compare.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(txt), "vs HPCC ns-3 (6578 flows)")
	_, err = os.Stat(filepath.Join(dir, "fct-compare.png"))
	assert.NoError(t, err)
}
