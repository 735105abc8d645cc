package interop

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadRepairs holds the READ-repair check to captures written out as
// `softroce decode` lists them: a first READ of 4 KiB at PSN 100 from
// softroce, then each case's lines. "crossed" is what CI saw once (frames
// 377 and 378 of softroce_udp_client_perf_read_netem10, 1 us apart).
func TestReadRepairs(t *testing.T) {
	req := func(frame int, at string, psn, off, n int) string {
		return fmt.Sprintf("%d %s 10.77.1.1:4791 -> 10.77.1.2 RC_RDMA_READ_REQUEST qpn=0x0000b7 psn=%d ackreq=1 va=0x%016x rkey=0x0000449a dlen=%d len=0 icrc=ok",
			frame, at, psn, 0x557c1f00b000+off, n)
	}
	resp := func(frame int, at, op string, psn int) string {
		return fmt.Sprintf("%d %s 10.77.1.2:52263 -> 10.77.1.1 RC_RDMA_READ_RESPONSE_%s qpn=0x000011 psn=%d ackreq=0 len=1024 icrc=ok",
			frame, at, op, psn)
	}
	first := req(1, "0.100000000", 100, 0, 4096)
	for _, c := range []struct {
		name                string
		lines               []string
		repairs, subsets    int
		unanswered, crossed int
	}{
		{"answered", []string{first, resp(2, "0.100100000", "FIRST", 100),
			req(3, "0.170000000", 101, 1024, 1024), resp(4, "0.170100000", "LAST", 101)}, 1, 1, 0, 0},
		{"never answered", []string{first, resp(2, "0.100100000", "FIRST", 100),
			req(3, "0.170000000", 101, 1024, 1024)}, 1, 0, 1, 0},
		{"crossed", []string{first, resp(2, "0.100100000", "FIRST", 100),
			req(3, "0.170000000", 101, 1024, 1024), resp(4, "0.170100000", "LAST", 101),
			req(5, "0.240000000", 101, 1024, 1024), // a second repair, its answer
			resp(6, "0.508884000", "LAST", 101),    // ... comes as a third goes out
			req(7, "0.508885000", 101, 1024, 1024)}, 3, 2, 0, 1},
		{"answered long before", []string{first, resp(2, "0.100100000", "MIDDLE", 101),
			req(3, "0.170000000", 101, 1024, 1024)}, 1, 0, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readRepairs(strings.Join(c.lines, "\n") + "\n")
			require.NoError(t, err)
			assert.Equal(t, "10.77.1.1", got.requester)
			assert.Equal(t, c.repairs, got.repairs, "repairs")
			assert.Equal(t, c.subsets, got.subsets, "answered as subsets")
			assert.Len(t, got.unanswered, c.unanswered, "unanswered: %v", got.unanswered)
			assert.Len(t, got.crossed, c.crossed, "crossed: %v", got.crossed)
		})
	}
}
