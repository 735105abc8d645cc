package dropin

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// TestWriteSysfs: the view holds what ib_core shows for an rxe device, in
// its formats (GUIDs in four groups, GIDs in eight unshortened groups, GID
// types and their network devices), for the files UCX, hwloc and pyverbs
// read.
func TestWriteSysfs(t *testing.T) {
	dev, err := verbsapi.NewDevice("rxe7", verbsapi.LinkConfig{Kind: "mem", Addr: netip.MustParseAddrPort("10.0.0.7:0")})
	require.NoError(t, err)
	defer dev.Close()
	dir := filepath.Join(t.TempDir(), "s.sock.sys")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "class", "stale"), 0o755))
	require.NoError(t, WriteSysfs(dir, dev))

	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		require.NoError(t, err, rel)
		return string(b)
	}
	ib := "class/infiniband/rxe7/"
	for rel, want := range map[string]string{
		ib + "node_type":                       "1: CA\n",
		ib + "node_guid":                       "0000:00ff:fe00:0001\n",
		ib + "fw_ver":                          "softroce\n",
		ib + "ports/1/state":                   "4: ACTIVE\n",
		ib + "ports/1/phys_state":              "5: LinkUp\n",
		ib + "ports/1/link_layer":              "Ethernet\n",
		ib + "ports/1/gids/0":                  "fe80:0000:0000:0000:0000:00ff:fe00:0001\n",
		ib + "ports/1/gids/1":                  "0000:0000:0000:0000:0000:ffff:0a00:0007\n",
		ib + "ports/1/gid_attrs/types/0":       "RoCE v2\n",
		ib + "ports/1/gid_attrs/types/1":       "RoCE v2\n",
		ib + "ports/1/gid_attrs/ndevs/1":       "lo\n", // no interface holds the mem link's address
		ib + "ports/1/pkeys/0":                 "0xffff\n",
		"class/infiniband_verbs/uverbs0/ibdev": "rxe7\n",
		"class/infiniband_verbs/abi_version":   "6\n",
		"dev/infiniband/uverbs0":               "",
	} {
		assert.Equal(t, want, read(rel), rel)
	}
	_, err = os.Stat(filepath.Join(dir, ib, "device"))
	assert.True(t, os.IsNotExist(err), "no interface holds 10.0.0.7: no device/net/ to mislead pyverbs")
	_, err = os.Stat(filepath.Join(dir, "class", "stale"))
	assert.True(t, os.IsNotExist(err), "an earlier server's files are replaced")
	info, err := os.Stat(filepath.Join(dir, "mnt"))
	require.NoError(t, err)
	assert.True(t, info.IsDir(), "the view's staging mount point")
}

// TestNetdevOf: a GID names the interface holding its address, IPv4-mapped
// or not; an address nobody holds falls back to the loopback device, and
// says so.
func TestNetdevOf(t *testing.T) {
	lo := loopbackName(t)
	for _, tt := range []struct {
		addr string
		held bool
	}{{"127.0.0.1", true}, {"::ffff:127.0.0.1", true}, {"::1", true}, {"203.0.113.77", false}} {
		nd, held := netdevOf(netip.MustParseAddr(tt.addr))
		assert.Equal(t, lo, nd, tt.addr)
		assert.Equal(t, tt.held, held, tt.addr)
	}
}

// TestHeldNetdev: device/net/ names the interface that holds the device's
// first routable GID, and nothing when none does.
func TestHeldNetdev(t *testing.T) {
	lo := loopbackName(t)
	ll := verbsapi.GIDEntry{Index: 0, GID: netip.MustParseAddr("fe80::ff:fe00:1")}
	gid := func(a string) verbsapi.GIDEntry {
		return verbsapi.GIDEntry{Index: 1, GID: netip.AddrFrom16(netip.MustParseAddr(a).As16())}
	}
	assert.Equal(t, lo, heldNetdev([]verbsapi.GIDEntry{ll, gid("127.0.0.1")}))
	assert.Equal(t, "", heldNetdev([]verbsapi.GIDEntry{ll, gid("10.0.0.7")}))
	assert.Equal(t, "", heldNetdev([]verbsapi.GIDEntry{ll}))
}

func loopbackName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/lo/ifindex")
	if err != nil || strings.TrimSpace(string(b)) == "" {
		t.Skip("no loopback interface named lo")
	}
	return "lo"
}
