package cm_test

import (
	"bytes"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConnectDisconnect runs rdma_cm's whole life of a connection: REQ,
// REP, RTU, then DREQ and DREP, then timewait on both sides; and checks the
// messages say what the kernel's would.
func TestConnectDisconnect(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	pd := bytes.Repeat([]byte{0xAB}, packet.CMReqPrivateLen)
	req := rdmaCMReq(0x11, 100, pd)
	ida, err := w.a.Connect(w.now, addrB, &req)
	require.NoError(t, err)
	require.Equal(t, cm.StateReqSent, w.a.State(ida))
	w.flush()

	evB := w.takeB()
	require.Len(t, evB, 1)
	e := evB[0]
	require.Equal(t, cm.EventReq, e.Kind)
	require.Equal(t, addrA, e.Peer)
	require.Equal(t, uint32(ida), e.Req.LocalCommID)
	require.Equal(t, uint64(0xA), e.Req.LocalCAGUID)
	require.Equal(t, uint32(0x11), e.Req.LocalQPN)
	require.Equal(t, pd, e.Req.PrivateData)
	idb := e.Conn
	require.Equal(t, cm.StateMRAReqSent, w.b.State(idb), "rdma_cm's delayed MRA is armed")

	r := rep(0x22, 200, []byte("hello"))
	require.NoError(t, w.b.Accept(w.now, idb, &r))
	require.Equal(t, cm.StateRepSent, w.b.State(idb))
	w.flush()
	evA := w.takeA()
	require.Equal(t, []cm.EventKind{cm.EventRep}, kinds(evA))
	require.Equal(t, uint32(idb), evA[0].Rep.LocalCommID)
	require.Equal(t, uint32(ida), evA[0].Rep.RemoteCommID)
	require.Equal(t, uint32(0x22), evA[0].Rep.LocalQPN)
	require.Equal(t, uint32(200), evA[0].Rep.StartingPSN)
	require.Equal(t, uint64(0xB), evA[0].Rep.LocalCAGUID)
	require.Equal(t, []byte("hello"), evA[0].Rep.PrivateData[:5])

	require.NoError(t, w.a.Ready(w.now, ida, nil))
	require.Equal(t, cm.StateEstablished, w.a.State(ida))
	w.flush()
	require.Equal(t, []cm.EventKind{cm.EventEstablished}, kinds(w.takeB()))
	require.Equal(t, cm.StateEstablished, w.b.State(idb))

	// One transaction for the setup, as the kernel: REP and RTU reuse the
	// REQ's TID.
	tid := w.log[0].mad.TID()
	for _, s := range w.log {
		require.Equal(t, tid, s.mad.TID(), "%v", s.attr)
	}
	require.Equal(t, []packet.CMAttr{packet.CMAttrREQ, packet.CMAttrRTU}, w.attrs(addrA))
	require.Equal(t, []packet.CMAttr{packet.CMAttrREP}, w.attrs(addrB))

	require.NoError(t, w.a.Disconnect(w.now, ida, nil))
	require.Equal(t, cm.StateDreqSent, w.a.State(ida))
	w.flush()
	require.Equal(t, []cm.EventKind{cm.EventDisconnectRequest}, kinds(w.takeB()))
	require.NoError(t, w.b.Disconnect(w.now, idb, nil))
	w.flush()
	require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(w.takeA()))
	require.Equal(t, cm.StateTimewait, w.a.State(ida))
	require.Equal(t, cm.StateTimewait, w.b.State(idb))
	last := w.log[len(w.log)-1]
	require.Equal(t, packet.CMAttrDREP, last.attr)
	require.Equal(t, w.log[len(w.log)-2].mad.TID(), last.mad.TID(), "the DREP answers in the DREQ's transaction")
	var dreq packet.CMDreq
	require.NoError(t, dreq.Decode(w.log[len(w.log)-2].mad.Data()))
	require.Equal(t, uint32(0x22), dreq.RemoteQPN)

	// Timewait: the ACK timeout of the path, 2^19 * 4.096 us = 2048 ms.
	w.advance(2047 * cm.Millisecond)
	require.Empty(t, w.takeA())
	w.advance(2048 * cm.Millisecond)
	require.Equal(t, []cm.EventKind{cm.EventTimewaitExit}, kinds(w.takeA()))
	require.Equal(t, []cm.EventKind{cm.EventTimewaitExit}, kinds(w.takeB()))
	require.Zero(t, w.a.Conns())
	require.Zero(t, w.b.Conns())
}

// TestKernelIDs checks comm IDs and TIDs are formed as the kernel forms
// them: the TID's low half is the comm ID byte-swapped (rping.pcap: comm
// ID 0xf104eff3, TID 0x00000002f3ef04f1).
func TestKernelIDs(t *testing.T) {
	w := newWire(t)
	req := rdmaCMReq(1, 1, nil)
	id, err := w.a.Connect(0, addrB, &req)
	require.NoError(t, err)
	o, ok := w.a.Output()
	require.True(t, ok)
	mad := packet.MAD(o.MAD[:])
	v := uint32(id)
	require.Equal(t, v>>24|v>>8&0xFF00|v<<8&0xFF0000|v<<24, uint32(mad.TID()))
	require.NotZero(t, mad.TID()>>32)
	require.Equal(t, addrB, o.To)
	_, err = packet.ParseCMMAD(mad)
	require.NoError(t, err)

	// The same seed gives the same IDs.
	again := cm.New(cm.Config{GUID: 0xA, Seed: 1})
	id2, err := again.Connect(0, addrB, &req)
	require.NoError(t, err)
	require.Equal(t, id, id2)
}

// TestRefusals covers what a REQ or a consumer can be refused with.
func TestRefusals(t *testing.T) {
	t.Run("no listener", func(t *testing.T) {
		w := newWire(t)
		req := rdmaCMReq(1, 1, nil)
		id, err := w.a.Connect(0, addrB, &req)
		require.NoError(t, err)
		w.flush()
		ev := w.takeA()
		require.Equal(t, []cm.EventKind{cm.EventRejected}, kinds(ev))
		require.Equal(t, packet.RejInvalidServiceID, ev[0].Reason)
		require.Equal(t, cm.StateIdle, w.a.State(id))
		var rej packet.CMRej
		require.NoError(t, rej.Decode(w.log[1].mad.Data()))
		require.Zero(t, rej.LocalCommID, "refused before it had a connection")
		require.Equal(t, uint32(id), rej.RemoteCommID)
		require.Equal(t, w.log[0].mad.TID(), w.log[1].mad.TID())
		require.Equal(t, uint64(1), w.b.Counters().Refused)
	})
	t.Run("consumer rejects", func(t *testing.T) {
		w := newWire(t)
		_, err := w.b.Listen(serviceID)
		require.NoError(t, err)
		req := rdmaCMReq(1, 1, nil)
		_, err = w.a.Connect(0, addrB, &req)
		require.NoError(t, err)
		w.flush()
		evB := w.takeB()
		require.NoError(t, w.b.Reject(0, evB[0].Conn, packet.RejConsumerDefined, []byte("busy")))
		w.flush()
		ev := w.takeA()
		require.Equal(t, []cm.EventKind{cm.EventRejected}, kinds(ev))
		require.Equal(t, packet.RejConsumerDefined, ev[0].Reason)
		require.Equal(t, []byte("busy"), ev[0].PrivateData[:4])
		require.Zero(t, w.a.Conns())
		require.Zero(t, w.b.Conns())
	})
	t.Run("active side rejects the REP", func(t *testing.T) {
		w := newWire(t)
		_, err := w.b.Listen(serviceID)
		require.NoError(t, err)
		req := rdmaCMReq(1, 1, nil)
		ida, err := w.a.Connect(0, addrB, &req)
		require.NoError(t, err)
		w.flush()
		r := rep(2, 2, nil)
		require.NoError(t, w.b.Accept(0, w.takeB()[0].Conn, &r))
		w.flush()
		require.Len(t, w.takeA(), 1)
		require.NoError(t, w.a.Reject(0, ida, packet.RejConsumerDefined, nil))
		w.flush()
		require.Equal(t, []cm.EventKind{cm.EventRejected}, kinds(w.takeB()))
		require.Zero(t, w.b.Conns())
	})
	t.Run("listen twice", func(t *testing.T) {
		m := cm.New(cm.Config{})
		l, err := m.Listen(serviceID)
		require.NoError(t, err)
		_, err = m.Listen(serviceID)
		require.ErrorIs(t, err, cm.ErrListening)
		m.Unlisten(l)
		_, err = m.Listen(serviceID)
		require.NoError(t, err)
	})
	t.Run("calls in the wrong state", func(t *testing.T) {
		w := newWire(t)
		req := rdmaCMReq(1, 1, nil)
		id, err := w.a.Connect(0, addrB, &req)
		require.NoError(t, err)
		r := rep(1, 1, nil)
		require.ErrorIs(t, w.a.Accept(0, id, &r), cm.ErrState)
		require.ErrorIs(t, w.a.Ready(0, id, nil), cm.ErrState)
		require.ErrorIs(t, w.a.Disconnect(0, id, nil), cm.ErrState)
		require.ErrorIs(t, w.a.Ready(0, id+1, nil), cm.ErrNoConn)
		long := rdmaCMReq(1, 1, make([]byte, packet.CMReqPrivateLen+1))
		_, err = w.a.Connect(0, addrB, &long)
		require.ErrorIs(t, err, packet.ErrCMPrivateData)
	})
}

// TestListening: the service IDs listened on, as listeners come and go.
func TestListening(t *testing.T) {
	m := cm.New(cm.Config{Seed: 1})
	assert.Empty(t, m.Listening(nil))
	a, err := m.Listen(0x106000000001234)
	require.NoError(t, err)
	_, err = m.Listen(0x111000000001234)
	require.NoError(t, err)
	assert.ElementsMatch(t, []uint64{0x106000000001234, 0x111000000001234}, m.Listening(nil))
	m.Unlisten(a)
	assert.Equal(t, []uint64{7, 0x111000000001234}, m.Listening([]uint64{7}), "appended to what it is given")
}
