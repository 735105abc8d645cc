//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/songgao/water"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeWire records what a TAP link writes.
type fakeWire struct {
	mu     sync.Mutex
	frames [][]byte
}

func (w *fakeWire) Read([]byte) (int, error) { select {} }
func (w *fakeWire) Close() error             { return nil }
func (w *fakeWire) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.frames = append(w.frames, bytes.Clone(b))
	return len(b), nil
}

func (w *fakeWire) take() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.frames
	w.frames = nil
	return f
}

var (
	tapIP4  = netip.MustParseAddr("10.91.1.1")
	tapIP6  = netip.MustParseAddr("fd00:91::a")
	peerIP4 = netip.MustParseAddr("10.91.1.2")
	peerIP6 = netip.MustParseAddr("fd00:91::b")
	peerMAC = [6]byte{2, 0xaa, 0, 0, 0, 2}
)

// wireTAP is a TAP link on a fake wire: no root, no goroutines.
func wireTAP(t *testing.T) (*TAP, *fakeWire) {
	w := &fakeWire{}
	o := TAPOptions{IPv4: tapIP4, IPv6: tapIP6}.withDefaults()
	return newTAP(&water.Interface{ReadWriteCloser: w}, "fake0", o), w
}

// peer is a TAP link standing for the other host, used to build its ARP and
// NDP packets.
func peerTAP() *TAP {
	o := TAPOptions{IPv4: peerIP4, IPv6: peerIP6, MAC: peerMAC}.withDefaults()
	return newTAP(&water.Interface{ReadWriteCloser: &fakeWire{}}, "peer0", o)
}

func TestTAPAnswersARP(t *testing.T) {
	l, w := wireTAP(t)
	p := peerTAP()
	l.handleFrame(p.arp(1, broadcastMAC, [6]byte{}, tapIP4))
	out := w.take()
	require.Len(t, out, 1)
	r := out[0]
	assert.Equal(t, peerMAC, [6]byte(r[0:6]))
	assert.Equal(t, l.MAC(), [6]byte(r[6:12]))
	a := r[packet.EthernetLen:]
	assert.Equal(t, uint16(2), binary.BigEndian.Uint16(a[6:]), "reply")
	assert.Equal(t, l.MAC(), [6]byte(a[8:14]))
	assert.Equal(t, tapIP4.As4(), [4]byte(a[14:18]))
	assert.Equal(t, peerIP4.As4(), [4]byte(a[24:28]))
	// The requester was learned: a frame to it goes straight out.
	f := roceFrame(t, [6]byte{}, [6]byte{}, tapIP4, peerIP4, 10, 1)
	_, err := l.Send([]Frame{{Data: f}})
	require.NoError(t, err)
	out = w.take()
	require.Len(t, out, 1)
	assert.Equal(t, peerMAC, [6]byte(out[0][0:6]))
	assert.Equal(t, f[12:], out[0][12:])

	// Requests for other addresses are not answered.
	l.handleFrame(p.arp(1, broadcastMAC, [6]byte{}, netip.MustParseAddr("10.91.1.77")))
	assert.Empty(t, w.take())
	assert.Equal(t, uint64(1), l.Stats().ARPReplies)
}

// TestTAPResolvesWithARPAndQueues: frames to an unresolved peer wait for
// its ARP reply, as many as fit in PendingBytes (Linux's unres_qlen_bytes),
// and go out in send order once it comes; beyond the bound they drop. The
// burst is ibv_srq_pingpong's first: an ACK and a four-packet SEND on each
// of 16 QPs (8 frames were kept until it lost 12 of the ACKs).
func TestTAPResolvesWithARPAndQueues(t *testing.T) {
	l, w := wireTAP(t)
	var sent [][]byte
	send := func(payload int) {
		f := roceFrame(t, [6]byte{}, [6]byte{}, tapIP4, peerIP4, payload, uint32(len(sent)))
		sent = append(sent, f)
		_, err := l.Send([]Frame{{Data: f}})
		require.NoError(t, err)
	}
	for range 16 {
		send(0) // an ACK's size
		for range 4 {
			send(1024)
		}
	}
	out := w.take()
	require.Len(t, out, 1, "one ARP request")
	assert.Equal(t, broadcastMAC, [6]byte(out[0][0:6]))
	assert.Equal(t, uint16(etherTypeARP), binary.BigEndian.Uint16(out[0][12:]))
	assert.Zero(t, l.Stats().TxQueueDrop, "the burst waits whole")
	queued := 0
	for _, f := range sent {
		queued += len(f)
	}
	for {
		f := roceFrame(t, [6]byte{}, [6]byte{}, tapIP4, peerIP4, 1024, 0)
		if queued+len(f) > DefaultPendingBytes {
			break
		}
		send(1024)
		queued += len(f)
	}
	send(1024)
	send(1024)
	assert.Equal(t, uint64(2), l.Stats().TxQueueDrop, "past PendingBytes, frames drop")
	sent = sent[:len(sent)-2]

	l.handleFrame(peerTAP().arp(2, l.MAC(), l.MAC(), tapIP4))
	out = w.take()
	require.Equal(t, len(sent), len(out), "every frame that waited goes out")
	for i, f := range out {
		assert.Equal(t, peerMAC, [6]byte(f[0:6]))
		assert.Equal(t, sent[i][12:], f[12:], "in send order")
	}
}

func TestTAPNeighbourDiscovery(t *testing.T) {
	l, w := wireTAP(t)
	p := peerTAP()
	// A solicitation for our address is answered with an advertisement.
	ns := p.ndp(135, tapIP6, solicitedNode(tapIP6), multicastMAC(solicitedNode(tapIP6)), 1)
	l.handleFrame(ns)
	out := w.take()
	require.Len(t, out, 1)
	na := out[0]
	assert.Equal(t, peerMAC, [6]byte(na[0:6]))
	ip := na[packet.EthernetLen:]
	m := ip[packet.IPv6Len:]
	assert.Equal(t, byte(136), m[0])
	assert.Zero(t, icmp6Checksum(ip[8:24], ip[24:40], m), "checksum verifies")
	assert.Equal(t, tapIP6.As16(), [16]byte(m[8:24]))
	assert.Equal(t, l.MAC(), [6]byte(m[26:32]))
	assert.Equal(t, peerIP6.As16(), [16]byte(ip[24:40]))

	// Resolution of a peer: solicitation out, advertisement in, frame out.
	l2, w2 := wireTAP(t)
	f := roceFrame(t, [6]byte{}, [6]byte{}, tapIP6, peerIP6, 10, 1)
	_, err := l2.Send([]Frame{{Data: f}})
	require.NoError(t, err)
	out = w2.take()
	require.Len(t, out, 1)
	assert.Equal(t, [6]byte{0x33, 0x33, 0xff, 0, 0, 0x0b}, [6]byte(out[0][0:6]))
	m = out[0][packet.EthernetLen+packet.IPv6Len:]
	assert.Equal(t, byte(135), m[0])
	l2.handleFrame(p.ndp(136, peerIP6, tapIP6, l2.MAC(), 2))
	out = w2.take()
	require.Len(t, out, 1)
	assert.Equal(t, peerMAC, [6]byte(out[0][0:6]))
	assert.Equal(t, f[12:], out[0][12:])

	// A bad checksum is ignored.
	bad := bytes.Clone(ns)
	bad[len(bad)-1] ^= 1
	l.handleFrame(bad)
	assert.Empty(t, w.take())
}

func TestTAPFiltersReceived(t *testing.T) {
	l, _ := wireTAP(t)
	toUs := roceFrame(t, l.MAC(), peerMAC, peerIP4, tapIP4, 10, 1)
	l.handleFrame(toUs)
	l.handleFrame(roceFrame(t, [6]byte{2, 1, 1, 1, 1, 1}, peerMAC, peerIP4, tapIP4, 10, 2))
	l.handleFrame(roceFrame(t, l.MAC(), peerMAC, peerIP4, netip.MustParseAddr("10.91.1.9"), 10, 3))
	notRoCE := bytes.Clone(toUs)
	notRoCE[packet.EthernetLen+packet.IPv4Len+3] = 1
	l.handleFrame(notRoCE)
	l.handleFrame(make([]byte, 5000))
	l.handleFrame([]byte{1})
	st := l.Stats()
	assert.Equal(t, uint64(1), st.RxFrames)
	assert.Equal(t, uint64(3), st.RxNotForUs)
	assert.Equal(t, uint64(1), st.RxNotRoCE)
	assert.Equal(t, uint64(1), st.RxOversize)
	got := make([]Frame, 4)
	n, err := l.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, toUs, got[0].Data)
}

// Hostile frames from the wire never panic the link.
func FuzzTAPHandleFrame(f *testing.F) {
	p := peerTAP()
	f.Add(p.arp(1, broadcastMAC, [6]byte{}, tapIP4))
	f.Add(p.ndp(135, tapIP6, solicitedNode(tapIP6), multicastMAC(solicitedNode(tapIP6)), 1))
	f.Add(p.ndp(136, peerIP6, tapIP6, broadcastMAC, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &fakeWire{}
		o := TAPOptions{IPv4: tapIP4, IPv6: tapIP6, QueueLen: 4}.withDefaults()
		l := newTAP(&water.Interface{ReadWriteCloser: w}, "fuzz0", o)
		if len(b) >= 6 {
			copy(b, l.mac[:]) // reach the RoCE path too
		}
		l.handleFrame(b)
	})
}

// Hostile IPv4 frames never panic the unknown-ID ICRC check.
func FuzzCheckICRCUnknownIPID(f *testing.F) {
	f.Add(roceFrame(f, [6]byte{}, [6]byte{}, ip4a, ip4b, 10, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var pf packet.Frame
		if packet.ParseFrame(b, &pf) != nil {
			return
		}
		ok := packet.CheckICRCUnknownIPID(&pf)
		if pf.ICRCOK() && !ok {
			t.Fatal("an exactly right ICRC must pass")
		}
	})
}
