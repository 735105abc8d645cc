package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLossRecoveryCurve measures RDMA WRITE and READ goodput against random
// loss on both directions of a 10 Gb/s link, perftest's shape (64 KiB
// messages, path MTU 1024, 128 outstanding, timeout 14, retry_cnt 7), with
// the default recovery (rxe's timers and NAKs, except that a gap in a
// READ's responses is repaired at once: qp/read_repair.go) and with
// fast_recovery, three seeds each: fast_recovery must not be below (at 0.1%
// the two are equal to within the few frames a different placement of the
// losses makes), and for WRITE, where the default waits out its timer
// whenever a NAK or a resend is lost, well above. The table is in the
// README (go test ./sim -run TestLossRecoveryCurve -v).
func TestLossRecoveryCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of simulation")
	}
	const seeds = 3
	var table strings.Builder
	table.WriteString("| verb | loss | default (rxe's timers) Gb/s | fast_recovery Gb/s | ratio |\n|---|---|---|---|---|\n")
	for _, verb := range []string{"WRITE", "READ"} {
		for _, tc := range []struct {
			loss  string
			count int
			gain  float64 // WRITE: fast_recovery's goodput at least this times the default's
		}{
			{"0.1%", 2000, 0.99}, // a loss every ~8 messages: equal, within noise
			{"1%", 1000, 4},
			{"5%", 200, 4},
			{"10%", 60, 4},
		} {
			if verb == "READ" {
				// The default repairs a READ's holes without a stall
				// too; fast_recovery adds early retries of a lost repair.
				tc.gain = min(tc.gain, 0.99)
			}
			var gbps [2]float64
			for i, fast := range []bool{false, true} {
				for seed := uint64(1); seed <= seeds; seed++ {
					js := fmt.Sprintf(`{"name": "loss-%s-%s", "duration": "60s", "host_count": 2, "mtu": 1500, "fast_recovery": %v,
					"links": [{"a": "h0", "b": "h1", "bandwidth": "10Gbps", "delay": "2us", "fault": "loss=%s"}],
					"workloads": [{"from": ["h0"], "to": ["h1"], "ops": {%q: 1}, "size": {"fixed": 65536},
						"count": %d, "window": 128, "timeout": 14, "retry_cnt": 7}]}`,
						verb, tc.loss, fast, tc.loss, verb, tc.count)
					sc, err := Parse([]byte(js))
					require.NoError(t, err)
					res, err := Run(sc, seed)
					require.NoError(t, err)
					require.True(t, res.OK(), "%s", res.Summary())
					gbps[i] += res.Goodput / 1e9 / seeds
				}
			}
			fmt.Fprintf(&table, "| %s | %s | %.3f | %.3f | %.1f |\n", verb, tc.loss, gbps[0], gbps[1], gbps[1]/gbps[0])
			assert.GreaterOrEqual(t, gbps[1], tc.gain*gbps[0], "%s at %s loss: fast_recovery %.3f Gb/s, the default %.3f", verb, tc.loss, gbps[1], gbps[0])
		}
	}
	t.Log("\n" + table.String())
}
