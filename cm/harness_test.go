package cm_test

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
)

const serviceID = 0x0000000001061C06 // rdma_cm TCP port 7174

// wire carries MADs between two managers in virtual time. A filter can
// drop or inspect each MAD on its way; every MAD sent is logged.
type wire struct {
	t    *testing.T
	now  cm.Time
	a, b *cm.Manager
	// drop decides whether a MAD from the manager at from is lost.
	drop func(from netip.Addr, mad packet.MAD) bool
	log  []sent
	evA  []cm.Event
	evB  []cm.Event
}

// sent is a MAD on the wire.
type sent struct {
	at   cm.Time
	from netip.Addr
	attr packet.CMAttr
	mad  packet.MAD
}

func newWire(t *testing.T) *wire {
	return &wire{t: t,
		a: cm.New(cm.Config{GUID: 0xA, Seed: 1, TargetACKDelay: 15}),
		b: cm.New(cm.Config{GUID: 0xB, Seed: 2, TargetACKDelay: 15}),
	}
}

// flush delivers every queued MAD (and the MADs they cause) and collects
// events.
func (w *wire) flush() {
	for moved := true; moved; {
		moved = false
		for _, side := range []struct {
			from     netip.Addr
			src, dst *cm.Manager
		}{{addrA, w.a, w.b}, {addrB, w.b, w.a}} {
			for {
				o, ok := side.src.Output()
				if !ok {
					break
				}
				moved = true
				mad := packet.MAD(append([]byte(nil), o.MAD[:]...))
				w.log = append(w.log, sent{w.now, side.from, mad.AttrID(), mad})
				if w.drop != nil && w.drop(side.from, mad) {
					continue
				}
				side.dst.Receive(w.now, side.from, mad)
			}
		}
	}
	for e, ok := w.a.Event(); ok; e, ok = w.a.Event() {
		w.evA = append(w.evA, e)
	}
	for e, ok := w.b.Event(); ok; e, ok = w.b.Event() {
		w.evB = append(w.evB, e)
	}
}

// advance runs both managers' timers up to and including until.
func (w *wire) advance(until cm.Time) {
	for {
		w.flush()
		next, ok := cm.Time(0), false
		for _, m := range []*cm.Manager{w.a, w.b} {
			if d, has := m.Deadline(); has && (!ok || d < next) {
				next, ok = d, true
			}
		}
		if !ok || next > until {
			w.now = until
			return
		}
		w.now = next
		w.a.Tick(w.now)
		w.b.Tick(w.now)
	}
}

// takeA and takeB return the events collected so far and forget them.
func (w *wire) takeA() []cm.Event { e := w.evA; w.evA = nil; return e }
func (w *wire) takeB() []cm.Event { e := w.evB; w.evB = nil; return e }

// attrs lists the attributes of the MADs sent from from.
func (w *wire) attrs(from netip.Addr) []packet.CMAttr {
	var out []packet.CMAttr
	for _, s := range w.log {
		if s.from == from {
			out = append(out, s.attr)
		}
	}
	return out
}

// kinds lists event kinds.
func kinds(es []cm.Event) []cm.EventKind {
	var out []cm.EventKind
	for _, e := range es {
		out = append(out, e.Kind)
	}
	return out
}

// rdmaCMReq is a REQ as the kernel's rdma_cm fills it on RoCE for a
// connection from A to B (reference/rdma-cm.md §1.4).
func rdmaCMReq(qpn, psn uint32, pd []byte) packet.CMReq {
	r := packet.CMReq{ServiceID: serviceID, LocalQPN: qpn, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: cm.ResponseTimeout, TransportType: packet.CMTransportRC, StartingPSN: psn,
		LocalCMResponseTimeout: cm.ResponseTimeout, RetryCount: 7, PKey: 0xFFFF, PathMTU: 3, RNRRetryCount: 7,
		MaxCMRetries: cm.MaxCMRetries, PrivateData: pd}
	r.Primary = packet.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: addrA.As16(), RemoteGID: addrB.As16(),
		HopLimit: 64, LocalACKTimeout: cm.PacketLifetime + 1}
	return r
}

// rep is a REP as rdma_cm fills it.
func rep(qpn, psn uint32, pd []byte) packet.CMRep {
	return packet.CMRep{LocalQPN: qpn, StartingPSN: psn, ResponderResources: 1, InitiatorDepth: 1,
		TargetACKDelay: 15, RNRRetryCount: 7, PrivateData: pd}
}

// connect runs a whole connection setup from A to B and returns both IDs.
func (w *wire) connect(qpnA, qpnB uint32) (cm.ConnID, cm.ConnID) {
	t := w.t
	req := rdmaCMReq(qpnA, 100, nil)
	ida, err := w.a.Connect(w.now, addrB, &req)
	require.NoError(t, err)
	w.flush()
	evB := w.takeB()
	require.Equal(t, []cm.EventKind{cm.EventReq}, kinds(evB))
	r := rep(qpnB, 200, nil)
	require.NoError(t, w.b.Accept(w.now, evB[0].Conn, &r))
	w.flush()
	evA := w.takeA()
	require.Equal(t, []cm.EventKind{cm.EventRep}, kinds(evA))
	require.NoError(t, w.a.Ready(w.now, ida, nil))
	w.flush()
	require.Equal(t, []cm.EventKind{cm.EventEstablished}, kinds(w.takeB()))
	return ida, evB[0].Conn
}

// drain returns a manager's pending events.
func drain(m *cm.Manager) []cm.Event {
	var out []cm.Event
	for e, ok := m.Event(); ok; e, ok = m.Event() {
		out = append(out, e)
	}
	return out
}

// step runs the managers to their next deadline; false if none is left.
func (w *wire) step() bool {
	w.flush()
	next, ok := cm.Time(0), false
	for _, m := range []*cm.Manager{w.a, w.b} {
		if d, has := m.Deadline(); has && (!ok || d < next) {
			next, ok = d, true
		}
	}
	if !ok {
		return false
	}
	w.now = next
	w.a.Tick(w.now)
	w.b.Tick(w.now)
	w.flush()
	return true
}

// waitA and waitB run the managers until A (B) has an event, as a
// consumer that answers at once would.
func (w *wire) waitA() []cm.Event {
	for w.flush(); len(w.evA) == 0 && w.step(); {
	}
	return w.takeA()
}

func (w *wire) waitB() []cm.Event {
	for w.flush(); len(w.evB) == 0 && w.step(); {
	}
	return w.takeB()
}
