package main

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/oob"
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

func TestCHex(t *testing.T) {
	// C's "%#06x" and friends: no 0x for zero, the 0x counted in the width.
	assert.Equal(t, "0000", cHex(0, 4))
	assert.Equal(t, "0x0011", cHex(0x11, 6))
	assert.Equal(t, "0x4a1c6b", cHex(0x4a1c6b, 6))
	assert.Equal(t, "0x001234", cHex(0x1234, 8))
	assert.Equal(t, "0x007f5a0b5c9000", cHex(0x7f5a0b5c9000, 16))
	assert.Equal(t, "0x123456789", cHex(0x123456789, 6), "wider values are not cut")
}

func TestPerfPrintDest(t *testing.T) {
	var b bytes.Buffer
	d := oob.PerftestDest{OutReads: 128, QPN: 0x11, PSN: 0x4a1c6b, RKey: 0x1234, VAddr: 0x7f5a0b5c9000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 2}}
	for _, tc := range []struct {
		verb perfVerb
		want string
	}{
		{verbWrite, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b RKey 0x001234 VAddr 0x007f5a0b5c9000\n"},
		{verbRead, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b OUT 0x80 RKey 0x001234 VAddr 0x007f5a0b5c9000\n"},
		{verbSend, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b\n"},
		{verbAtomic, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b\n"},
	} {
		b.Reset()
		p := &perf{o: &perfOpts{verb: tc.verb}, out: &b}
		p.printDest("local", d)
		assert.Equal(t, tc.want+" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02\n", b.String())
	}
}

// TestBWReport checks print_report_bw's arithmetic on made-up times: 10
// messages of 1 MiB posted 1 ms apart, completed 2 ms after posting, with a
// completion every 5 messages.
func TestBWReport(t *testing.T) {
	const n, ms = 10, int64(time.Millisecond)
	posted := make([]int64, n)
	completed := make([]int64, n)
	for i := range posted {
		posted[i] = int64(i) * ms
		completed[i] = posted[i] + 2*ms
	}
	r := bwReport(1<<20, n, posted, completed, 5, false, false)
	// Average: 10 MiB over 11 ms.
	assert.InDelta(t, 10/0.011, r.BWAvg, 1e-6)
	assert.InDelta(t, 10/0.011/1e6, r.MsgRate, 1e-12)
	// Peak: the best run per message, messages 0..9 over 11 ms... or the
	// longest runs: (completed[9]-posted[0])/10 = 1.1 ms per MiB.
	assert.InDelta(t, 1/0.0011, r.BWPeak, 1e-6)
	g := bwReport(1<<20, n, posted, completed, 5, true, true)
	assert.Zero(t, g.BWPeak, "no peak")
	// Gbit/s: bytes * 8 / 1e9 per second; completed[0]-posted[0] = 2 ms.
	assert.InDelta(t, float64(10<<20)*8/1e9/0.002, g.BWAvg, 1e-9)
}

// TestLatReport checks print_report_lat's arithmetic: samples are the gaps
// between posts, halved for round trips, the two largest dropped.
func TestLatReport(t *testing.T) {
	// Gaps (us): 10, 20, 30, 40, 50, 1000, 2000 -> halved 5..25, 500, 1000.
	gaps := []int64{10, 20, 30, 40, 50, 1000, 2000}
	posted := []int64{0}
	for _, g := range gaps {
		posted = append(posted, posted[len(posted)-1]+g*1000)
	}
	s := latReport(posted, 2)
	assert.Equal(t, 5.0, s.min)
	assert.Equal(t, 500.0, s.max, "t_max is the first sample past the kept ones")
	assert.Equal(t, 15.0, s.typical, "median of 5, 10, 15, 20, 25")
	assert.Equal(t, 15.0, s.avg)
	assert.InDelta(t, math.Sqrt(50), s.stdev, 1e-9)
	assert.Equal(t, 500.0, s.p99, "ceil(5 * 0.99) = 5")
	assert.Equal(t, 500.0, s.p999)
	// An even count takes the mean of the middle two.
	s = latReport([]int64{0, 1000, 3000, 6000, 10000, 15000, 21000}, 1)
	assert.Equal(t, 2.5, s.typical, fmt.Sprint(s))
}
