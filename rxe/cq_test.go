package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

func TestCQOverflowRaisesEventAndErrorsQP(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(8)
	rcq, _ := d.CreateCQ(2)
	x, err := d.CreateQP(pd, QPInit{Type: qp.RC, SendCQ: scq, RecvCQ: rcq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxRecvSGE: 1}})
	require.NoError(t, err)
	buf := make([]byte, 64)
	mr, err := d.RegMR(pd, buf, qp.AccessLocalWrite)
	require.NoError(t, err)
	toInit(t, x)
	for i := 0; i < 3; i++ {
		require.NoError(t, x.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}))
	}
	// Moving to ERR flushes three receives into a CQ of two.
	require.NoError(t, x.Modify(&qp.Attr{State: qp.Err}, qp.AttrState))

	var evs []AsyncEvent
	for len(d.Events()) > 0 {
		evs = append(evs, <-d.Events())
	}
	require.NotEmpty(t, evs)
	var cqErr bool
	for _, e := range evs {
		if e.Type == qp.EventCQErr {
			cqErr = true
			assert.Same(t, rcq, e.CQ)
		}
	}
	assert.True(t, cqErr, "CQ error event raised: %+v", evs)
	assert.True(t, rcq.Overflowed())
	assert.Equal(t, qp.Err, x.State())
	wcs := make([]qp.WC, 8)
	n := rcq.Poll(wcs)
	assert.Equal(t, 2, n, "the CQ kept what fitted")
	for _, wc := range wcs[:n] {
		assert.Equal(t, qp.WCWRFlushErr, wc.Status)
		assert.Equal(t, x.QPN(), wc.QPN)
	}
}

func TestCQOverflowDuringTrafficMovesQPToError(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	// Replace b's receive CQ use: post more receives than its CQ (8) holds
	// and send that many messages without polling.
	buf := make([]byte, 16)
	bm, err := db.RegMR(b.pd, buf, qp.AccessLocalWrite)
	require.NoError(t, err)
	am, err := da.RegMR(a.pd, buf, 0)
	require.NoError(t, err)
	n := newNet(da, db)
	sent := 0
	for round := 0; round < 3; round++ {
		for i := 0; i < 4; i++ {
			require.NoError(t, b.qp.PostRecv(&qp.RecvWR{ID: uint64(sent), SGL: []qp.SGE{{Addr: bm.Addr(), Length: 16, LKey: bm.LKey()}}}))
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: uint64(sent), Opcode: qp.WRSend, Flags: qp.SendSignaled,
				SGL: []qp.SGE{{Addr: am.Addr(), Length: 16, LKey: am.LKey()}}}))
			sent++
		}
		n.pump(t, 1000, 100)
		wcs := make([]qp.WC, 16)
		a.scq.Poll(wcs) // keep the sender's CQ drained
	}
	assert.True(t, b.rcq.Overflowed(), "12 receives into a CQ of 8")
	assert.Equal(t, qp.Err, b.qp.State(), "the QP that overflowed its CQ is in ERR")
	var cqErr, fatal bool
	for len(db.Events()) > 0 {
		e := <-db.Events()
		cqErr = cqErr || e.Type == qp.EventCQErr && e.CQ == b.rcq
		fatal = fatal || e.Type == qp.EventQPFatal && e.QP == b.qp
	}
	assert.True(t, cqErr, "EventCQErr")
	assert.True(t, fatal, "EventQPFatal for the QP")
}

func TestCQNotify(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	buf := make([]byte, 16)
	bm, _ := db.RegMR(b.pd, buf, qp.AccessLocalWrite)
	am, _ := da.RegMR(a.pd, buf, 0)
	n := newNet(da, db)
	send := func(flags qp.SendFlags) {
		require.NoError(t, b.qp.PostRecv(&qp.RecvWR{SGL: []qp.SGE{{Addr: bm.Addr(), Length: 16, LKey: bm.LKey()}}}))
		require.NoError(t, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRSend, Flags: flags,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: 16, LKey: am.LKey()}}}))
		n.pump(t, 1000, 100)
	}
	fired := func(c *CQ) bool {
		select {
		case <-c.C():
			return true
		default:
			return false
		}
	}
	send(qp.SendSignaled)
	assert.False(t, fired(b.rcq), "not armed: no notification")
	require.NoError(t, b.rcq.Arm(false))
	send(qp.SendSignaled)
	assert.True(t, fired(b.rcq), "armed: notified")
	send(qp.SendSignaled)
	assert.False(t, fired(b.rcq), "one-shot")
	require.NoError(t, b.rcq.Arm(true))
	send(qp.SendSignaled)
	assert.False(t, fired(b.rcq), "solicited-only ignores an unsolicited send")
	send(qp.SendSignaled | qp.SendSolicited)
	assert.True(t, fired(b.rcq), "solicited send notifies")
	assert.Equal(t, 5, b.rcq.Len())
}

func TestSRQSharedAndLimitEvent(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	pd, _ := db.AllocPD()
	cq, _ := db.CreateCQ(64)
	srq, err := db.CreateSRQ(pd, SRQInit{MaxWR: 8, MaxSGE: 1, Limit: 3})
	require.NoError(t, err)
	buf := make([]byte, 8*64)
	bm, _ := db.RegMR(pd, buf, qp.AccessLocalWrite)
	for i := 0; i < 6; i++ {
		require.NoError(t, srq.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: bm.Addr() + uint64(64*i), Length: 64, LKey: bm.LKey()}}}))
	}
	assert.Equal(t, 6, srq.Len())
	assert.Equal(t, SRQInit{MaxWR: 8, MaxSGE: 1, Limit: 3}, srq.Query())
	// Two QPs on b share the SRQ, each connected to its own QP on a.
	var senders []*side
	var receivers []*QP
	for i := 0; i < 2; i++ {
		x, err := db.CreateQP(pd, QPInit{Type: qp.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4}})
		require.NoError(t, err)
		b := &side{d: db, pd: pd, scq: cq, rcq: cq, qp: x, gidIdx: 1, timeout: 14}
		a := newSide(t, da, qp.RC, 8)
		toInit(t, a.qp)
		toInit(t, b.qp)
		toRTS(t, a, b, 1024)
		toRTS(t, b, a, 1024)
		senders = append(senders, a)
		receivers = append(receivers, x)
	}
	n := newNet(da, db)
	for i := 0; i < 4; i++ {
		a := senders[i%2]
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendInline | qp.SendSignaled,
			Inline: []byte{byte('a' + i)}}))
		n.pump(t, 1000, 100)
	}
	wcs := make([]qp.WC, 8)
	k := cq.Poll(wcs)
	require.Equal(t, 4, k)
	for i, wc := range wcs[:k] {
		require.Equal(t, qp.WCSuccess, wc.Status)
		assert.Equal(t, uint64(i), wc.ID, "SRQ WQEs are used in posting order")
		assert.Equal(t, receivers[i%2].QPN(), wc.QPN, "the receiving QP")
		assert.Equal(t, byte('a'+i), buf[64*i])
	}
	assert.Equal(t, 2, srq.Len())
	var limit bool
	for len(db.Events()) > 0 {
		e := <-db.Events()
		if e.Type == qp.EventSRQLimitReached {
			limit = true
			assert.Same(t, srq, e.SRQ)
		}
	}
	assert.True(t, limit, "fewer than 3 WQEs left raises the limit event")
	assert.Equal(t, 0, srq.Query().Limit, "the limit disarms")
	assert.ErrorIs(t, db.DestroySRQ(srq), ErrBusy)
}
