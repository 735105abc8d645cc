package rxe

import (
	"errors"
	"fmt"
	"net/netip"
)

// GIDTableLen is the GID table length the port reports, as rxe's (1024). Only
// the first few entries are populated; see QueryGID.
const GIDTableLen = 1024

// ErrNoGID is returned for a GID index that holds no GID.
var ErrNoGID = errors.New("no GID at that index")

// defaultGID returns the link-local GID ib_core puts at index 0 of a RoCE
// port: fe80::/64 with the modified EUI-64 interface ID of the MAC.
func defaultGID(mac [6]byte) netip.Addr {
	var g [16]byte
	g[0], g[1] = 0xfe, 0x80
	eui := eui64(mac)
	copy(g[8:], eui[:])
	return netip.AddrFrom16(g)
}

// eui64 returns the modified EUI-64 of a MAC (universal/local bit flipped,
// ff:fe in the middle). rxe's node GUID is the same eight bytes.
func eui64(mac [6]byte) [8]byte {
	return [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// buildGIDs lays out the GID table as ib_core does for an rxe port: the
// default link-local GID, then the IPv4 address as an IPv4-mapped GID, then
// the IPv6 address (unless it is the default GID already).
func buildGIDs(mac [6]byte, v4, v6 netip.Addr) []netip.Addr {
	g := []netip.Addr{defaultGID(mac)}
	if v4.IsValid() {
		g = append(g, netip.AddrFrom16(v4.As16()))
	}
	if v6.IsValid() && v6 != g[0] {
		g = append(g, v6)
	}
	return g
}

// QueryGID returns the GID at index, in its 16-byte form (IPv4 addresses as
// ::ffff:a.b.c.d), as ibv_query_gid does.
func (d *Device) QueryGID(index int) (netip.Addr, error) {
	if index < 0 || index >= len(d.gids) {
		return netip.Addr{}, fmt.Errorf("query gid %d on %s: %w", index, d.name, ErrNoGID)
	}
	return d.gids[index], nil
}

// GIDs returns the populated GID table entries, index order.
func (d *Device) GIDs() []netip.Addr { return append([]netip.Addr(nil), d.gids...) }

// GIDIndex returns the index of the GID that addr (plain or IPv4-mapped)
// names, or -1.
func (d *Device) GIDIndex(addr netip.Addr) int {
	a := addr.Unmap()
	for i, ip := range d.gidIPs {
		if ip == a {
			return i
		}
	}
	return -1
}

// ownIP reports whether ip (unmapped) is one of the device's GIDs: rxe's
// rxe_chk_dgid.
func (d *Device) ownIP(ip netip.Addr) bool {
	for _, g := range d.gidIPs {
		if g == ip {
			return true
		}
	}
	return false
}
