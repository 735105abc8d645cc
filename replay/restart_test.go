package replay

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/pcapio"
)

// twoRuns builds a capture holding the interop pingpong capture twice, the
// way people make one: end to end with the original timestamps (mergecap
// -a), or in time order with the second run 10 s later (mergecap after
// editcap -t 10), with or without the out-of-band TCP exchange.
func twoRuns(t *testing.T, shift time.Duration, oob bool) *Capture {
	t.Helper()
	r, err := pcapio.Open(filepath.Join("..", "testdata", "pcaps", "interop", "softroce_udp_client_pingpong_rc.pcap"))
	require.NoError(t, err)
	defer r.Close()
	type rec struct {
		t    time.Time
		data []byte
	}
	var recs []rec
	for {
		x, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if !oob && !isRoCEv2(x.Data) {
			continue
		}
		recs = append(recs, rec{x.Time, bytes.Clone(x.Data)})
	}
	var buf bytes.Buffer
	w, err := pcapio.NewWriter(&buf)
	require.NoError(t, err)
	for pass := 0; pass < 2; pass++ {
		for _, x := range recs {
			ts := x.t
			if pass == 1 {
				ts = ts.Add(shift)
			}
			require.NoError(t, w.WritePacket(ts, x.data, ""))
		}
	}
	require.NoError(t, w.Flush())
	rd, err := pcapio.NewReader(&buf)
	require.NoError(t, err)
	c, err := Read(rd)
	require.NoError(t, err)
	return c
}

// isRoCEv2 reports whether an Ethernet frame carries UDP to port 4791.
func isRoCEv2(b []byte) bool {
	return len(b) > 37 && b[12] == 0x08 && b[13] == 0x00 && b[23] == 17 && b[36] == 0x12 && b[37] == 0xb7
}

// TestRestarts: a capture holding two runs of the same QP pair (same QPNs,
// here the same PSNs even) replays as two flows, each matching from both
// sides, whichever sign tells the runs apart, and says which.
func TestRestarts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shift time.Duration
		oob   bool
		why   string
	}{
		{"end to end", 0, true, "is older than frame"},
		{"in time order, with the out-of-band exchange", 10 * time.Second, true, "out-of-band record at frame"},
		{"in time order, RoCE only", 10 * time.Second, false, "acknowledged already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := twoRuns(t, tc.shift, tc.oob)
			flows := c.Flows()
			require.Len(t, flows, 2, "one flow per run")
			assert.Empty(t, flows[0].Start)
			assert.Contains(t, flows[1].Start, tc.why)
			for i, f := range flows {
				require.Len(t, f.Frames, 50, "flow %d", i+1)
				recs, err := c.CheckOOB(f)
				require.NoError(t, err)
				if tc.oob {
					assert.Len(t, recs, 2, "flow %d: its own run's records", i+1)
				}
				for _, host := range []Side{f.A, f.B} {
					r, err := Run(f, host.Addr, Options{})
					require.NoError(t, err)
					assert.True(t, r.OK(), "flow %d as %s: %v", i+1, host, r.Err())
					assert.Positive(t, r.Matched, "flow %d as %s", i+1, host)
				}
			}
		})
	}
}
