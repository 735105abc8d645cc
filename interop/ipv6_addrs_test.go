package interop

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoceAddrs checks the address parsing the IPv6 cases assert on, with
// lines as `softroce decode` prints them (an IPv6 source with its port in
// brackets).
func TestRoceAddrs(t *testing.T) {
	const (
		v6  = "12 1.066568000 [fd77::1]:4791 -> fd77::2 RC_SEND_FIRST qpn=0x000011 psn=4892242 ackreq=0 len=1024 icrc=ok\n"
		v4  = "1 0.000000000 10.77.1.1:49152 -> 10.77.1.2 RC_RDMA_WRITE_FIRST qpn=0x000011 psn=100 ackreq=0 len=1024 icrc=ok\n"
		tot = "# total: frames=2 roce=2 good=2 bad=0\n"
	)
	p := netip.MustParsePrefix("fd77::/64")
	for _, tc := range []struct {
		name string
		in   string
		want []string
		in6  bool // every address in fd77::/64
	}{
		{"ipv6", v6 + tot, []string{"fd77::1", "fd77::2"}, true},
		{"ipv4", v4, []string{"10.77.1.1", "10.77.1.2"}, false},
		{"mixed", v6 + v4, []string{"fd77::1", "fd77::2", "10.77.1.1", "10.77.1.2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := roceAddrs(tc.in)
			var got []string
			all := true
			for _, a := range as {
				got = append(got, a.String())
				all = all && p.Contains(a)
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.in6, all)
		})
	}
}
