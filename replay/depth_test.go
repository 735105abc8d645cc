package replay

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReplayEveryCapture: every capture in testdata/pcaps (kernel rxe's,
// the interop harness's and softroce's own) replays to a match from both
// sides of every flow, or from the responder where the flow shows loss. The
// interop perftest atomic capture needs the inferred read/atomic depth:
// softroce's client had 20 atomics outstanding, more than the default 16,
// and the replay used to stop after 16 ("softroce has nothing to send
// here"). The RNR capture needs the inferred receive queue: with every
// receive posted at the start softroce acknowledged where the host had
// answered RNR NAKs.
func TestReplayEveryCapture(t *testing.T) {
	var files []string
	for _, pat := range []string{"rxe/*.pcap*", "interop/*.pcap", "softroce/*.pcapng"} {
		m, err := filepath.Glob(filepath.Join("..", "testdata", "pcaps", pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	notes := 0
	for _, path := range files {
		c, err := Load(path)
		require.NoError(t, err)
		for i, f := range c.Flows() {
			for _, host := range []Side{f.A, f.B} {
				opt := Options{}
				if f.Lossy() {
					if host != f.Responder() {
						continue
					}
					opt.ResponderOnly = true
				}
				r, err := Run(f, host.Addr, opt)
				require.NoError(t, err, "%s flow %d as %s", path, i+1, host)
				assert.True(t, r.OK(), "%s flow %d as %s: %v", filepath.Base(path), i+1, host, r.Err())
				for _, n := range r.Notes {
					notes++
					switch {
					case strings.Contains(path, "perf_atomic"):
						assert.Contains(t, n, "had 20 READ/atomic requests outstanding")
					case strings.Contains(path, "send_rnr_rxdepth1"):
						assert.Contains(t, n, "the host answered 29 RNR NAKs")
					case strings.Contains(path, "guest_guest_send_rnr"):
						// kernel rxe's own receiver, one receive deep
						// (plain RQ and SRQ): perftest reposts faster
						// than softroce did, about every other SEND.
						assert.Regexp(t, `the host answered \d+ RNR NAKs`, n)
					}
				}
			}
		}
	}
	assert.Positive(t, notes, "some capture needed an inferred depth")
}
