//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// The UDP link speaks RoCE v2 through an ordinary kernel UDP socket bound to
// ADDR:4791, so it needs no privileges; this is also how rxe itself sends.
//
// Sending, the link strips Ethernet, IP and UDP from the device's frame and
// hands the transport packet to sendmmsg, addressed to the frame's
// destination IP and port 4791, with the frame's TOS/traffic class and
// TTL/hop limit set on the socket (socketTOS, socketTTL) or, for frames that
// differ, as per-packet control messages. The kernel writes the IP and
// UDP headers itself, so the device must compute the ICRC over what the
// kernel will write: the socket's port as the UDP source port (see
// FixedSourcePort) and, for IPv4, DF set with IP ID 0 — path-MTU discovery is
// on (IP_PMTUDISC_DO), and Linux gives DF datagrams from unconnected sockets
// ID 0. Frames whose source address, source port or IPv4 ID/DF differ from
// that are dropped and counted (their ICRC could not be right), as are
// frames larger than the MTU.
//
// Receiving, recvmmsg returns payloads with the source address and port,
// the destination address (IP_PKTINFO / IPV6_PKTINFO, for a socket bound to
// all addresses; otherwise it is the bound one) and the TOS/TTL
// (traffic class/hop limit) from control messages, and the link rebuilds an
// Ethernet, IP and UDP header in front of each payload, in the same buffer
// (no copy). The sender's IPv4 ID and flags are not visible through a socket,
// so rebuilt IPv4 headers carry ID 0 and DF (right for senders like this
// link) and frames are marked IPIDUnknown: check them with
// CheckICRCUnknownIPID. The IPv6 flow label is
// likewise not visible (rebuilt as 0) but the ICRC masks it. IPv6 sockets
// accept zero UDP checksums (UDP_NO_CHECK6_RX), which rxe sends.
//
// Where the kernel has it, the link sends runs of equal-sized packets with
// UDP segmentation offload (udp_gso.go): the datagrams on the wire are the
// same, but the kernel's per-datagram work is done once per run
// (UDPOptions.NoGSO turns it off). UDP GRO on receive (udp_gro.go) is there
// too, off unless UDPOptions.GRO asks for it.

// DefaultUDPBatch is the number of datagrams a UDP link reads per recvmmsg.
const DefaultUDPBatch = 64

// DefaultUDPSocketBuffer is the socket buffer size a UDP link asks for by
// default. An RC requester may have 128 packets in flight, 512 KiB at MTU
// 4096, which the kernel accounts at about twice that: Linux's usual 208 KiB
// default receive buffer drops most of such a window, and every drop stalls
// the QP until its retransmit timeout (a 64 KiB WRITE benchmark on loopback
// fell from 1.8 GB/s to 3 MB/s).
const DefaultUDPSocketBuffer = 4 << 20

// udpNoCheck6Rx is UDP_NO_CHECK6_RX (include/uapi/linux/udp.h).
const udpNoCheck6Rx = 102

// UDPOptions configures a UDP link.
type UDPOptions struct {
	// Addr is the local address to bind; port 0 means 4791. An unspecified
	// address (0.0.0.0, ::) binds all addresses of that family; the kernel
	// then picks each datagram's source address and the link does not check
	// it.
	Addr netip.AddrPort
	// PeerPort is the UDP port datagrams are sent to; 0 means 4791. Other
	// ports are a testing aid (two links on one IPv6 loopback address):
	// received frames always show destination port 4791.
	PeerPort uint16
	// MTU is the largest IP packet sent or received; 0 means 1500.
	MTU int
	// Batch is the number of datagrams per recvmmsg; 0 means DefaultUDPBatch.
	Batch int
	// SocketBuffer is the SO_RCVBUF and SO_SNDBUF size to ask for: 0 means
	// DefaultUDPSocketBuffer, a negative value leaves the kernel's default.
	// The kernel caps it at net.core.rmem_max / wmem_max unless the process
	// may exceed those (CAP_NET_ADMIN), which the link then does.
	SocketBuffer int
	// NoGSO turns off UDP segmentation offload (UDP_SEGMENT, udp_gso.go),
	// which the link otherwise uses when the kernel has it: every packet is
	// then its own datagram in sendmmsg, as with a kernel without it.
	NoGSO bool
	// GRO turns on UDP receive offload (UDP_GRO, udp_gro.go): the kernel
	// hands over runs of datagrams as one message, fewer system calls for
	// bulk traffic. It is off by default because it cost latency-bound
	// traffic milliseconds on a busy machine: Debian's ib_write_lat on the
	// drop-in library, whose two processes spin on the CPU, went from about
	// 0.25 ms to 3.5 ms per round trip on UDP loopback with it on.
	GRO bool
}

// UDP is a link over a kernel UDP socket.
type UDP struct {
	conn     *net.UDPConn
	raw      syscall.RawConn
	local    netip.AddrPort
	v4       bool
	peerPort uint16
	mtu      int
	mac      [6]byte

	txMu sync.Mutex
	tx   udpTx
	rx   udpRx

	// gso says whether sends batch runs of packets with UDP_SEGMENT;
	// gsoOff is set when the kernel refused such a run (udp_gso.go).
	gso    bool
	gsoOff atomic.Bool

	stats udpCounters
}

type udpCounters struct {
	txFrames, txBytes, txOversize, txBadFrame, txMismatch, txErrors atomic.Uint64
	rxFrames, rxBytes, rxTruncated, rxBadSource                     atomic.Uint64
}

// headroom is the room left in front of each receive buffer for the rebuilt
// Ethernet, IP and UDP headers.
const headroom = packet.EthernetLen + packet.IPv6Len + packet.UDPLen

// socketTOS and socketTTL are the TOS (traffic class) and TTL (hop limit)
// the link sets on its socket: the values the device writes unless an
// address vector asks for others. Frames with them go without per-datagram
// control messages, which the kernel would otherwise parse for each one.
const (
	socketTOS = 0
	socketTTL = 64
)

// control message buffer sizes: room for pktinfo, TOS/tclass and TTL/hop
// limit, and on sending for UDP_SEGMENT.
const rxControlLen = 128
const txControlLen = 3 * 24

// udpTx holds the messages of one sendmmsg. A message is one datagram, or
// with GSO a run of segments (udp_gso.go): segs[i] says how many, and its
// iovecs are consecutive in iovs, one per segment, or two for a segment
// whose ICRC the link corrected (the packet without its ICRC, then icrc[j]
// for the segment's frame j).
type udpTx struct {
	hdrs  []unix.Mmsghdr
	segs  []int
	iovs  []unix.Iovec            // two per frame at most
	icrc  [][4]byte               // per frame
	names []unix.RawSockaddrInet6 // large enough for either family
	ctl   [][txControlLen]byte

	fn      func(uintptr) bool // u.writeFD
	pending []unix.Mmsghdr
	psegs   []int // segs of pending
	err     error

	adj icrcAdjustCache
}

// udpRx holds the messages of one recvmmsg and a cursor over what it
// returned: with GRO a message can hold more datagrams than one Recv hands
// out (udp_gro.go).
type udpRx struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ctl   [][rxControlLen]byte
	bufs  [][]byte // per message, headroom in front
	// With GRO (udp_gro.go): spare are buffers, headroom in front, for
	// datagrams that must be copied to get their own headroom; giovs are
	// each message's iovecs, niov of them, laid out for datagrams of
	// chunk bytes (0: one contiguous buffer); nextChunk is the size the
	// last GRO message had.
	spare     [][]byte
	gro       bool
	giovs     [][]unix.Iovec
	niov      int
	chunk     int
	nextChunk int
	maxChunk  int

	fn   func(uintptr) bool // u.readFD
	want int
	got  int
	err  error

	next int       // message of the last recvmmsg to hand out next
	seg  int       // its next datagram (GRO)
	info udpRxInfo // message next's addresses and fields, when seg > 0
}

// ListenUDP opens a UDP link.
func ListenUDP(o UDPOptions) (*UDP, error) {
	if !o.Addr.IsValid() {
		return nil, errors.New("udp link: no local address")
	}
	if o.Addr.Port() == 0 {
		o.Addr = netip.AddrPortFrom(o.Addr.Addr(), packet.UDPPort)
	}
	if o.PeerPort == 0 {
		o.PeerPort = packet.UDPPort
	}
	if o.MTU <= 0 {
		o.MTU = 1500
	}
	if o.Batch <= 0 {
		o.Batch = DefaultUDPBatch
	}
	if o.SocketBuffer == 0 {
		o.SocketBuffer = DefaultUDPSocketBuffer
	}
	addr := o.Addr.Addr()
	v4 := addr.Unmap().Is4()
	network := "udp6"
	if v4 {
		network = "udp4"
		o.Addr = netip.AddrPortFrom(addr.Unmap(), o.Addr.Port())
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(o.Addr))
	if err != nil {
		return nil, fmt.Errorf("udp link: listen on %v: %w", o.Addr, err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp link: %w", err)
	}
	u := &UDP{conn: conn, raw: raw, local: o.Addr, v4: v4, peerPort: o.PeerPort, mtu: o.MTU}
	u.mac = syntheticMAC(o.Addr.Addr())
	if err := u.setOptions(raw, o.SocketBuffer); err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp link on %v: %w", o.Addr, err)
	}
	gro := false
	err = raw.Control(func(fd uintptr) {
		if !o.NoGSO {
			u.gso = probeGSO(fd)
		}
		if o.GRO {
			gro = enableGRO(fd)
		}
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp link on %v: %w", o.Addr, err)
	}
	u.tx.init(o.Batch)
	u.rx.init(o.Batch, o.MTU, gro)
	u.tx.fn = u.writeFD
	u.rx.fn = u.readFD
	return u, nil
}

func (u *UDP) setOptions(raw syscall.RawConn, bufSize int) error {
	type opt struct {
		level, name, value int
		what               string
	}
	var opts []opt
	// The destination address of a datagram (pktinfo) is worth a control
	// message per datagram only when the socket is bound to all addresses;
	// otherwise it is the bound address. TOS and TTL are set on the socket
	// to the values most frames carry, so that Send needs no control
	// message for those frames (see fillTx).
	pktinfo := 0
	if u.local.Addr().IsUnspecified() {
		pktinfo = 1
	}
	if u.v4 {
		opts = []opt{
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
			{unix.IPPROTO_IP, unix.IP_PKTINFO, pktinfo, "IP_PKTINFO"},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"},
			{unix.IPPROTO_IP, unix.IP_RECVTTL, 1, "IP_RECVTTL"},
			{unix.IPPROTO_IP, unix.IP_TOS, socketTOS, "IP_TOS"},
			{unix.IPPROTO_IP, unix.IP_TTL, socketTTL, "IP_TTL"},
		}
	} else {
		opts = []opt{
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, pktinfo, "IPV6_RECVPKTINFO"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT"},
			{unix.IPPROTO_UDP, udpNoCheck6Rx, 1, "UDP_NO_CHECK6_RX"},
			{unix.IPPROTO_IPV6, unix.IPV6_TCLASS, socketTOS, "IPV6_TCLASS"},
			{unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, socketTTL, "IPV6_UNICAST_HOPS"},
		}
	}
	var serr error
	err := raw.Control(func(fd uintptr) {
		for _, o := range opts {
			if err := unix.SetsockoptInt(int(fd), o.level, o.name, o.value); err != nil {
				serr = fmt.Errorf("setsockopt %s: %w", o.what, err)
				return
			}
		}
		if bufSize <= 0 {
			return
		}
		// The FORCE variants pass the rmem_max/wmem_max cap, for a
		// process allowed to (CAP_NET_ADMIN); others get the plain
		// option, capped.
		for _, b := range [...]struct {
			force, plain int
			what         string
		}{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF"}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF"}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, b.force, bufSize) == nil {
				continue
			}
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, b.plain, bufSize); err != nil {
				serr = fmt.Errorf("setsockopt %s: %w", b.what, err)
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// syntheticMAC derives a locally administered MAC from an IP address, so
// rebuilt frames show stable, distinct addresses per host.
func syntheticMAC(a netip.Addr) [6]byte {
	b := a.As16()
	return [6]byte{0x02, 0x00, b[12], b[13], b[14], b[15]}
}

func (t *udpTx) init(n int) {
	t.hdrs = make([]unix.Mmsghdr, n)
	t.segs = make([]int, n)
	t.iovs = make([]unix.Iovec, 2*n)
	t.icrc = make([][4]byte, n)
	t.names = make([]unix.RawSockaddrInet6, n)
	t.ctl = make([][txControlLen]byte, n)
}

func (r *udpRx) init(n, mtu int, gro bool) {
	r.hdrs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	r.ctl = make([][rxControlLen]byte, n)
	r.gro = gro
	// One extra byte shows datagrams longer than the MTU as truncated.
	size := headroom + mtu + 1
	if gro {
		r.initGRO(n, mtu)
		return
	}
	r.bufs = carve(n, size)
	for i := range r.bufs {
		r.iovs[i].Base = &r.bufs[i][headroom]
		r.iovs[i].SetLen(size - headroom)
	}
}

// carve returns n buffers of size bytes from one allocation.
func carve(n, size int) [][]byte {
	backing := make([]byte, n*size)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
	}
	return bufs
}

// LocalAddr returns the address and port the socket is bound to.
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// FixedSourcePort returns the socket's port: the kernel writes it as the
// UDP source port of every datagram, whatever the frame said.
func (u *UDP) FixedSourcePort() (uint16, bool) { return u.local.Port(), true }

// MTU returns the largest IP packet the link carries.
func (u *UDP) MTU() int { return u.mtu }

// MAC returns the link's synthetic hardware address (02:00 and the last four
// bytes of its IP address).
func (u *UDP) MAC() [6]byte { return u.mac }

// Close closes the socket; a blocked Recv returns ErrClosed.
func (u *UDP) Close() error { return u.conn.Close() }

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
	icrc := binary.LittleEndian.Uint32(p[n:]) ^ u.tx.adj.get(id, n)
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
		r.got, r.err = 0, nil
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
			}
		}
		stride := n
		if g := r.info.gso; g > 0 && g < n {
			stride = g
		}
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
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.got = int(n)
			return true
		case unix.EAGAIN:
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

// UDPStats are a UDP link's counts.
type UDPStats struct {
	TxFrames, TxBytes uint64 // datagrams and UDP payload bytes sent
	TxOversize        uint64 // frames larger than the MTU
	TxBadFrame        uint64 // frames that are not RoCE v2 of the socket's IP family
	TxMismatch        uint64 // frames whose source or IPv4 ID/DF the kernel would not reproduce
	TxErrors          uint64 // datagrams the kernel refused
	RxFrames, RxBytes uint64 // datagrams and UDP payload bytes received
	RxTruncated       uint64 // datagrams longer than the MTU
	RxBadSource       uint64 // datagrams from another address family
}

// Stats returns the link's counts.
func (u *UDP) Stats() UDPStats {
	s := &u.stats
	return UDPStats{
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(), TxOversize: s.txOversize.Load(),
		TxBadFrame: s.txBadFrame.Load(), TxMismatch: s.txMismatch.Load(), TxErrors: s.txErrors.Load(),
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(), RxTruncated: s.rxTruncated.Load(),
		RxBadSource: s.rxBadSource.Load(),
	}
}

// AppendCounters implements Counting.
func (u *UDP) AppendCounters(dst []Counter) []Counter {
	s := u.Stats()
	return append(dst,
		Counter{"udp_tx_frames", s.TxFrames}, Counter{"udp_tx_bytes", s.TxBytes},
		Counter{"udp_tx_oversize", s.TxOversize}, Counter{"udp_tx_bad_frame", s.TxBadFrame},
		Counter{"udp_tx_mismatch", s.TxMismatch}, Counter{"udp_tx_errors", s.TxErrors},
		Counter{"udp_rx_frames", s.RxFrames}, Counter{"udp_rx_bytes", s.RxBytes},
		Counter{"udp_rx_truncated", s.RxTruncated}, Counter{"udp_rx_bad_source", s.RxBadSource})
}
