package perftest

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/softroce/softroce/oob"
)

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
		verb Verb
		want string
	}{
		{VerbWrite, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b RKey 0x001234 VAddr 0x007f5a0b5c9000\n"},
		{VerbRead, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b OUT 0x80 RKey 0x001234 VAddr 0x007f5a0b5c9000\n"},
		{VerbSend, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b\n"},
		{VerbAtomic, " local address: LID 0000 QPN 0x0011 PSN 0x4a1c6b\n"},
	} {
		b.Reset()
		p := &perf{o: &Options{Verb: tc.verb}, out: &b}
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
