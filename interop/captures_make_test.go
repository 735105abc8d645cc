package interop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// replayClasses are kernel rxe against kernel rxe (guest a the server,
// guest b the client) for the classes of traffic replay must infer
// things from (issue 15): deep read/atomic windows over several QPs, RNR
// behind a receive queue one deep (plain and SRQ), one QP pair reused by
// two runs, and CM-connected flows.
var replayClasses = []struct {
	name, server, client string
	cm                   bool // connects with rdma_cm: no TCP to wait for
}{
	// First after boot, so its QPNs are 0x11 on both guests, as in
	// guest_guest_rc.pcap (an earlier boot): merged with it (mergecap),
	// one QP pair reused by two runs.
	{"rc_pingpong_boot", "ibv_rc_pingpong -d rxe0 -g 1 -n 5", "", false},
	{"atomic_q2_fadd", "ib_atomic_bw -d rxe0 -x 1 -F -q 2 -n 20 -A FETCH_AND_ADD", "", false},
	{"atomic_q2_cas", "ib_atomic_bw -d rxe0 -x 1 -F -q 2 -n 20 -A CMP_AND_SWAP", "", false},
	{"read_q2", "ib_read_bw -d rxe0 -x 1 -F -q 2 -n 20 -s 4096", "", false},
	{"send_rnr", "ib_send_bw -d rxe0 -x 1 -F -r 1 -n 30 -s 64", "", false},
	{"send_rnr_srq", "ib_send_bw -d rxe0 -x 1 -F -r 1 -n 30 -s 64 --use-srq", "", false},
	{"rc_pingpong_twice", "ibv_rc_pingpong -d rxe0 -g 1 -n 5", "", false},
	{"ucmatose", "ucmatose -c 2", "ucmatose -c 2 -s PEER", true},
}

// TestMakeReplayCaptures makes replayClasses' captures into the directory
// SOFTROCE_INTEROP_CAPTURES names (testdata/pcaps/interop is where the
// committed ones are; TestReplayEveryCapture in replay/ replays them).
func TestMakeReplayCaptures(t *testing.T) {
	dir := os.Getenv("SOFTROCE_INTEROP_CAPTURES")
	if dir == "" {
		t.Skip("set SOFTROCE_INTEROP_CAPTURES=DIR (and SOFTROCE_INTEROP=1) to make the replay classes' captures")
	}
	skipUnlessInterop(t, "SOFTROCE_INTEROP", "interop/run.sh")
	s := newSuite(t, 10*time.Minute, "")
	for _, rc := range replayClasses {
		t.Run(rc.name, func(t *testing.T) {
			runs := 1
			if rc.name == "rc_pingpong_twice" {
				runs = 2
			}
			client := rc.client
			if client == "" {
				client = rc.server + " PEER"
			}
			client = replacePeer(client, s.a.IP.String())
			c := s.capture(t, "guest_guest_"+rc.name)
			for run := 0; run < runs; run++ {
				job, err := s.a.Start(s.ctx, rc.server, 60*time.Second)
				require.NoError(t, err)
				ready := waitListenScript
				if rc.cm {
					ready = `for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep -q LISTEN && exit 0; sleep 0.1; done; exit 1`
				}
				r, err := s.a.Run(s.ctx, ready, 30*time.Second)
				require.NoError(t, err)
				require.Equal(t, 0, r.Status, "server never listened")
				cli, err := s.b.Run(s.ctx, client, 60*time.Second)
				require.NoError(t, err)
				sr, err := job.Wait()
				require.NoError(t, err)
				require.Equal(t, 0, cli.Status, "client:\n%s\nserver:\n%s", cli.Output, sr.Output)
				require.Equal(t, 0, sr.Status, "server:\n%s", sr.Output)
			}
			_ = s.checkCapture(t, c, 4)
			out := filepath.Join(dir, filepath.Base(c.Path))
			b, err := os.ReadFile(c.Path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(out, b, 0o644))
			t.Logf("%s: %d bytes", out, len(b))
		})
	}
}

func replacePeer(cmd, peer string) string { return strings.ReplaceAll(cmd, "PEER", peer) }
