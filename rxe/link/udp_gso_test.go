//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/songgao/water"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/packet"

	"github.com/softroce/softroce/internal/testenv"
)

// The ICRC correction for the IPv4 ID the kernel gives a GSO segment must
// make the ICRC exactly right for a header carrying that ID.
func TestICRCAdjustForIPv4ID(t *testing.T) {
	var c packet.IPv4IDCorrections
	// Lengths change on every call, so entries are reused and replaced.
	for _, id := range []int{1, 2, 3, 14, 15, 63} {
		for _, n := range []int{0, 1, 64, 1000, 4096, 4112} {
			p := packet.Packet{Payload: make([]byte, n)}
			for i := range p.Payload {
				p.Payload[i] = byte(i * 13)
			}
			p.BTH = packet.BTHFields{Opcode: packet.RCWriteMiddle, PKey: 0xFFFF, DestQP: 0x12, PSN: 77}
			a := packet.Addressing{Src: ip4a, Dst: ip4b, SrcPort: 4791, HopLimit: 64, DF: true}
			frame := packet.AppendFrame(nil, &packet.Ethernet{}, &a, &p)
			var f packet.Frame
			require.NoError(t, packet.ParseFrame(frame, &f))
			require.True(t, f.ICRCOK())
			tl := len(f.Transport) - packet.ICRCLen
			icrc := binary.LittleEndian.Uint32(f.Transport[tl:]) ^ c.Get(id, tl)
			binary.LittleEndian.PutUint32(f.Transport[tl:], icrc)
			binary.BigEndian.PutUint16(f.IP[4:], uint16(id))
			assert.True(t, f.ICRCOK(), "payload %d, ID %d", n, id)
			gotID, df, ok := packet.RecoverIPv4ID(&f)
			assert.True(t, ok && df && gotID == uint16(id), "payload %d, ID %d: recovered %d %v %v", n, id, gotID, df, ok)
		}
	}
}

func TestUDPRunFormation(t *testing.T) {
	k := udpRunKey{tos: 0, ttl: 64}
	other := udpRunKey{tos: 0x20, ttl: 64}
	tests := []struct {
		name string
		run  udpRun
		key  udpRunKey
		n    int
		want bool
	}{
		{"same size", udpRun{key: k, seg: 100, segs: 1, max: 10}, k, 100, true},
		{"shorter after one", udpRun{key: k, seg: 100, segs: 1, max: 10}, k, 90, false},
		{"shorter ends a run", udpRun{key: k, seg: 100, segs: 2, max: 10}, k, 90, true},
		{"nothing after a short one", udpRun{key: k, seg: 100, segs: 3, max: 10, short: true}, k, 100, false},
		{"longer", udpRun{key: k, seg: 100, segs: 2, max: 10}, k, 101, false},
		{"full", udpRun{key: k, seg: 100, segs: 10, max: 10}, k, 100, false},
		{"other TOS", udpRun{key: k, seg: 100, segs: 2, max: 10}, other, 100, false},
		{"empty packet", udpRun{key: k, seg: 100, segs: 2, max: 10}, k, 0, false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.run.admits(tc.key, tc.n), tc.name)
	}
	assert.Equal(t, 15, maxRunSegs(4112, packet.IPv4Len), "15 RoCE packets at MTU 4096 fit a UDP datagram")
	assert.Equal(t, maxGSOSegs, maxRunSegs(100, packet.IPv4Len))
	assert.Equal(t, 1, maxRunSegs(65000, packet.IPv6Len))
}

// A batch of frames that forms runs (same size, then a shorter one; other
// TOS; another size) arrives whole and in order, each datagram with an ICRC
// that is right for the IPv4 ID the kernel gave it: k for the k-th segment
// of a run. The caller's frames are not written to. Received in small
// batches, so that the datagrams of one GRO message span several Recv
// calls.
func TestUDPLinkGSORuns(t *testing.T) {
	for _, o := range []struct{ noGSO, gro bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("NoGSO=%v,GRO=%v", o.noGSO, o.gro), func(t *testing.T) {
			a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 24791), PeerPort: 24792, MTU: 9000, NoGSO: o.noGSO, GRO: o.gro})
			b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 24792), MTU: 9000, NoGSO: o.noGSO, GRO: o.gro})
			type spec struct{ n, tos, wantID int }
			var specs []spec
			for i := 0; i < 20; i++ { // 4116-byte packets: a run of 15, then one of 5
				specs = append(specs, spec{4100, 0, i % 15})
			}
			specs = append(specs,
				spec{100, 0, 5},                                  // shorter: ends the run of 5
				spec{100, 0, 0}, spec{100, 0, 1}, spec{50, 0, 2}, // a run ended by a shorter one
				spec{100, 0, 0}, spec{100, 0x20, 0}, spec{100, 0x20, 1}, // TOS changes: a new run
				spec{200, 0, 0}, spec{150, 0, 0}, spec{150, 0, 1}) // longer: new; shorter after one: new
			var frames []Frame
			var sent [][]byte
			for i, s := range specs {
				f := udpFrame(t, a, udpB, s.n, uint32(i), uint8(s.tos), 64)
				frames = append(frames, Frame{Data: f})
				sent = append(sent, bytes.Clone(f))
			}
			n, err := a.Send(frames)
			require.NoError(t, err)
			require.Equal(t, len(frames), n)
			for i := range frames {
				require.Equal(t, sent[i], frames[i].Data, "frame %d written to", i)
			}
			assert.Equal(t, uint64(len(frames)), a.Stats().TxFrames)

			var got [][]byte
			buf := make([]Frame, 3)
			deadline := time.AfterFunc(10*time.Second, func() { b.Close() })
			defer deadline.Stop()
			for len(got) < len(specs) {
				k, err := b.Recv(buf)
				require.NoError(t, err, "after %d of %d frames", len(got), len(specs))
				for _, f := range buf[:k] {
					got = append(got, bytes.Clone(f.Data))
				}
			}
			for i, g := range got {
				var f, want packet.Frame
				require.NoError(t, packet.ParseFrame(g, &f), "frame %d", i)
				require.NoError(t, packet.ParseFrame(sent[i], &want))
				assert.Equal(t, want.Transport[:len(want.Transport)-packet.ICRCLen], f.Transport[:len(f.Transport)-packet.ICRCLen], "frame %d", i)
				assert.Equal(t, specs[i].tos, int(f.Addressing().TrafficClass), "frame %d", i)
				id, df, ok := packet.RecoverIPv4ID(&f)
				require.True(t, ok, "frame %d: ICRC", i)
				assert.True(t, df)
				wantID := specs[i].wantID
				if o.noGSO {
					wantID = 0
				}
				assert.Equal(t, uint16(wantID), id, "frame %d: IPv4 ID the ICRC is right for", i)
			}
			assert.Equal(t, uint64(len(specs)), b.Stats().RxFrames)
		})
	}
}

// IPv6 runs need no correction: the segments' headers differ in nothing
// the ICRC covers.
func TestUDPLinkGSORunsIPv6(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.MustParseAddrPort("[::1]:24793"), PeerPort: 24794, MTU: 9000})
	b := listenUDP(t, UDPOptions{Addr: netip.MustParseAddrPort("[::1]:24794"), MTU: 9000})
	var frames []Frame
	for i := 0; i < 10; i++ {
		frames = append(frames, Frame{Data: udpFrame(t, a, netip.IPv6Loopback(), 3000, uint32(i), 0, 64)})
	}
	_, err := a.Send(frames)
	require.NoError(t, err)
	for i, g := range recvN(t, b, len(frames)) {
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(g, &f))
		assert.True(t, f.ICRCOK(), "frame %d", i)
		assert.Equal(t, uint32(i), binary.BigEndian.Uint32(f.Transport[8:12])&0xFFFFFF, "frame %d in order", i)
	}
}

// On a device without segmentation offload (a TAP), the kernel cuts a run
// into datagrams itself: what reaches the wire must carry IP IDs 0, 1, 2...
// and ICRCs that are exactly right for them, as rxe checks them. Needs root.
func TestUDPLinkGSOSegmentsOnWire(t *testing.T) {
	testenv.Root(t)
	testenv.TUN(t)
	name := fmt.Sprintf("srtgso%d", os.Getpid()%100000)
	ifc, err := water.New(water.Config{DeviceType: water.TAP, PlatformSpecificParams: water.PlatformSpecificParams{Name: name}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ifc.Close()
		exec.Command("ip", "link", "del", name).Run()
	})
	local, peer := netip.MustParseAddr("10.93.0.1"), netip.MustParseAddr("10.93.0.2")
	ipCmd(t, "addr", "add", local.String()+"/24", "dev", name)
	ipCmd(t, "link", "set", name, "mtu", "9000", "up")
	ipCmd(t, "neigh", "replace", peer.String(), "lladdr", "02:00:0a:5d:00:02", "dev", name, "nud", "permanent")

	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(local, 0), MTU: 9000})
	require.True(t, a.gso, "kernel without UDP_SEGMENT")
	var frames []Frame
	for i := 0; i < 6; i++ {
		frames = append(frames, Frame{Data: udpFrame(t, a, peer, 4096, uint32(i), 0, 64)})
	}
	_, err = a.Send(frames)
	require.NoError(t, err)

	buf := make([]byte, 65536)
	seen := 0
	deadline := time.Now().Add(5 * time.Second)
	for seen < len(frames) && time.Now().Before(deadline) {
		n, err := ifc.Read(buf)
		require.NoError(t, err)
		var f packet.Frame
		if packet.ParseFrame(buf[:n], &f) != nil {
			continue // ARP, IPv6 router solicitations...
		}
		ad := f.Addressing()
		if ad.Dst != peer {
			continue
		}
		assert.Equal(t, uint16(seen), ad.IPID, "segment %d", seen)
		assert.True(t, ad.DF)
		assert.True(t, f.ICRCOK(), "segment %d: ICRC exact with the ID on the wire", seen)
		assert.Equal(t, uint32(seen), binary.BigEndian.Uint32(f.Transport[8:12])&0xFFFFFF)
		seen++
	}
	assert.Equal(t, len(frames), seen)
}

// The GRO receive buffers hand each datagram of a message out behind its own
// headroom, whatever the layout: in place when the kernel's scatter put it
// there, gathered otherwise. The kernel's copy into the iovecs is simulated.
func TestUDPGRODatagrams(t *testing.T) {
	tests := []struct {
		name         string
		chunk        int // layout
		msgLen, gso  int // the message: gso 0 for a lone datagram
		wantInPlaces int
	}{
		{"contiguous, one datagram", 0, 3000, 0, 1},
		{"contiguous, GRO", 0, 10000, 3000, 1},
		{"laid out for its size", 3000, 10000, 3000, 4},
		{"laid out, lone datagram that fits", 3000, 2000, 0, 1},
		{"laid out, lone datagram that spills", 3000, 4000, 0, 0},
		{"laid out for another size", 3000, 10000, 2500, 1}, // the first fits
		{"laid out, small datagrams", 1024, 65000, 1000, 1},
		{"full message", 4116, 15 * 4116, 4116, 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r udpRx
			r.init(1, 9000, true)
			r.layout(tc.chunk)
			require.Equal(t, tc.chunk, r.chunk)
			msg := make([]byte, tc.msgLen)
			for i := range msg {
				msg[i] = byte(i*7 + i>>8)
			}
			rest := msg
			for _, iov := range r.giovs[0][:r.niov] {
				dst := unsafe.Slice(iov.Base, iov.Len)
				rest = rest[copy(dst, rest):]
			}
			require.Empty(t, rest, "the layout holds the message")
			stride := tc.msgLen
			if tc.gso > 0 {
				stride = tc.gso
			}
			inPlace := 0
			for k, off := 0, 0; off < tc.msgLen; k, off = k+1, off+stride {
				n := min(stride, tc.msgLen-off)
				spare := 0 // one datagram per hand-out: the spare buffer is free
				buf := r.datagram(0, k, stride, n, &spare)
				if spare == 0 {
					inPlace++
				}
				require.Equal(t, msg[off:off+n], buf[headroom:headroom+n], "datagram %d", k)
			}
			assert.Equal(t, tc.wantInPlaces, inPlace)
		})
	}
}

// Send takes more frames than a batch in several sendmmsg calls, runs or
// not.
func TestUDPLinkSendMoreThanABatch(t *testing.T) {
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 24795), PeerPort: 24796, MTU: 9000, Batch: 4})
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 24796), MTU: 9000})
	var frames []Frame
	for i := 0; i < 50; i++ {
		frames = append(frames, Frame{Data: udpFrame(t, a, udpB, 1000, uint32(i), 0, 64)})
	}
	n, err := a.Send(frames)
	require.NoError(t, err)
	require.Equal(t, len(frames), n)
	for i, g := range recvN(t, b, len(frames)) {
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(g, &f))
		assert.Equal(t, uint32(i), binary.BigEndian.Uint32(f.Transport[8:12])&0xFFFFFF, "frame %d in order", i)
		_, _, ok := packet.RecoverIPv4ID(&f)
		assert.True(t, ok, "frame %d: ICRC", i)
	}
}

// A peer sending GSO runs of datagrams longer than the link's MTU to a GRO
// link gets them dropped and counted; they must not use up the spare
// buffers (an index past their end panicked) nor hide the frames after them.
func TestUDPGROOversizeRuns(t *testing.T) {
	b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 24796), MTU: 1024, GRO: true})
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 24797), PeerPort: 24796, MTU: 1024})
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpB, 24796)))
	require.NoError(t, err)
	defer c.Close()
	raw, err := c.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2000)
	}))
	if serr != nil {
		t.Skipf("no UDP_SEGMENT: %v", serr)
	}
	for i := 0; i < 4; i++ {
		_, err := c.Write(make([]byte, 2000*32))
		require.NoError(t, err)
	}
	f := udpFrame(t, a, udpB, 100, 1, 0, 64)
	_, err = a.Send([]Frame{{Data: f}})
	require.NoError(t, err)
	got := recvN(t, b, 1)
	require.Len(t, got, 1)
	assert.Equal(t, uint64(4*32), b.Stats().RxTruncated)
}

// adaptivePair returns two UDP links on the given ports, b adapting GRO
// with batches of 8, and functions that send n frames from a (equal ones,
// so that they go as GSO runs) and receive n at b, checking their length.
func adaptivePair(t *testing.T, portB, portA uint16) (b *UDP, send, recv func(n int)) {
	b = listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, portB), MTU: 1500, Batch: 8})
	a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, portA), PeerPort: portB, MTU: 1500})
	frame := udpFrame(t, a, udpB, 200, 0, 0, 64)
	frames := make([]Frame, 8)
	send = func(n int) {
		t.Helper()
		batch := make([]Frame, n)
		for i := range batch {
			batch[i] = Frame{Data: frame}
		}
		for len(batch) > 0 {
			k, err := a.Send(batch)
			require.NoError(t, err)
			batch = batch[k:]
		}
	}
	recv = func(n int) {
		t.Helper()
		deadline := time.AfterFunc(10*time.Second, func() { b.Close() })
		defer deadline.Stop()
		for got := 0; got < n; {
			k, err := b.Recv(frames)
			require.NoError(t, err, "after %d of %d datagrams", got, n)
			for _, f := range frames[:k] {
				require.Len(t, f.Data, len(frame))
			}
			got += k
		}
	}
	return b, send, recv
}

// Without --gro the link turns GRO on while datagrams come in full
// batches and off again after a run of batches of one: bulk gets the
// offload, ping-pong never waits on it. Every datagram is handed out
// whole either way.
func TestUDPAdaptiveGRO(t *testing.T) {
	b, send, recv := adaptivePair(t, 24798, 24799)
	require.False(t, b.rx.sockGRO)
	for range 2 * groOnAfter {
		send(64)
		recv(64)
	}
	assert.True(t, b.rx.sockGRO, "full batches turn GRO on")
	for range 2 * groOffAfter {
		send(1)
		recv(1)
	}
	assert.False(t, b.rx.sockGRO, "batches of one turn it off")
	assert.EqualValues(t, 2, b.rx.groSwitches)
}

// With GRO on, a bulk flow whose receiver keeps up reads one GSO run per
// recvmmsg: one message, many datagrams. Counted by messages such batches
// looked like ping-pong and switched GRO off in the middle of a transfer;
// and a run the kernel had coalesced before the switch, read after it,
// came without its datagram size and was dropped whole (RDMA WRITE at a
// 256-PSN window: 15 packets lost, go-back-N). The link counts datagrams,
// and cuts such a run at the last run's datagram size.
func TestUDPAdaptiveGROBulkRuns(t *testing.T) {
	b, send, recv := adaptivePair(t, 24800, 24801)
	for range 2 * groOnAfter {
		send(64)
		recv(64)
	}
	require.True(t, b.rx.sockGRO)
	for range 2 * groOffAfter {
		send(15)
		recv(15)
	}
	assert.True(t, b.rx.sockGRO, "batches of one run of 15 datagrams are bulk")
	// Ping-pong turns it off; a run queued just before the switch is
	// read after it.
	for range groOffAfter {
		send(1)
		recv(1)
	}
	require.True(t, b.rx.sockGRO)
	send(15)
	recv(15)
	assert.False(t, b.rx.sockGRO, "batches of one datagram turn it off")
	assert.Zero(t, b.Stats().RxTruncated, "the run read after the switch is cut, not dropped")
}
