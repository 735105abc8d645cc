package report

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/sim"
)

func TestWrite(t *testing.T) {
	sc, err := sim.Load("../../testdata/scenarios/dcqcn-convergence.json")
	require.NoError(t, err)
	sc.Workloads = sc.Workloads[:2]
	sc.Workloads[0].Count, sc.Workloads[1].Count = 8, 8
	sc.Expect = sim.ExpectSpec{}
	res, err := sim.RunWith(sc, 1, sim.Options{Report: 50_000})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, Write(dir, res))

	f, err := os.Open(filepath.Join(dir, "flows.csv"))
	require.NoError(t, err)
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	require.NoError(t, err)
	assert.Equal(t, []string{"flow", "time_ns", "sent_bps", "goodput_bps", "rate_bps", "target_bps", "alpha"}, rows[0])
	assert.Len(t, rows, 1+2*res.Report.Samples)
	for _, name := range []string{"rates.png", "queues.png"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.True(t, bytes.HasPrefix(b, []byte("\x89PNG\r\n")), name)
	}
	for _, name := range []string{"result.json", "queues.csv", "summary.txt"} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Positive(t, st.Size(), name)
	}
	res.Report = nil
	assert.Error(t, Write(t.TempDir(), res), "no report gathered")
}
