package interop

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetransmissions checks the resent-packet count the loss cases assert
// on, with lines as `softroce decode` prints them.
func TestRetransmissions(t *testing.T) {
	const (
		w1   = "1 0.000000000 10.77.1.1:49152 -> 10.77.1.2 RC_RDMA_WRITE_FIRST qpn=0x000011 psn=100 ackreq=0 len=1024 icrc=ok\n"
		w2   = "2 0.000100000 10.77.1.1:49152 -> 10.77.1.2 RC_RDMA_WRITE_LAST qpn=0x000011 psn=101 ackreq=1 len=1024 icrc=ok\n"
		w1re = "9 0.070000000 10.77.1.1:49152 -> 10.77.1.2 RC_RDMA_WRITE_FIRST qpn=0x000011 psn=100 ackreq=0 len=1024 icrc=ok\n"
		ack  = "3 0.000200000 10.77.1.2:50000 -> 10.77.1.1 RC_ACKNOWLEDGE qpn=0x000012 psn=101 ackreq=0 syndrome=0x00 msn=1 len=0 icrc=ok\n"
		rr   = "4 0.000300000 10.77.1.2:50000 -> 10.77.1.1 RC_RDMA_READ_RESPONSE_ONLY qpn=0x000012 psn=100 ackreq=0 len=64 icrc=ok\n"
	)
	for _, tc := range []struct {
		name string
		in   string
		want int
	}{
		{"none", w1 + w2 + ack, 0},
		{"resent write", w1 + w2 + w1re, 1},
		{"acks repeat freely", ack + ack + ack, 0},
		{"read response resent", rr + rr, 1},
		{"same psn other direction", w1 + rr, 0},
		{"total line ignored", w1 + "# total: frames=1 roce=1 good=1 bad=0\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, retransmissions(tc.in))
		})
	}
}
