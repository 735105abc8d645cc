//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
	"unsafe"

	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// The receive path of the UDP link: recvmmsg batches (or GRO runs,
// udp_gro.go) to frames, each with an Ethernet, IP and UDP header rebuilt
// in front of its payload from the socket's control messages.

// Recv reads a batch of datagrams with recvmmsg and returns them as rebuilt
// Ethernet frames; their data stays valid until the next Recv. Recv is meant
// for one goroutine.
func (u *UDP) Recv(frames []Frame) (int, error) {
	r := &u.rx
	if len(frames) == 0 {
		return 0, nil
	}
	for {
		if out := u.handOut(frames); out > 0 {
			u.stats.rxFrames.Add(uint64(out))
			return out, nil
		}
		if r.got > 0 {
			u.adaptGRO()
			if r.armBusyPoll(time.Now) {
				u.stats.rxBusyPolls.Add(1)
			}
		}
		want := min(len(frames), len(r.hdrs))
		if r.gro {
			r.layout(r.nextChunk)
		}
		for i := 0; i < want; i++ {
			h := &r.hdrs[i]
			*h = unix.Mmsghdr{}
			if r.gro {
				h.Hdr.Iov = &r.giovs[i][0]
				h.Hdr.SetIovlen(r.niov)
			} else {
				h.Hdr.Iov = &r.iovs[i]
				h.Hdr.SetIovlen(1)
			}
			h.Hdr.Name = (*byte)(unsafe.Pointer(&r.names[i]))
			h.Hdr.Namelen = unix.SizeofSockaddrInet6
			h.Hdr.Control = &r.ctl[i][0]
			h.Hdr.SetControllen(rxControlLen)
		}
		r.want = want
		r.got, r.err, r.dgrams = 0, nil, 0
		r.next, r.seg = 0, 0
		if err := u.raw.Read(r.fn); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0, ErrClosed
			}
			return 0, fmt.Errorf("udp link: %w", err)
		}
		if r.err != nil {
			return 0, r.err
		}
	}
}

// handOut fills frames with the datagrams of the last recvmmsg not handed
// out yet, and returns how many it filled. A message's first datagram is
// rebuilt in place; the others of a GRO message are copied to spare
// buffers first, each behind its own headroom.
func (u *UDP) handOut(frames []Frame) int {
	r := &u.rx
	out, spare := 0, 0
	// A GRO datagram may take a spare buffer (datagram), so the spares
	// bound the loop as much as the frames do.
	for r.next < r.got && out < len(frames) && (!r.gro || spare < len(r.spare)) {
		h := &r.hdrs[r.next]
		n := int(h.Len)
		if r.seg == 0 {
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				u.stats.rxTruncated.Add(1)
				r.next++
				continue
			}
			if !u.parseMsg(r.next, &r.info) {
				r.next++
				continue
			}
			if r.info.gso > 0 {
				r.nextChunk = r.info.gso
			} else if r.gro && !r.sockGRO && r.nextChunk > 0 && n > u.mtu-u.ipUDPLen() {
				// A run the kernel coalesced while GRO was on, read after
				// it was switched off: the socket no longer says its
				// datagram size, so take the last one's. A wrong guess
				// costs nothing more than the drop it replaces: the
				// datagrams then fail their ICRC. (A run no longer than
				// one datagram can be is not told from one: it arrives
				// as one frame whose ICRC fails, lost as before; small
				// equal datagrams in a run at the moment of the switch,
				// after 32 batches of ping-pong, are the rare case.)
				r.info.gso = r.nextChunk
			}
		}
		stride := n
		if g := r.info.gso; g > 0 && g < n {
			stride = g
		}
		r.dgrams++
		off := r.seg * stride
		segLen := min(stride, n-off)
		msg, seg := r.next, r.seg
		if r.seg++; off+segLen >= n {
			r.next, r.seg = r.next+1, 0
		}
		if segLen > u.mtu-u.ipUDPLen() {
			// Longer than the link takes: dropped before it can use a
			// spare buffer (a peer sending oversized GSO runs must not
			// exhaust them).
			u.stats.rxTruncated.Add(1)
			continue
		}
		buf := r.bufs[msg]
		if r.gro {
			buf = r.datagram(msg, seg, stride, segLen, &spare)
		}
		if headroom+segLen > len(buf) {
			u.stats.rxTruncated.Add(1)
			continue
		}
		u.stats.rxBytes.Add(uint64(segLen))
		frames[out] = Frame{Data: u.rebuild(buf, segLen, &r.info), IPIDUnknown: u.v4}
		out++
	}
	return out
}

// readFD is the RawConn.Read callback, bound once so that receiving does
// not allocate a closure.
func (u *UDP) readFD(fd uintptr) bool {
	r := &u.rx
	polled := false
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.got = int(n)
			if polled {
				u.stats.rxBusyPollHits.Add(1)
			}
			return true
		case unix.EAGAIN:
			if r.keepPolling(time.Now) {
				polled = true
				continue
			}
			return false
		case unix.EINTR:
			continue
		}
		r.err = fmt.Errorf("udp link: recvmmsg: %w", e)
		return true
	}
}

// udpRxInfo is what a received message says about its datagrams, from its
// source address and control messages.
type udpRxInfo struct {
	tos, ttl byte
	dst      [16]byte
	src      netip.Addr
	sport    uint16
	gso      int // datagram size of a GRO message, 0 for one datagram
}

// parseMsg reads message i's source and control messages into info,
// reporting false (and counting) for a source of the wrong family.
func (u *UDP) parseMsg(i int, info *udpRxInfo) bool {
	r := &u.rx
	h := &r.hdrs[i]
	*info = udpRxInfo{}
	haveDst := false
	ctl := r.ctl[i][:h.Hdr.Controllen]
	for len(ctl) >= unix.SizeofCmsghdr {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		clen := int(c.Len)
		if clen < unix.SizeofCmsghdr || clen > len(ctl) {
			break
		}
		data := ctl[unix.CmsgLen(0):clen]
		switch {
		case c.Level == unix.IPPROTO_IP && c.Type == unix.IP_TOS && len(data) >= 1:
			info.tos = data[0]
		case c.Level == unix.IPPROTO_IP && c.Type == unix.IP_TTL && len(data) >= 4:
			info.ttl = byte(*(*int32)(unsafe.Pointer(&data[0])))
		case c.Level == unix.IPPROTO_IP && c.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			copy(info.dst[12:], pi.Addr[:])
			haveDst = true
		case c.Level == unix.IPPROTO_IPV6 && c.Type == unix.IPV6_TCLASS && len(data) >= 4:
			info.tos = byte(*(*int32)(unsafe.Pointer(&data[0])))
		case c.Level == unix.IPPROTO_IPV6 && c.Type == unix.IPV6_HOPLIMIT && len(data) >= 4:
			info.ttl = byte(*(*int32)(unsafe.Pointer(&data[0])))
		case c.Level == unix.IPPROTO_IPV6 && c.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			info.dst = pi.Addr
			haveDst = true
		case c.Level == unix.IPPROTO_UDP && c.Type == unix.UDP_GRO && len(data) >= 4:
			info.gso = int(*(*int32)(unsafe.Pointer(&data[0])))
		}
		ctl = ctl[min(len(ctl), unix.CmsgSpace(clen-unix.CmsgLen(0))):]
	}
	if !haveDst {
		info.dst = u.local.Addr().As16()
	}
	name := &r.names[i]
	info.sport = binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&name.Port))[:])
	if u.v4 {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		if sa.Family != unix.AF_INET {
			u.stats.rxBadSource.Add(1)
			return false
		}
		info.src = netip.AddrFrom4(sa.Addr)
	} else {
		if name.Family != unix.AF_INET6 {
			u.stats.rxBadSource.Add(1)
			return false
		}
		info.src = netip.AddrFrom16(name.Addr)
	}
	return true
}

// rebuild writes Ethernet, IP and UDP headers in front of the n-byte
// datagram at buf[headroom:] and returns the whole frame.
func (u *UDP) rebuild(buf []byte, n int, info *udpRxInfo) []byte {
	hl := u.ipUDPLen()
	start := headroom - hl - packet.EthernetLen
	frame := buf[start : headroom+n]
	peerMAC := syntheticMAC(info.src)
	copy(frame[0:6], u.mac[:])
	copy(frame[6:12], peerMAC[:])
	ip := frame[packet.EthernetLen:]
	udpLen := packet.UDPLen + n
	if u.v4 {
		binary.BigEndian.PutUint16(frame[12:], packet.EtherTypeIPv4)
		ip[0] = 0x45
		ip[1] = info.tos
		binary.BigEndian.PutUint16(ip[2:], uint16(packet.IPv4Len+udpLen))
		// ID and flags are unknown: write ID 0 and DF, what Linux
		// unconnected sockets (this link's sender) write.
		ip[4], ip[5], ip[6], ip[7] = 0, 0, 0x40, 0
		ip[8] = info.ttl
		ip[9] = unix.IPPROTO_UDP
		clear(ip[10:12])
		s4 := info.src.As4()
		copy(ip[12:16], s4[:])
		copy(ip[16:20], info.dst[12:])
		binary.BigEndian.PutUint16(ip[10:], packet.IPv4HeaderChecksum(ip[:packet.IPv4Len]))
		ip = ip[packet.IPv4Len:]
	} else {
		binary.BigEndian.PutUint16(frame[12:], packet.EtherTypeIPv6)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(info.tos)<<20)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = unix.IPPROTO_UDP
		ip[7] = info.ttl
		s16 := info.src.As16()
		copy(ip[8:24], s16[:])
		copy(ip[24:40], info.dst[:])
		ip = ip[packet.IPv6Len:]
	}
	binary.BigEndian.PutUint16(ip[0:], info.sport)
	binary.BigEndian.PutUint16(ip[2:], packet.UDPPort)
	binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
	clear(ip[6:8])
	return frame
}

func (u *UDP) ipUDPLen() int {
	if u.v4 {
		return packet.IPv4Len + packet.UDPLen
	}
	return packet.IPv6Len + packet.UDPLen
}
