//go:build linux

package link

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// The send path of the UDP link: frames to sendmmsg messages, runs of
// equal-sized packets to one UDP GSO send (udp_gso.go), the ICRC corrected
// for the IPv4 ID the kernel gives each segment.

// Send sends frames in batches of sendmmsg. Frames the link cannot send
// faithfully are dropped and counted (see the file comment); they count as
// sent. An error from the socket (other than a datagram it refuses, which is
// counted) stops the batch: the count says how many frames were consumed.
func (u *UDP) Send(frames []Frame) (int, error) {
	u.txMu.Lock()
	defer u.txMu.Unlock()
	done := 0
	for done < len(frames) {
		n, m := u.fillTx(frames[done:])
		if m > 0 {
			if err := u.sendmmsg(m); err != nil {
				return done, err
			}
		}
		done += n
	}
	return done, nil
}

// fillTx prepares messages for frames, returning how many frames it consumed
// and how many messages it filled. With GSO, frames that can share a send
// (udp_gso.go) are appended to the message before as segments.
func (u *UDP) fillTx(frames []Frame) (consumed, msgs int) {
	t := &u.tx
	gso := u.gso && !u.gsoOff.Load()
	var f packet.Frame
	var run udpRun
	nio := 0
	// At most one batch of frames per call: each takes at most one message,
	// two iovecs and one ICRC slot.
	for consumed < len(frames) && consumed < len(t.icrc) && msgs < len(t.hdrs) {
		data := frames[consumed].Data
		j := consumed
		consumed++
		if err := packet.ParseFrame(data, &f); err != nil || f.IsIPv4() != u.v4 {
			u.stats.txBadFrame.Add(1)
			continue
		}
		if len(f.IP)+len(f.UDP)+len(f.Transport) > u.mtu {
			u.stats.txOversize.Add(1)
			continue
		}
		if !u.headerMatches(&f) {
			u.stats.txMismatch.Add(1)
			continue
		}
		u.stats.txBytes.Add(uint64(len(f.Transport)))
		key := u.runKey(&f)
		if gso && msgs > 0 && run.admits(key, len(f.Transport)) {
			nio += u.addSegment(&run, j, f.Transport, t.iovs[nio:])
			h := &t.hdrs[msgs-1]
			h.Hdr.SetIovlen(nio - run.iov0)
			t.segs[msgs-1]++
			if run.segs == 2 {
				// Now a run: tell the kernel the segment size.
				ctl := t.ctl[msgs-1][:h.Hdr.Controllen]
				ctl = appendCmsgUint16(ctl, unix.IPPROTO_UDP, unix.UDP_SEGMENT, uint16(run.seg))
				h.Hdr.Control = &t.ctl[msgs-1][0]
				h.Hdr.SetControllen(len(ctl))
			}
			continue
		}
		h := &t.hdrs[msgs]
		*h = unix.Mmsghdr{}
		iov := &t.iovs[nio]
		if len(f.Transport) > 0 {
			iov.Base = &f.Transport[0]
		} else {
			iov.Base = nil
		}
		iov.SetLen(len(f.Transport))
		h.Hdr.Iov = iov
		h.Hdr.SetIovlen(1)
		run = udpRun{key: key, seg: len(f.Transport), segs: 1, iov0: nio,
			max: maxRunSegs(len(f.Transport), len(f.IP))}
		nio++
		name := &t.names[msgs]
		h.Hdr.Name = (*byte)(unsafe.Pointer(name))
		ctl := t.ctl[msgs][:0]
		if u.v4 {
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
			*sa = unix.RawSockaddrInet4{Family: unix.AF_INET}
			binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], u.peerPort)
			copy(sa.Addr[:], f.IP[16:20])
			h.Hdr.Namelen = unix.SizeofSockaddrInet4
			if tos := f.IP[1]; tos != socketTOS {
				ctl = appendCmsgInt(ctl, unix.IPPROTO_IP, unix.IP_TOS, int32(tos))
			}
			if ttl := f.IP[8]; ttl != 0 && ttl != socketTTL {
				ctl = appendCmsgInt(ctl, unix.IPPROTO_IP, unix.IP_TTL, int32(ttl))
			}
		} else {
			*name = unix.RawSockaddrInet6{Family: unix.AF_INET6}
			binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&name.Port))[:], u.peerPort)
			copy(name.Addr[:], f.IP[24:40])
			h.Hdr.Namelen = unix.SizeofSockaddrInet6
			tclass := int32(binary.BigEndian.Uint16(f.IP[0:2]) >> 4 & 0xFF)
			if tclass != socketTOS {
				ctl = appendCmsgInt(ctl, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tclass)
			}
			if hops := f.IP[7]; hops != socketTTL {
				ctl = appendCmsgInt(ctl, unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, int32(hops))
			}
		}
		if len(ctl) > 0 {
			h.Hdr.Control = &t.ctl[msgs][0]
		}
		h.Hdr.SetControllen(len(ctl))
		t.segs[msgs] = 1
		msgs++
	}
	return consumed, msgs
}

// udpRun is the message fillTx is adding segments to.
type udpRun struct {
	key   udpRunKey
	seg   int // segment size: the first packet's length
	segs  int
	max   int  // segments allowed (maxRunSegs)
	short bool // the last segment is shorter than seg: the run is closed
	iov0  int  // the message's first iovec
}

// udpRunKey is what the segments of one send share: destination, TOS and
// TTL (the IP header fields the frame sets).
type udpRunKey struct {
	dst      [16]byte
	tos, ttl byte
}

func (u *UDP) runKey(f *packet.Frame) (k udpRunKey) {
	if u.v4 {
		copy(k.dst[:], f.IP[16:20])
		k.tos, k.ttl = f.IP[1], f.IP[8]
	} else {
		copy(k.dst[:], f.IP[24:40])
		k.tos, k.ttl = byte(binary.BigEndian.Uint16(f.IP[0:2])>>4), f.IP[7]
	}
	return k
}

// admits reports whether a packet of n bytes with key k may join the run.
// A shorter packet ends a run, but does not join a lone packet: that would
// make a run of two whose segment size is the lone packet's, where the
// shorter one more likely starts a run of its own size (a FIRST packet,
// with its RETH, before the MIDDLE ones), and a receiver with GRO sees
// fewer distinct sizes.
func (r *udpRun) admits(k udpRunKey, n int) bool {
	if r.short || r.segs >= r.max || n <= 0 || n > r.seg || k != r.key {
		return false
	}
	return n == r.seg || r.segs > 1
}

// addSegment appends the packet p (frame j's transport part) to the run,
// filling iovs, and returns how many iovecs it used. IPv4 segments after
// the first go out with the ICRC corrected for the ID the kernel gives them.
func (u *UDP) addSegment(r *udpRun, j int, p []byte, iovs []unix.Iovec) int {
	id := r.segs
	r.segs++
	if len(p) < r.seg {
		r.short = true
	}
	if !u.v4 || len(p) < packet.BTHLen+packet.ICRCLen {
		iovs[0].Base = &p[0]
		iovs[0].SetLen(len(p))
		return 1
	}
	n := len(p) - packet.ICRCLen
	icrc := binary.LittleEndian.Uint32(p[n:]) ^ u.tx.adj.Get(id, n)
	binary.LittleEndian.PutUint32(u.tx.icrc[j][:], icrc)
	iovs[0].Base = &p[0]
	iovs[0].SetLen(n)
	iovs[1].Base = &u.tx.icrc[j][0]
	iovs[1].SetLen(packet.ICRCLen)
	return 2
}

// headerMatches reports whether the frame's IP and UDP fields are the ones
// the kernel will write, so that its ICRC stays right.
func (u *UDP) headerMatches(f *packet.Frame) bool {
	if binary.BigEndian.Uint16(f.UDP) != u.local.Port() {
		return false
	}
	local := u.local.Addr()
	if u.v4 {
		if binary.BigEndian.Uint16(f.IP[4:]) != 0 || binary.BigEndian.Uint16(f.IP[6:]) != 0x4000 {
			return false
		}
		return local.IsUnspecified() || local.As4() == [4]byte(f.IP[12:16])
	}
	return local.IsUnspecified() || local.As16() == [16]byte(f.IP[8:24])
}

// appendCmsgUint16 appends a control message carrying a 16-bit value
// (UDP_SEGMENT's).
func appendCmsgUint16(b []byte, level, typ int, v uint16) []byte {
	n := len(b)
	b = b[:n+unix.CmsgSpace(2)]
	clear(b[n:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[n]))
	h.Level = int32(level)
	h.Type = int32(typ)
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[n+unix.CmsgLen(0)])) = v
	return b
}

// appendCmsgInt appends a control message carrying one C int.
func appendCmsgInt(b []byte, level, typ int, v int32) []byte {
	n := len(b)
	b = b[:n+unix.CmsgSpace(4)]
	clear(b[n:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[n]))
	h.Level = int32(level)
	h.Type = int32(typ)
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[n+unix.CmsgLen(0)])) = v
	return b
}

// sendmmsg sends the first m prepared messages. A datagram the kernel refuses
// (EMSGSIZE past the path MTU, an unreachable destination) is counted and
// skipped.
func (u *UDP) sendmmsg(m int) error {
	u.tx.pending = u.tx.hdrs[:m]
	u.tx.psegs = u.tx.segs[:m]
	u.tx.err = nil
	if err := u.raw.Write(u.tx.fn); err != nil {
		return err
	}
	return u.tx.err
}

// writeFD is the RawConn.Write callback, bound once so that sending does
// not allocate a closure.
func (u *UDP) writeFD(fd uintptr) bool {
	t := &u.tx
	for len(t.pending) > 0 {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&t.pending[0])), uintptr(len(t.pending)), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EAGAIN:
			return false
		case e == unix.EINTR:
			continue
		case e != 0:
			// sendmmsg reports an error only when the first datagram
			// failed: count it and go on with the rest.
			if isDatagramError(e) {
				if segs := t.psegs[0]; segs > 1 {
					u.stats.txErrors.Add(uint64(segs))
					if e == unix.EIO {
						u.gsoOff.Store(true) // see udp_gso.go
					}
				} else {
					u.stats.txErrors.Add(1)
				}
				t.pending = t.pending[1:]
				t.psegs = t.psegs[1:]
				continue
			}
			t.err = fmt.Errorf("udp link: sendmmsg: %w", e)
			return true
		}
		sent := 0
		for _, k := range t.psegs[:r] {
			sent += k
		}
		u.stats.txFrames.Add(uint64(sent))
		t.pending = t.pending[r:]
		t.psegs = t.psegs[r:]
	}
	return true
}

func isDatagramError(e unix.Errno) bool {
	switch e {
	case unix.EMSGSIZE, unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EINVAL, unix.EACCES, unix.EPERM, unix.ENOBUFS:
		return true
	}
	return false
}
