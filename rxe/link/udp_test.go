//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
)

// Loopback addresses private to these tests (other packages' tests use
// their own), so that parallel test runs do not collide on port 4791.
var (
	udpA = netip.MustParseAddr("127.0.91.2")
	udpB = netip.MustParseAddr("127.0.91.3")
)

func listenUDP(t testing.TB, o UDPOptions) *UDP {
	t.Helper()
	u, err := ListenUDP(o)
	require.NoError(t, err)
	t.Cleanup(func() { u.Close() })
	return u
}

// udpFrame builds a frame as a device on a UDP link must: source port the
// link's, IPv4 ID 0 with DF.
func udpFrame(t testing.TB, from *UDP, dst netip.Addr, n int, seq uint32, tos, ttl uint8) []byte {
	t.Helper()
	pay := make([]byte, n)
	for i := range pay {
		pay[i] = byte(i + int(seq))
	}
	if n >= 4 {
		binary.BigEndian.PutUint32(pay, seq)
	}
	p := packet.Packet{Payload: pay}
	p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: seq & 0xFFFFFF}
	sport, fixed := FixedSourcePort(from)
	require.True(t, fixed)
	a := packet.Addressing{Src: from.LocalAddr().Addr(), Dst: dst, SrcPort: sport, TrafficClass: tos, HopLimit: ttl, DF: true}
	return packet.AppendFrame(nil, &packet.Ethernet{Src: from.MAC()}, &a, &p)
}

func recvN(t testing.TB, l Link, n int) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]Frame, 16)
	deadline := time.AfterFunc(10*time.Second, func() { l.Close() })
	defer deadline.Stop()
	for len(out) < n {
		k, err := l.Recv(buf)
		require.NoError(t, err, "after %d of %d frames", len(out), n)
		for _, f := range buf[:k] {
			out = append(out, bytes.Clone(f.Data))
		}
	}
	return out
}

func TestUDPLinkIPv4(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 0)})
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 0)})
	var _ Link = a
	assert.Equal(t, netip.AddrPortFrom(udpA, 4791), a.LocalAddr())
	assert.Equal(t, [6]byte{2, 0, 127, 0, 91, 2}, a.MAC())
	assert.Equal(t, 1500, a.MTU())

	var sent [][]byte
	var frames []Frame
	for i := 0; i < 100; i++ {
		f := udpFrame(t, a, udpB, 1+i*14, uint32(i), uint8(i&0xFC), uint8(1+i))
		sent = append(sent, f)
		frames = append(frames, Frame{Data: f})
	}
	n, err := a.Send(frames)
	require.NoError(t, err)
	require.Equal(t, 100, n)

	got := recvN(t, b, 100)
	for i, g := range got {
		var f, want packet.Frame
		require.NoError(t, packet.ParseFrame(g, &f), "frame %d", i)
		require.NoError(t, packet.ParseFrame(sent[i], &want))
		assert.Equal(t, want.Transport, f.Transport, "frame %d", i)
		ad, wa := f.Addressing(), want.Addressing()
		assert.Equal(t, wa.Src, ad.Src)
		assert.Equal(t, wa.Dst, ad.Dst)
		assert.Equal(t, uint16(4791), ad.SrcPort)
		assert.Equal(t, uint16(4791), ad.DstPort)
		assert.Equal(t, wa.TrafficClass, ad.TrafficClass, "TOS through IP_TOS/IP_RECVTOS")
		assert.Equal(t, wa.HopLimit, ad.HopLimit, "TTL through IP_TTL/IP_RECVTTL")
		assert.True(t, ad.DF)
		assert.True(t, f.ICRCOK(), "frame %d: exact check with ID 0 and DF", i)
		assert.True(t, packet.CheckICRCUnknownIPID(&f))
		assert.Equal(t, b.MAC(), [6]byte(g[0:6]))
		assert.Equal(t, a.MAC(), [6]byte(g[6:12]))
	}
	st := b.Stats()
	assert.Equal(t, uint64(100), st.RxFrames)
	assert.Equal(t, uint64(100), a.Stats().TxFrames)

	// And back.
	_, err = b.Send([]Frame{{Data: udpFrame(t, b, udpA, 64, 7, 0, 64)}})
	require.NoError(t, err)
	back := recvN(t, a, 1)
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(back[0], &f))
	assert.True(t, f.ICRCOK())
}

func TestUDPLinkRefusesFramesItCannotSendFaithfully(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 14791), MTU: 1000})
	good := udpFrame(t, a, udpB, 64, 1, 0, 64)
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(good, &f))

	wrongPort := bytes.Clone(good)
	binary.BigEndian.PutUint16(wrongPort[packet.EthernetLen+packet.IPv4Len:], 0xC000)
	withID := bytes.Clone(good)
	withID[packet.EthernetLen+5] = 1
	ipv4Fix(withID[packet.EthernetLen:])
	wrongSrc := bytes.Clone(good)
	wrongSrc[packet.EthernetLen+15] = 9
	ipv4Fix(wrongSrc[packet.EthernetLen:])
	big := udpFrame(t, a, udpB, 1000, 2, 0, 64)
	v6 := roceFrame(t, [6]byte{}, a.MAC(), netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 10, 1)
	n, err := a.Send([]Frame{{Data: wrongPort}, {Data: withID}, {Data: wrongSrc}, {Data: big}, {Data: v6}, {Data: []byte{1, 2}}})
	require.NoError(t, err)
	assert.Equal(t, 6, n)
	st := a.Stats()
	assert.Equal(t, uint64(3), st.TxMismatch)
	assert.Equal(t, uint64(1), st.TxOversize)
	assert.Equal(t, uint64(2), st.TxBadFrame)
	assert.Zero(t, st.TxFrames)
	cs := Counters(a)
	assert.Equal(t, Counter{"udp_tx_mismatch", 3}, cs[4])
}

func TestUDPLinkIPv6(t *testing.T) {
	lo := netip.IPv6Loopback()
	a, err := ListenUDP(UDPOptions{Addr: netip.AddrPortFrom(lo, 24791), PeerPort: 24792})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(lo, 24792), PeerPort: 24791})
	// rxe sends IPv6 UDP checksum 0: make a's socket do the same, so this
	// also shows b accepts it (UDP_NO_CHECK6_RX).
	require.NoError(t, a.raw.Control(func(fd uintptr) {
		require.NoError(t, unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, 101 /* UDP_NO_CHECK6_TX */, 1))
	}))
	var frames []Frame
	var sent [][]byte
	for i := 0; i < 20; i++ {
		f := udpFrame(t, a, lo, 100+i, uint32(i), uint8(i*8), uint8(10+i))
		sent = append(sent, f)
		frames = append(frames, Frame{Data: f})
	}
	_, err = a.Send(frames)
	require.NoError(t, err)
	got := recvN(t, b, 20)
	for i, g := range got {
		var f, want packet.Frame
		require.NoError(t, packet.ParseFrame(g, &f))
		require.NoError(t, packet.ParseFrame(sent[i], &want))
		assert.False(t, f.IsIPv4())
		assert.Equal(t, want.Transport, f.Transport)
		ad, wa := f.Addressing(), want.Addressing()
		assert.Equal(t, uint16(24791), ad.SrcPort)
		assert.Equal(t, uint16(4791), ad.DstPort)
		assert.Equal(t, wa.TrafficClass, ad.TrafficClass)
		assert.Equal(t, wa.HopLimit, ad.HopLimit)
		assert.Equal(t, lo, ad.Dst)
		assert.True(t, f.ICRCOK(), "frame %d", i)
		assert.True(t, packet.CheckICRCUnknownIPID(&f))
	}
}

// Frames with the socket's TOS and TTL go without control messages, others
// with them; either way the receiver sees what the frame said, and a frame
// with other values does not change the socket's for the next one.
func TestUDPLinkTOSTTLWithAndWithoutControlMessages(t *testing.T) {
	lo := netip.IPv6Loopback()
	cases := []struct {
		name   string
		a, b   UDPOptions
		dst    netip.Addr
		family string
	}{
		{"ipv4", UDPOptions{Addr: netip.AddrPortFrom(udpA, 34793), PeerPort: 34793},
			UDPOptions{Addr: netip.AddrPortFrom(udpB, 34793), PeerPort: 34793}, udpB, "v4"},
		{"ipv6", UDPOptions{Addr: netip.AddrPortFrom(lo, 34794), PeerPort: 34795},
			UDPOptions{Addr: netip.AddrPortFrom(lo, 34795), PeerPort: 34794}, lo, "v6"},
	}
	tosTTL := [][2]uint8{{socketTOS, socketTTL}, {0x20, socketTTL}, {socketTOS, 3}, {0x48, 200}, {socketTOS, socketTTL}, {0x04, socketTTL}, {socketTOS, socketTTL}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := ListenUDP(c.a)
			if err != nil {
				t.Skipf("no %s loopback: %v", c.family, err)
			}
			t.Cleanup(func() { a.Close() })
			b := listenUDP(t, c.b)
			var frames []Frame
			for i, v := range tosTTL {
				frames = append(frames, Frame{Data: udpFrame(t, a, c.dst, 40+i, uint32(i), v[0], v[1])})
			}
			n, err := a.Send(frames)
			require.NoError(t, err)
			require.Equal(t, len(frames), n)
			got := recvN(t, b, len(frames))
			for i, g := range got {
				var f packet.Frame
				require.NoError(t, packet.ParseFrame(g, &f))
				ad := f.Addressing()
				assert.Equal(t, tosTTL[i][0], ad.TrafficClass, "frame %d", i)
				assert.Equal(t, tosTTL[i][1], ad.HopLimit, "frame %d", i)
				assert.True(t, packet.CheckICRCUnknownIPID(&f), "frame %d", i)
			}
		})
	}
}

// A link bound to all addresses learns each datagram's destination from
// IP_PKTINFO (a bound link knows it without).
func TestUDPLinkBoundToAllAddresses(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 34796), PeerPort: 34797})
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), 34797), PeerPort: 34796})
	_, err := a.Send([]Frame{{Data: udpFrame(t, a, udpB, 64, 1, 0, 64)}})
	require.NoError(t, err)
	got := recvN(t, b, 1)
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(got[0], &f))
	ad := f.Addressing()
	assert.Equal(t, udpB, ad.Dst, "destination from IP_PKTINFO")
	assert.Equal(t, udpA, ad.Src)
	assert.True(t, packet.CheckICRCUnknownIPID(&f))
}

// The link asks for DefaultUDPSocketBuffer unless told otherwise: the
// kernel's default receive buffer cannot hold an RC window of 4 KiB packets.
func TestUDPLinkSocketBuffers(t *testing.T) {
	sockBufs := func(u *UDP) (rcv, snd int) {
		require.NoError(t, u.raw.Control(func(fd uintptr) {
			var err error
			rcv, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			require.NoError(t, err)
			snd, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
			require.NoError(t, err)
		}))
		return rcv, snd
	}
	kernel := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 34798), SocketBuffer: -1})
	kRcv, kSnd := sockBufs(kernel)
	def := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 34799)})
	rcv, snd := sockBufs(def)
	// Linux doubles the size asked for (bookkeeping overhead) and caps an
	// unprivileged request at rmem_max/wmem_max.
	capped := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/core/" + name)
		require.NoError(t, err)
		var v int
		_, err = fmt.Sscan(string(b), &v)
		require.NoError(t, err)
		return 2 * min(v, DefaultUDPSocketBuffer)
	}
	if hasNetAdmin(t) {
		assert.Equal(t, 2*DefaultUDPSocketBuffer, rcv, "SO_RCVBUFFORCE")
		assert.Equal(t, 2*DefaultUDPSocketBuffer, snd, "SO_SNDBUFFORCE")
	} else {
		assert.GreaterOrEqual(t, rcv, capped("rmem_max"))
		assert.GreaterOrEqual(t, snd, capped("wmem_max"))
	}
	assert.GreaterOrEqual(t, rcv, kRcv)
	assert.GreaterOrEqual(t, snd, kSnd)
	small := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 34800), SocketBuffer: 64 << 10})
	rcv, snd = sockBufs(small)
	assert.Equal(t, 2*(64<<10), rcv)
	assert.Equal(t, 2*(64<<10), snd)
}

// hasNetAdmin reports whether the process has CAP_NET_ADMIN (bit 12 of the
// effective capability set).
func hasNetAdmin(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			return caps&(1<<unix.CAP_NET_ADMIN) != 0
		}
	}
	return false
}

// What the kernel puts on the wire for the UDP link's datagrams must be
// exactly what the device computed the ICRC over: source port 4791, IP ID
// 0, DF. Seen with a packet socket on lo (needs root).
func TestUDPLinkWireHeaderMatchesICRC(t *testing.T) {
	testenv.Root(t)
	lo, err := netIfIndex("lo")
	require.NoError(t, err)
	// The socket takes nothing until it is bound, and then only IPv4 from
	// udpA: other packages' tests, run at the same time, filled an
	// unfiltered one with their own loopback traffic until the kernel
	// dropped this test's datagram (CI, 2026-12-07).
	ps, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	require.NoError(t, err)
	defer unix.Close(ps)
	attachSrcFilter(t, ps, udpA)
	require.NoError(t, unix.Bind(ps, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: lo}))
	require.NoError(t, unix.SetsockoptTimeval(ps, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}))

	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 0)})
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 0)})
	frame := udpFrame(t, a, udpB, 500, 42, 0x20, 3)
	_, err = a.Send([]Frame{{Data: frame}})
	require.NoError(t, err)
	recvN(t, b, 1)

	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(ps, buf, 0)
		require.NoError(t, err, "no datagram seen on lo")
		// On lo the UDP checksum is left partial (offloaded); the ICRC
		// masks it, so clear it to let the parser through.
		if n > 42 && buf[12] == 0x08 && buf[13] == 0 && buf[23] == unix.IPPROTO_UDP {
			buf[40], buf[41] = 0, 0
		}
		var f packet.Frame
		if err := packet.ParseFrame(buf[:n], &f); err != nil {
			continue
		}
		ad := f.Addressing()
		if ad.Src != udpA || ad.Dst != udpB {
			continue
		}
		assert.Equal(t, uint16(0), ad.IPID)
		assert.True(t, ad.DF)
		assert.Equal(t, uint16(4791), ad.SrcPort)
		assert.Equal(t, uint8(0x20), ad.TrafficClass)
		assert.Equal(t, uint8(3), ad.HopLimit)
		assert.True(t, f.ICRCOK(), "the ICRC the device computed holds on the wire")
		return
	}
}

// attachSrcFilter lets through packet socket fd only Ethernet frames of
// IPv4 packets from src (a classic BPF filter).
func attachSrcFilter(t *testing.T, fd int, src netip.Addr) {
	a := src.As4()
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 12, Size: 2}, // EtherType
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IP, SkipFalse: 3},
		bpf.LoadAbsolute{Off: 26, Size: 4}, // IPv4 source
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(a[:]), SkipFalse: 1},
		bpf.RetConstant{Val: 1 << 16},
		bpf.RetConstant{Val: 0},
	})
	require.NoError(t, err)
	fs := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		fs[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	require.NoError(t, unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(fs)), Filter: &fs[0]}))
}

func TestUDPLinkCloseUnblocksRecv(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 34791)})
	done := make(chan error)
	go func() {
		_, err := a.Recv(make([]Frame, 4))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, a.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Recv did not return after Close")
	}
}

func TestUDPLinkNoAllocs(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 44791)})
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 44791), PeerPort: 44791})
	a2 := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 44792), PeerPort: 44791})
	_ = a
	f := udpFrame(t, a2, udpB, 1000, 1, 0, 64)
	out := []Frame{{Data: f}, {Data: f}, {Data: f}}
	in := make([]Frame, 8)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a2.Send(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 3; {
			n, err := b.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	})
	assert.Zero(t, allocs)
}
