//go:build linux

package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// The UDP link speaks RoCE v2 through an ordinary kernel UDP socket bound to
// ADDR:4791, so it needs no privileges; this is also how rxe itself sends.
//
// Sending (udp_send.go), the link strips Ethernet, IP and UDP from the
// device's frame and hands the transport packet to sendmmsg, addressed to
// the frame's destination IP and port 4791, with the frame's TOS/traffic
// class and TTL/hop limit set on the socket or, for frames that differ, as
// per-packet control messages. The kernel writes the IP and UDP headers, so
// the device computes the ICRC over what the kernel will write: the
// socket's port as the UDP source port (FixedSourcePort) and, for IPv4, DF
// with ID 0 (path-MTU discovery is on, IP_PMTUDISC_DO). Frames whose source
// address, port or IPv4 ID/DF differ from that are dropped and counted
// (their ICRC could not be right), as are frames larger than the MTU.
//
// Receiving (udp_recv.go), recvmmsg returns payloads with the source
// address and port, the destination address (IP_PKTINFO / IPV6_PKTINFO)
// and the TOS/TTL from control messages, and the link rebuilds an
// Ethernet, IP and UDP header in front of each payload, in the same buffer
// (no copy). The sender's IPv4 ID is not visible through a socket, so
// rebuilt IPv4 frames are marked IPIDUnknown (why that matters, and how the
// ICRC is still checked: packet/ipid.go). The IPv6 flow label is likewise
// not visible (rebuilt as 0) but the ICRC masks it. IPv6 sockets accept
// zero UDP checksums (UDP_NO_CHECK6_RX), which rxe sends.
//
// Where the kernel has it, the link sends runs of equal-sized packets with
// UDP segmentation offload (udp_gso.go): the datagrams on the wire are the
// same, but the kernel's per-datagram work is done once per run
// (UDPOptions.NoGSO turns it off). UDP GRO on receive (udp_gro.go) turns
// itself on while bulk traffic comes in full batches and off for ping-pong
// (UDPOptions.GRO keeps it on), and after a batch of bulk traffic the
// receive loop polls the socket for a bounded window before it waits
// (udp_busypoll.go, UDPOptions.BusyPoll).

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
	// GRO turns on UDP receive offload (UDP_GRO, udp_gro.go) for good:
	// the kernel hands over runs of datagrams as one message, fewer
	// system calls for bulk traffic. Without it the link turns GRO on by
	// itself while datagrams arrive in full batches and off again when
	// they come one or two at a time (adaptGRO), since kept on it cost
	// latency-bound traffic milliseconds on a busy machine: Debian's
	// ib_write_lat on the drop-in library, whose two processes spin on
	// the CPU, went from about 0.25 ms to 3.5 ms per round trip on UDP
	// loopback with it on.
	GRO bool
	// NoAutoGRO keeps GRO off unless GRO asks for it.
	NoAutoGRO bool
	// BusyPoll is how long the receive loop keeps asking the socket for
	// the next batch, without waiting, after a batch of bulk traffic
	// (udp_busypoll.go): 0 means DefaultBusyPoll, a negative value never.
	BusyPoll time.Duration
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
	rxBusyPolls, rxBusyPollHits                                     atomic.Uint64
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

	adj packet.IPv4IDCorrections
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
	gro       bool // the buffers are laid out for GRO (once on, they stay)
	giovs     [][]unix.Iovec
	niov      int
	chunk     int
	nextChunk int
	maxChunk  int

	// Adaptive GRO (adaptGRO): whether the socket has UDP_GRO on, the
	// MTU the GRO buffers are made for, and the runs of full and of thin
	// batches seen. fixed: GRO was asked for, or not to adapt.
	sockGRO     bool
	fixed       bool
	mtu         int
	full, thin  int
	groSwitches uint64
	// dgrams counts the datagrams of the last recvmmsg handed out so
	// far: with GRO one message can be a run of many, and a batch of one
	// such message is bulk, not ping-pong.
	dgrams int

	// Busy polling (udp_busypoll.go): the window after a bulk batch, and
	// the end of the current one (zero: wait).
	pollWindow time.Duration
	pollUntil  time.Time

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
	u.rx.sockGRO, u.rx.fixed, u.rx.mtu = gro, o.GRO || o.NoAutoGRO, o.MTU
	u.rx.pollWindow = busyPollWindow(o.BusyPoll)
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
	RxBusyPolls       uint64 // windows of busy polling opened (udp_busypoll.go)
	RxBusyPollHits    uint64 // batches a busy poll found
}

// Stats returns the link's counts.
func (u *UDP) Stats() UDPStats {
	s := &u.stats
	return UDPStats{
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(), TxOversize: s.txOversize.Load(),
		TxBadFrame: s.txBadFrame.Load(), TxMismatch: s.txMismatch.Load(), TxErrors: s.txErrors.Load(),
		RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(), RxTruncated: s.rxTruncated.Load(),
		RxBadSource: s.rxBadSource.Load(), RxBusyPolls: s.rxBusyPolls.Load(), RxBusyPollHits: s.rxBusyPollHits.Load(),
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
		Counter{"udp_rx_truncated", s.RxTruncated}, Counter{"udp_rx_bad_source", s.RxBadSource},
		Counter{"udp_rx_busy_polls", s.RxBusyPolls}, Counter{"udp_rx_busy_poll_hits", s.RxBusyPollHits})
}
