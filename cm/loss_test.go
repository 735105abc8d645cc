package cm_test

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// dropN drops the first n MADs of attribute a from from.
func dropN(from netip.Addr, a packet.CMAttr, n int) func(netip.Addr, packet.MAD) bool {
	return func(f netip.Addr, m packet.MAD) bool {
		if f == from && m.AttrID() == a && n > 0 {
			n--
			return true
		}
		return false
	}
}

// TestREQRetries: a REQ nobody answers is sent every 6144 ms (twice the
// packet lifetime plus the response timeout), 16 times, then the
// connection is unreachable: the kernel's numbers.
func TestREQRetries(t *testing.T) {
	w := newWire(t)
	w.drop = func(netip.Addr, packet.MAD) bool { return true }
	req := rdmaCMReq(1, 1, nil)
	_, err := w.a.Connect(0, addrB, &req)
	require.NoError(t, err)
	w.advance(200_000 * cm.Millisecond)
	var at []cm.Time
	for _, s := range w.log {
		at = append(at, s.at)
	}
	require.Len(t, at, 16)
	for i := range at {
		require.Equal(t, cm.Time(i)*6144*cm.Millisecond, at[i])
	}
	ev := w.takeA()
	require.Equal(t, []cm.EventKind{cm.EventUnreachable}, kinds(ev))
	require.Zero(t, w.a.Conns())
	c := w.a.Counters()
	require.Equal(t, uint64(15), c.Retransmits)
	require.Equal(t, uint64(1), c.Timeouts)
	_, ok := w.a.Deadline()
	require.False(t, ok)
}

// TestLostMessages loses each message of the setup and teardown once and
// checks the connection still comes up and goes down.
func TestLostMessages(t *testing.T) {
	for _, c := range []struct {
		name string
		from netip.Addr
		attr packet.CMAttr
	}{
		{"REQ", addrA, packet.CMAttrREQ},
		{"REP", addrB, packet.CMAttrREP},
		{"RTU", addrA, packet.CMAttrRTU},
		{"DREQ", addrA, packet.CMAttrDREQ},
		{"DREP", addrB, packet.CMAttrDREP},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWire(t)
			w.drop = dropN(c.from, c.attr, 1)
			_, err := w.b.Listen(serviceID)
			require.NoError(t, err)
			req := rdmaCMReq(1, 1, nil)
			ida, err := w.a.Connect(0, addrB, &req)
			require.NoError(t, err)
			evB := w.waitB()
			require.Equal(t, []cm.EventKind{cm.EventReq}, kinds(evB))
			r := rep(2, 2, nil)
			require.NoError(t, w.b.Accept(w.now, evB[0].Conn, &r))
			require.Equal(t, []cm.EventKind{cm.EventRep}, kinds(w.waitA()))
			require.NoError(t, w.a.Ready(w.now, ida, nil))
			// A lost RTU: the passive side's REP comes again, and the
			// active side answers it with the RTU again.
			require.Equal(t, []cm.EventKind{cm.EventEstablished}, kinds(w.waitB()))
			require.Empty(t, w.takeA(), "a duplicate REP is no news to the consumer")

			require.NoError(t, w.a.Disconnect(w.now, ida, nil))
			require.Equal(t, []cm.EventKind{cm.EventDisconnectRequest}, kinds(w.waitB()))
			require.NoError(t, w.b.Disconnect(w.now, evB[0].Conn, nil))
			require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(w.waitA()))
			w.advance(w.now + 10_000*cm.Millisecond)
			require.Equal(t, []cm.EventKind{cm.EventTimewaitExit}, kinds(w.takeA()))
			require.Equal(t, []cm.EventKind{cm.EventTimewaitExit}, kinds(w.takeB()))
			require.Zero(t, w.a.Conns())
			require.Zero(t, w.b.Conns())
			require.Equal(t, uint64(1), w.a.Counters().Retransmits+w.b.Counters().Retransmits)
		})
	}
}

// TestDelayedMRA: a passive consumer slower than the REQ's timeout gets
// the REQ again; the manager answers it with an MRA (service timeout 24,
// about 67 s), and the active side waits that long before its next try.
func TestDelayedMRA(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	req := rdmaCMReq(1, 1, nil)
	ida, err := w.a.Connect(0, addrB, &req)
	require.NoError(t, err)
	w.advance(6144 * cm.Millisecond)
	require.Len(t, w.takeB(), 1, "the duplicate REQ is not a second request")
	require.Equal(t, []packet.CMAttr{packet.CMAttrMRA}, w.attrs(addrB))
	require.Equal(t, cm.StateMRAReqRcvd, w.a.State(ida))
	require.Equal(t, uint64(1), w.b.Counters().Duplicates)
	next, ok := w.a.Deadline()
	require.True(t, ok)
	require.Equal(t, 6144*cm.Millisecond+65536*cm.Millisecond+1024*cm.Millisecond, next)
}

// TestStaleConnection: a REQ from a QP that is still connected to us (its
// host restarted, say) is refused as stale, and the old connection is
// disconnected.
func TestStaleConnection(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	ida, idb := w.connect(0x11, 0x22)
	// A's side forgets the connection without telling B (a crash).
	w.a = cm.New(cm.Config{GUID: 0xA, Seed: 99})
	req := rdmaCMReq(0x11, 5, nil)
	_, err = w.a.Connect(w.now, addrB, &req)
	require.NoError(t, err)
	w.flush()
	ev := w.takeA()
	require.Equal(t, []cm.EventKind{cm.EventRejected}, kinds(ev))
	require.Equal(t, packet.RejStaleConn, ev[0].Reason)
	// B disconnects the old connection; A, which forgot it, answers the
	// DREQ statelessly.
	require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(w.takeB()))
	require.Equal(t, cm.StateTimewait, w.b.State(idb))
	_ = ida
}

// TestSimultaneousDisconnect: both sides send a DREQ at once; each answers
// the other's and both end in timewait.
func TestSimultaneousDisconnect(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	ida, idb := w.connect(1, 2)
	require.NoError(t, w.a.Disconnect(w.now, ida, nil))
	require.NoError(t, w.b.Disconnect(w.now, idb, nil))
	w.flush()
	require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(w.takeA()))
	require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(w.takeB()))
	require.Equal(t, cm.StateTimewait, w.a.State(ida))
	require.Equal(t, cm.StateTimewait, w.b.State(idb))
}

// TestUnknownDREQ: a DREQ naming no connection is answered with a DREP so
// its sender stops (the kernel's cm_issue_drep).
func TestUnknownDREQ(t *testing.T) {
	m := cm.New(cm.Config{GUID: 0xB})
	mad := packet.NewCMMAD(packet.CMAttrDREQ, 77)
	require.NoError(t, (&packet.CMDreq{LocalCommID: 5, RemoteCommID: 6, RemoteQPN: 7}).Encode(mad.Data()))
	m.Receive(0, addrA, mad)
	o, ok := m.Output()
	require.True(t, ok)
	out := packet.MAD(o.MAD[:])
	require.Equal(t, packet.CMAttrDREP, out.AttrID())
	require.Equal(t, uint64(77), out.TID())
	var drep packet.CMDrep
	require.NoError(t, drep.Decode(out.Data()))
	require.Equal(t, [2]uint32{6, 5}, [2]uint32{drep.LocalCommID, drep.RemoteCommID})
}

// TestEstablishWithoutRTU: data from the peer before the RTU establishes
// the passive side (IBV_EVENT_COMM_EST), which stops the REP's retries.
func TestEstablishWithoutRTU(t *testing.T) {
	w := newWire(t)
	w.drop = dropN(addrA, packet.CMAttrRTU, 100)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	req := rdmaCMReq(1, 1, nil)
	ida, err := w.a.Connect(0, addrB, &req)
	require.NoError(t, err)
	w.flush()
	idb := w.takeB()[0].Conn
	r := rep(2, 2, nil)
	require.NoError(t, w.b.Accept(0, idb, &r))
	w.flush()
	require.NoError(t, w.a.Ready(0, ida, nil))
	w.flush()
	require.Empty(t, w.takeB())
	require.NoError(t, w.b.Establish(w.now, idb))
	require.Equal(t, []cm.EventKind{cm.EventEstablished}, kinds(drain(w.b)))
	_, ok := w.b.Deadline()
	require.False(t, ok, "the REP is no longer retransmitted")
}
