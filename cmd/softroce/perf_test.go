package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// perfResults returns the rows of the result table in out: the fields of
// every line after the table header up to the closing rule.
func perfResults(t *testing.T, out string) [][]float64 {
	t.Helper()
	var rows [][]float64
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, " #bytes"):
			in = true
		case in && strings.HasPrefix(line, "-----"):
			in = false
		case in:
			var row []float64
			for _, f := range strings.Fields(line) {
				v, err := strconv.ParseFloat(f, 64)
				require.NoError(t, err, "result line %q", line)
				row = append(row, v)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// TestPerfProcesses runs `softroce perf` server and client processes over
// UDP loopback for every verb in both modes and checks the reports.
func TestPerfProcesses(t *testing.T) {
	bin := buildSoftroce(t)
	const srvAddr, cliAddr = "127.0.88.4", "127.0.88.5"
	tests := []struct {
		args []string
		size int
		lat  bool
		// serverReports says whether the server prints a result row: the
		// client's (write, read, atomic bw), its own (send bw, write and
		// send lat) or none (read and atomic lat).
		serverReports bool
	}{
		{[]string{"write", "-s", "4096", "-n", "200"}, 4096, false, true},
		{[]string{"write", "-s", "65536", "-n", "50", "-t", "8", "-q", "2"}, 65536, false, true},
		{[]string{"write", "-s", "1", "-n", "100", "-c", "UC"}, 1, false, true},
		{[]string{"read", "-s", "4096", "-n", "200"}, 4096, false, true},
		{[]string{"send", "-s", "4096", "-n", "200"}, 4096, false, true},
		{[]string{"atomic", "-n", "200"}, 8, false, true},
		{[]string{"atomic", "-n", "100", "-A", "CMP_AND_SWAP", "--report_gbits"}, 8, false, true},
		{[]string{"write", "--lat", "-n", "50"}, 2, true, true},
		{[]string{"read", "--lat", "-s", "64", "-n", "50"}, 64, true, false},
		{[]string{"send", "--lat", "-s", "1024", "-n", "50"}, 1024, true, true},
		{[]string{"atomic", "--lat", "-n", "50"}, 8, true, false},
	}
	for i, tc := range tests {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			common := append([]string{"perf"}, tc.args...)
			common = append(common, "-p", strconv.Itoa(28700+i))
			srv, cli := runPeers(t, bin, 90*time.Second,
				append(append([]string{}, common...), "--addr", srvAddr),
				append(append([]string{}, common...), "--addr", cliAddr, srvAddr))
			require.Equal(t, 0, cli.code, "client: %s%s", cli.stdout, cli.stderr)
			require.Equal(t, 0, srv.code, "server: %s%s", srv.stdout, srv.stderr)
			for _, out := range []string{cli.stdout, srv.stdout} {
				assert.Contains(t, out, " Link type       : Ethernet\n")
				assert.Contains(t, out, " GID index       : 1\n")
				assert.Contains(t, out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:88:04\n")
				assert.Contains(t, out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:88:05\n")
				assert.Contains(t, out, " local address: LID 0000 QPN 0x")
				assert.Contains(t, out, " remote address: LID 0000 QPN 0x")
			}
			rows := perfResults(t, cli.stdout)
			require.Len(t, rows, 1, cli.stdout)
			row := rows[0]
			assert.Equal(t, float64(tc.size), row[0], "#bytes")
			if tc.lat {
				require.Len(t, row, 9, "lat row")
				assert.Equal(t, 50.0, row[1])
				for k, v := range row[2:] {
					assert.Greater(t, v, 0.0, "latency column %d", k+2)
				}
				assert.LessOrEqual(t, row[2], row[4], "t_min <= t_typical")
				assert.LessOrEqual(t, row[4], row[3], "t_typical <= t_max")
			} else {
				require.Len(t, row, 5, "bw row")
				assert.Greater(t, row[3], 0.0, "BW average")
				assert.Greater(t, row[4], 0.0, "MsgRate")
				assert.GreaterOrEqual(t, row[2]*1.0001, row[3], "peak >= average")
			}
			srvRows := perfResults(t, srv.stdout)
			if !tc.serverReports {
				assert.Empty(t, srvRows, srv.stdout)
				return
			}
			require.Len(t, srvRows, 1, srv.stdout)
			if !tc.lat && tc.args[0] != "send" {
				assert.Equal(t, row, srvRows[0], "the server prints the client's report")
			}
			if tc.args[0] == "send" && !tc.lat {
				assert.Greater(t, srvRows[0][3], 0.0, "the send server measures its own bandwidth")
			}
		})
	}
}

// TestPerfAllSizes runs write bw with -a: one row per size, 2 .. 2^23.
func TestPerfAllSizes(t *testing.T) {
	bin := buildSoftroce(t)
	common := []string{"perf", "write", "-a", "-n", "5", "-t", "4", "-p", "28750"}
	srv, cli := runPeers(t, bin, 120*time.Second,
		append(append([]string{}, common...), "--addr", "127.0.88.4"),
		append(append([]string{}, common...), "--addr", "127.0.88.5", "127.0.88.4"))
	require.Equal(t, 0, cli.code, "client: %s%s", cli.stdout, cli.stderr)
	require.Equal(t, 0, srv.code, "server: %s%s", srv.stdout, srv.stderr)
	rows := perfResults(t, cli.stdout)
	require.Len(t, rows, 23)
	for i, r := range rows {
		assert.Equal(t, float64(uint64(2)<<i), r[0])
		// The message rate, printed with six decimals: 5 messages of 2
		// bytes take long enough on a busy machine for the bandwidth,
		// printed with two, to round to 0.00 MB/s.
		assert.Greater(t, r[4], 0.0)
	}
}

func TestPerfUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "write", "--lat", "--bw"},
		{"perf", "read", "-c", "UC"},
		{"perf", "write", "-c", "UD"},
		{"perf", "atomic", "-A", "SWAP"},
		{"perf", "write", "-n", "4"},
		{"perf", "write", "--lat", "-q", "2"},
		{"perf", "write", "-m", "1000"},
		{"perf", "write", "-s", "0"},
	} {
		code, _, stderr := runCmd(t, args...)
		assert.Equal(t, exitTrouble, code, "%v: %s", args, stderr)
	}
}
