package interop

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// IPv6 GIDs: the guests and softroce's links get addresses in fd77::/64,
// and the RoCE traffic goes between those GIDs (the out-of-band TCP
// exchange stays on IPv4; it only carries the GIDs).
var (
	hostAddr6  = netip.MustParsePrefix("fd77::1/64") // the bridge's, softroce's --addr on the udp link
	stackAddr6 = netip.MustParseAddr("fd77::10")     // softroce's --addr6 on the tap link
	guestAddr6 = map[string]netip.Prefix{
		"a": netip.MustParsePrefix("fd77::2/64"),
		"b": netip.MustParsePrefix("fd77::3/64"),
	}
)

// softroceGID6 is softroce's GID index for its IPv6 address on link
// (rxe.buildGIDs): its table is the link-local default GID, then the
// IPv4-mapped one of an IPv4 address, then the IPv6 one. The udp link has
// only the IPv6 --addr, so that is index 1; the tap link has the IPv4 --addr
// as well as --addr6, so index 2.
func softroceGID6(link string) int {
	if link == "tap" {
		return 2
	}
	return 1
}

// withHostGID returns host with the value of every -g and -x replaced by
// gid: the IPv6 cases' softroce GID index depends on the link.
func withHostGID(host []string, gid int) []string {
	out := append([]string{}, host...)
	for i, a := range out {
		if (a == "-g" || a == "-x") && i+1 < len(out) {
			out[i+1] = strconv.Itoa(gid)
		}
	}
	return out
}

// ipv6State is the once-only IPv6 set-up of a suite: the bridge's address
// and each guest's address and the rxe0 GID index ib_core gave it.
type ipv6State struct {
	once sync.Once
	err  error
	gid  map[string]int // guest name -> GID index of its fd77:: address
}

// ipv6Cases are RC pingpong and the bandwidth tests, as their IPv4 cases but
// between IPv6 GIDs: {gid} in the guest script is the guest's index, and
// testSoftroce sets softroce's with withHostGID once it knows the link.
func ipv6Cases() []hostCase {
	v6 := func(hc hostCase) hostCase {
		hc.name += "_ipv6"
		hc.guest = strings.NewReplacer(" -g 1 ", " -g {gid} ", " -x 1 ", " -x {gid} ").Replace(hc.guest)
		hc.ipv6 = true
		return hc
	}
	return []hostCase{
		v6(pingpongCase("rc")),
		v6(perfCase("write", false, 4096, 20, 0)),
		v6(perfCase("read", false, 4096, 20, 0)),
		v6(perfCase("send", false, 4096, 20, 0)),
	}
}

// gidLineRE is one line of the guest's GID scan: "gid N TYPE ADDRESS".
var gidLineRE = regexp.MustCompile(`(?m)^gid (\d+) (.*) ([0-9a-f:]{39})$`)

// setupIPv6 gives the bridge and both guests their fd77:: addresses (no DAD)
// and finds each guest's RoCE v2 GID for it, once per suite.
func (s *suite) setupIPv6(t *testing.T) map[string]int {
	t.Helper()
	s.v6.once.Do(func() {
		if s.v6.err = s.net.EnableIPv6(s.ctx, hostAddr6); s.v6.err != nil {
			return
		}
		s.v6.gid = map[string]int{}
		for _, vm := range []*VM{s.a, s.b} {
			n, err := s.guestIPv6(vm, guestAddr6[vm.Name])
			if err != nil {
				s.v6.err = err
				return
			}
			s.v6.gid[vm.Name] = n
			t.Logf("guest %s: %s is rxe0 GID %d", vm.Name, guestAddr6[vm.Name].Addr(), n)
		}
	})
	require.NoError(t, s.v6.err, "ipv6 set-up")
	return s.v6.gid
}

// guestIPv6 adds addr to the guest's eth0 and returns the index of the
// RoCE v2 GID ib_core makes of it (it appears shortly after the address).
func (s *suite) guestIPv6(vm *VM, addr netip.Prefix) (int, error) {
	script := fmt.Sprintf(`/usr/sbin/ip -6 addr replace %s dev eth0 nodad || exit 98
p=/sys/class/infiniband/rxe0/ports/1
for try in $(seq 100); do
	grep -qx %s $p/gids/[0-9] $p/gids/[0-9][0-9] 2>/dev/null && break
	sleep 0.1
done
for n in $(seq 0 15); do
	echo "gid $n $(cat $p/gid_attrs/types/$n 2>/dev/null) $(cat $p/gids/$n)"
done`, addr, wireGID(addr.Addr()))
	r, err := vm.Run(s.ctx, script, 30*time.Second)
	if err != nil {
		return 0, fmt.Errorf("ipv6 on guest %s: %w", vm.Name, err)
	}
	if r.Status != 0 {
		return 0, fmt.Errorf("ipv6 on guest %s: status %d:\n%s", vm.Name, r.Status, r.Output)
	}
	for _, m := range gidLineRE.FindAllStringSubmatch(r.Output, -1) {
		if m[3] == wireGID(addr.Addr()) && m[2] == "RoCE v2" {
			return strconv.Atoi(m[1])
		}
	}
	return 0, fmt.Errorf("guest %s: no RoCE v2 GID for %s in rxe0's table:\n%s", vm.Name, addr.Addr(), r.Output)
}

// roceAddrs returns the source and destination addresses of every RoCE
// packet in a `softroce decode` listing (IPv6 sources print as [a]:port).
func roceAddrs(decoded string) []netip.Addr {
	var as []netip.Addr
	for _, m := range decodeLineRE.FindAllStringSubmatch(decoded, -1) {
		for _, s := range m[1:3] {
			a, err := netip.ParseAddr(strings.Trim(s, "[]"))
			if err != nil {
				a = netip.Addr{} // counts as outside any prefix
			}
			as = append(as, a)
		}
	}
	return as
}

// requireAllIn checks that the capture's RoCE packets all went between
// addresses of prefix: an IPv6 case must not fall back to IPv4 GIDs.
func requireAllIn(t *testing.T, decoded string, prefix netip.Prefix) {
	t.Helper()
	as := roceAddrs(decoded)
	require.NotEmpty(t, as, "no RoCE packet in the listing")
	for _, a := range as {
		require.True(t, prefix.Contains(a), "RoCE packet address %v outside %v", a, prefix)
	}
}
