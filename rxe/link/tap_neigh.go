//go:build linux

package link

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// Neighbour resolution on the TAP link: ARP for IPv4 and IPv6 neighbour
// discovery, both ways. The link answers requests for its own addresses,
// asks for its peers' MACs, holds frames for an unresolved peer meanwhile
// (up to Linux's unres_qlen_bytes) and learns from what it hears.

// resolveLoop retries pending resolutions and gives up on them. It sleeps
// until the next attempt is due, or until Send starts a resolution: an idle
// link costs no wake-ups.
func (t *TAP) resolveLoop() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var retry []netip.Addr
	for {
		select {
		case <-t.done:
			timer.Stop()
			return
		case <-t.resolveC:
		case <-timer.C:
		}
		now := time.Now()
		retry = retry[:0]
		var next time.Time
		t.mu.Lock()
		for ip, n := range t.neigh {
			if n.resolved || n.tries == 0 {
				continue
			}
			if now.Before(n.next) {
				if next.IsZero() || n.next.Before(next) {
					next = n.next
				}
				continue
			}
			if n.tries >= t.opts.ResolveTries {
				t.stats.txResolveDrop.Add(uint64(len(n.pending)))
				delete(t.neigh, ip)
				continue
			}
			n.tries++
			n.next = now.Add(t.opts.ResolveTimeout)
			if next.IsZero() || n.next.Before(next) {
				next = n.next
			}
			retry = append(retry, ip)
		}
		t.mu.Unlock()
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		for _, ip := range retry {
			t.solicit(ip)
		}
	}
}

// learn records ip's MAC and sends the frames waiting for it.
func (t *TAP) learn(ip netip.Addr, mac [6]byte) {
	t.mu.Lock()
	n := t.neigh[ip]
	if n == nil {
		n = &neighbor{}
		t.neigh[ip] = n
	}
	n.mac, n.resolved, n.tries = mac, true, 0
	pending := n.pending
	n.pending, n.pendingBytes = nil, 0
	// Take the write lock before letting Sends see the peer resolved, so
	// that the frames that waited go out before any that did not.
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.mu.Unlock()
	for _, p := range pending {
		copy(p[0:6], mac[:])
		copy(p[6:12], t.mac[:])
		if t.write(p) != nil {
			return
		}
	}
}

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// solicit sends an ARP request (IPv4) or a neighbour solicitation (IPv6)
// for ip.
func (t *TAP) solicit(ip netip.Addr) {
	var b []byte
	if ip.Is4() {
		b = t.arp(1, broadcastMAC, [6]byte{}, ip)
		t.stats.arpRequests.Add(1)
	} else {
		if !t.ip6.IsValid() {
			return
		}
		b = t.ndp(135, ip, solicitedNode(ip), multicastMAC(solicitedNode(ip)), 1)
		t.stats.ndpSolicits.Add(1)
	}
	t.wmu.Lock()
	t.write(b)
	t.wmu.Unlock()
}

const (
	etherTypeARP = 0x0806
	arpLen       = 28
	minFrame     = 60 // Ethernet minimum without FCS
)

// arp builds an ARP packet (op 1 request, 2 reply) to target.
func (t *TAP) arp(op uint16, dmac, tha [6]byte, tpa netip.Addr) []byte {
	b := make([]byte, minFrame)
	copy(b[0:6], dmac[:])
	copy(b[6:12], t.mac[:])
	binary.BigEndian.PutUint16(b[12:], etherTypeARP)
	a := b[packet.EthernetLen:]
	binary.BigEndian.PutUint16(a[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], op)
	copy(a[8:14], t.mac[:])
	s := t.ip4.As4()
	copy(a[14:18], s[:])
	copy(a[18:24], tha[:])
	d := tpa.As4()
	copy(a[24:28], d[:])
	return b
}

// solicitedNode returns the solicited-node multicast address of ip.
func solicitedNode(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

func multicastMAC(ip netip.Addr) [6]byte {
	a := ip.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// ndp builds a neighbour solicitation (135) for target, or an advertisement
// (136) of the link's own address, with our MAC as the link-layer option
// (optType 1 source, 2 target).
func (t *TAP) ndp(typ byte, target, dstIP netip.Addr, dmac [6]byte, optType byte) []byte {
	const icmpLen = 4 + 4 + 16 + 8
	b := make([]byte, packet.EthernetLen+packet.IPv6Len+icmpLen)
	copy(b[0:6], dmac[:])
	copy(b[6:12], t.mac[:])
	binary.BigEndian.PutUint16(b[12:], packet.EtherTypeIPv6)
	ip := b[packet.EthernetLen:]
	binary.BigEndian.PutUint32(ip, 6<<28)
	binary.BigEndian.PutUint16(ip[4:], icmpLen)
	ip[6] = unix.IPPROTO_ICMPV6
	ip[7] = 255
	s, d := t.ip6.As16(), dstIP.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	m := ip[packet.IPv6Len:]
	m[0] = typ
	if typ == 136 {
		m[4] = 0x60 // solicited, override
	}
	tg := target.As16()
	copy(m[8:24], tg[:])
	m[24], m[25] = optType, 1
	copy(m[26:32], t.mac[:])
	binary.BigEndian.PutUint16(m[2:], icmp6Checksum(ip[8:24], ip[24:40], m))
	return b
}

func icmp6Checksum(src, dst, msg []byte) uint16 {
	var s uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	s += uint32(len(msg)) + unix.IPPROTO_ICMPV6
	add(msg)
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return ^uint16(s)
}

// handleARP answers requests for our address and learns from packets sent
// to us.
func (t *TAP) handleARP(b []byte) {
	if len(b) < packet.EthernetLen+arpLen {
		return
	}
	a := b[packet.EthernetLen:]
	if binary.BigEndian.Uint16(a[0:]) != 1 || binary.BigEndian.Uint16(a[2:]) != 0x0800 || a[4] != 6 || a[5] != 4 {
		return
	}
	op := binary.BigEndian.Uint16(a[6:])
	sha := [6]byte(a[8:14])
	spa := netip.AddrFrom4([4]byte(a[14:18]))
	tpa := netip.AddrFrom4([4]byte(a[24:28]))
	if tpa != t.ip4 || spa.IsUnspecified() {
		return
	}
	t.learn(spa, sha)
	if op == 1 {
		r := t.arp(2, sha, sha, spa)
		t.wmu.Lock()
		t.write(r)
		t.wmu.Unlock()
		t.stats.arpReplies.Add(1)
	}
}

// handleNDP answers neighbour solicitations for our IPv6 address and learns
// from advertisements; it reports whether b was neighbour discovery.
func (t *TAP) handleNDP(b []byte) bool {
	if !t.ip6.IsValid() || len(b) < packet.EthernetLen+packet.IPv6Len+24 {
		return false
	}
	ip := b[packet.EthernetLen:]
	if ip[6] != unix.IPPROTO_ICMPV6 {
		return false
	}
	m := ip[packet.IPv6Len:]
	if int(binary.BigEndian.Uint16(ip[4:])) > len(m) || ip[7] != 255 {
		return true
	}
	m = m[:binary.BigEndian.Uint16(ip[4:])]
	if len(m) < 24 { // type, code, checksum, flags, target
		return true
	}
	typ := m[0]
	if typ != 135 && typ != 136 {
		return typ >= 133 && typ <= 137
	}
	if icmp6Checksum(ip[8:24], ip[24:40], m) != 0 {
		return true
	}
	target := netip.AddrFrom16([16]byte(m[8:24]))
	src := netip.AddrFrom16([16]byte(ip[8:24]))
	var lladdr [6]byte
	have := false
	for opts := m[24:]; len(opts) >= 8; {
		l := int(opts[1]) * 8
		if l == 0 || l > len(opts) {
			break
		}
		if (typ == 135 && opts[0] == 1) || (typ == 136 && opts[0] == 2) {
			lladdr, have = [6]byte(opts[2:8]), true
		}
		opts = opts[l:]
	}
	switch typ {
	case 135:
		if target != t.ip6 {
			return true
		}
		dst, dmac := src, lladdr
		if src.IsUnspecified() || !have {
			// Duplicate address detection or no option: all-nodes.
			dst = netip.MustParseAddr("ff02::1")
			dmac = multicastMAC(dst)
		} else {
			t.learn(src, lladdr)
		}
		r := t.ndp(136, t.ip6, dst, dmac, 2)
		t.wmu.Lock()
		t.write(r)
		t.wmu.Unlock()
		t.stats.ndpAdverts.Add(1)
	case 136:
		if have {
			t.learn(target, lladdr)
		}
	}
	return true
}
