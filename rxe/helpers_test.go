package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

var (
	macA = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02}
	macB = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x03}
	ipA  = netip.MustParseAddr("10.77.0.2")
	ipB  = netip.MustParseAddr("10.77.0.3")
	ip6A = netip.MustParseAddr("fd00::2")
	ip6B = netip.MustParseAddr("fd00::3")
)

// newDev returns a device without a link, driven by the test.
func newDev(t testing.TB, name string, mac [6]byte, v4, v6 netip.Addr, mtu int) *Device {
	t.Helper()
	d, err := New(Config{Name: name, MAC: mac, IPv4: v4, IPv6: v6, MTU: mtu, Seed: 1 + uint64(mac[5])})
	require.NoError(t, err)
	return d
}

// net is a deterministic two-device network: pump moves frames between the
// devices with explicit time, as the simulator will.
type net struct {
	devs   []*Device
	now    qp.Time
	frames []link.Frame
	// filter, when set, sees every frame in flight and may drop it
	// (return false) or change it.
	filter func(from, to *Device, f []byte) bool
	moved  int
	// pumpStep, when set, is the least time poll lets pass between
	// rounds: a caller that comes late to every deadline.
	pumpStep qp.Time
}

func newNet(devs ...*Device) *net {
	n := &net{devs: devs, frames: make([]link.Frame, 32)}
	for i := range n.frames {
		n.frames[i].Data = make([]byte, 0, MaxFrameLen)
	}
	return n
}

// route picks the device owning the frame's destination IP.
func (n *net) route(from *Device, f []byte) *Device {
	for _, d := range n.devs {
		if d == from {
			continue
		}
		var fr packetFrame
		if parse(f, &fr) == nil {
			_, dst := frameAddrs(&fr)
			if d.ownIP(dst) {
				return d
			}
		}
	}
	return nil
}

// pump moves frames until no device has output, then runs timers that are
// due, advancing time by step each round, for at most rounds rounds.
func (n *net) pump(t testing.TB, step qp.Time, rounds int) {
	t.Helper()
	for r := 0; r < rounds; r++ {
		busy := false
		for _, d := range n.devs {
			for {
				k, more := d.Output(n.now, n.frames)
				for i := 0; i < k; i++ {
					to := n.route(d, n.frames[i].Data)
					if to == nil {
						continue
					}
					if n.filter != nil && !n.filter(d, to, n.frames[i].Data) {
						continue
					}
					n.moved++
					to.HandleFrame(n.now, n.frames[i])
				}
				if k > 0 {
					busy = true
				}
				if !more {
					break
				}
			}
		}
		if busy {
			continue
		}
		// Idle: jump to the next deadline, if any.
		next := qp.Never
		for _, d := range n.devs {
			next = min(next, d.Deadline())
		}
		if next == qp.Never || next-n.now > 10*60*1e9 {
			return
		}
		n.now = max(n.now+step, next)
		for _, d := range n.devs {
			d.Tick(n.now)
		}
	}
}

type packetFrame = packet.Frame

func parse(b []byte, f *packet.Frame) error { return packet.ParseFrame(b, f) }

// side is one end of a connection in a test: device, PD, CQs and a QP.
type side struct {
	d      *Device
	pd     *PD
	scq    *CQ
	rcq    *CQ
	qp     *QP
	gidIdx uint8
	// timeout is the local ACK timeout code toRTS sets.
	timeout uint8
}

func newSide(t testing.TB, d *Device, typ qp.Type, depth int) *side {
	t.Helper()
	pd, err := d.AllocPD()
	require.NoError(t, err)
	scq, err := d.CreateCQ(depth)
	require.NoError(t, err)
	rcq, err := d.CreateCQ(depth)
	require.NoError(t, err)
	x, err := d.CreateQP(pd, QPInit{Type: typ, SendCQ: scq, RecvCQ: rcq,
		Cap: QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}})
	require.NoError(t, err)
	return &side{d: d, pd: pd, scq: scq, rcq: rcq, qp: x, gidIdx: 1, timeout: 14}
}

const testQKey = 0x11111111

// toInit moves a QP from RESET to INIT.
func toInit(t testing.TB, x *QP) {
	t.Helper()
	a := qp.Attr{State: qp.Init, Port: 1, AccessFlags: rwAll &^ qp.AccessLocalWrite, QKey: testQKey}
	mask := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if x.Type() == qp.UD {
		mask |= qp.AttrQKey
	} else {
		mask |= qp.AttrAccessFlags
	}
	require.NoError(t, x.Modify(&a, mask))
}

// toRTS moves a QP from INIT through RTR to RTS, connected to peer (RC/UC).
func toRTS(t testing.TB, x *side, peer *side, mtu qp.MTU) {
	t.Helper()
	if x.qp.Type() == qp.UD {
		require.NoError(t, x.qp.Modify(&qp.Attr{State: qp.RTR}, qp.AttrState))
		require.NoError(t, x.qp.Modify(&qp.Attr{State: qp.RTS, SQPSN: 100}, qp.AttrState|qp.AttrSQPSN))
		return
	}
	dgid, err := peer.d.QueryGID(int(peer.gidIdx))
	require.NoError(t, err)
	a := qp.Attr{State: qp.RTR, PathMTU: mtu, DestQPN: peer.qp.QPN(), RQPSN: 1000 + peer.qp.QPN(),
		MaxDestRdAtomic: 16, MinRNRTimer: 1,
		AV: qp.AddressVector{DGID: dgid, SGIDIndex: x.gidIdx, HopLimit: 64}}
	mask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	if x.qp.Type() == qp.RC {
		mask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	}
	require.NoError(t, x.qp.Modify(&a, mask))
	b := qp.Attr{State: qp.RTS, Timeout: x.timeout, RetryCnt: 7, RNRRetry: 7, SQPSN: 1000 + x.qp.QPN(), MaxRdAtomic: 16}
	mask = qp.AttrState | qp.AttrSQPSN
	if x.qp.Type() == qp.RC {
		mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	require.NoError(t, x.qp.Modify(&b, mask))
}

// connect creates and connects a QP pair of type typ between two devices.
func connect(t testing.TB, da, db *Device, typ qp.Type, depth int, mtu qp.MTU) (*side, *side) {
	t.Helper()
	return connectSides(t, newSide(t, da, typ, depth), newSide(t, db, typ, depth), mtu)
}

// connectSides connects two sides made by newSide.
func connectSides(t testing.TB, a, b *side, mtu qp.MTU) (*side, *side) {
	t.Helper()
	toInit(t, a.qp)
	toInit(t, b.qp)
	toRTS(t, a, b, mtu)
	toRTS(t, b, a, mtu)
	return a, b
}

// poll collects n completions from c, pumping the network in between.
func (n *net) poll(t testing.TB, c *CQ, want int) []qp.WC {
	t.Helper()
	var got []qp.WC
	buf := make([]qp.WC, 16)
	for i := 0; i < 1000 && len(got) < want; i++ {
		k := c.Poll(buf)
		got = append(got, buf[:k]...)
		if len(got) < want {
			n.pump(t, max(1000, n.pumpStep), 1000)
		}
	}
	require.Len(t, got, want, "completions")
	return got
}
