package verbsapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A send whose SGE names a key no MR of the PD has fails locally with
// LOC_PROT_ERR, and the QP goes to ERR: nothing reaches the wire as data.
func TestBadLKey(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	require.NoError(t, b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 4096)}}))
	bad := a.mr.SGE(0, 64)
	bad.LKey ^= 0x5a00 // another MR index: no such region
	require.NoError(t, a.qp.PostSend(&SendWR{ID: 9, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{bad}}))
	wc := next(t, a.scq)
	assert.Equal(t, uint64(9), wc.ID)
	assert.Equal(t, WCLocProtErr, wc.Status, "status %s", wc.Status)
	eventually(t, "requester QP in ERR", func() bool { return a.qp.State() == QPSErr })
	assert.Equal(t, QPSRTS, b.qp.State(), "the receiver saw nothing")
}

// An rkey is only good within its PD: a WRITE naming a region of another PD
// on the responder fails with REM_ACCESS_ERR at the requester, and the
// responder's QP gets a local access violation event.
func TestRKeyOfAnotherPD(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	pd2, err := b.ctx.AllocPD()
	require.NoError(t, err)
	other, err := pd2.RegMR(make([]byte, 256), AccessAll)
	require.NoError(t, err)
	require.NoError(t, a.qp.PostSend(&SendWR{ID: 3, Opcode: WRWrite, Flags: SendSignaled,
		SGL: []SGE{a.mr.SGE(0, 32)}, RemoteAddr: other.Addr(), RKey: other.RKey()}))
	wc := next(t, a.scq)
	assert.Equal(t, WCRemAccessErr, wc.Status, "status %s", wc.Status)
	assert.Equal(t, make([]byte, 256), other.Bytes(), "the other PD's region was written")
	e := nextEvent(t, b.ctx)
	assert.Equal(t, EventQPAccessErr, e.Type, "event %s", e)
	assert.Same(t, b.qp, e.QP)
}

// A region registered without the remote right an operation needs refuses
// it with REM_ACCESS_ERR and is left unchanged.
func TestMRWithoutRemoteAccess(t *testing.T) {
	cases := []struct {
		name   string
		access Access
		op     WROpcode
	}{
		{"write to read-only", AccessRemoteRead, WRWrite},
		{"read from write-only", AccessLocalWrite | AccessRemoteWrite, WRRead},
		{"atomic without atomic right", AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead, WRFetchAdd},
		{"read from local-only (rkey 0)", AccessLocalWrite, WRRead},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := connectedHosts(t, hostOpts{}, hostOpts{})
			buf := make([]byte, 64)
			for i := range buf {
				buf[i] = 0xEE
			}
			target, err := b.pd.RegMR(buf, c.access)
			require.NoError(t, err)
			if c.access&(AccessRemoteRead|AccessRemoteWrite|AccessRemoteAtomic) == 0 {
				assert.Zero(t, target.RKey(), "a local-only MR has no rkey")
			}
			n := 32
			if c.op == WRFetchAdd {
				n = 8
			}
			require.NoError(t, a.qp.PostSend(&SendWR{ID: 5, Opcode: c.op, Flags: SendSignaled,
				SGL: []SGE{a.mr.SGE(0, n)}, RemoteAddr: target.Addr(), RKey: target.RKey(), CompareAdd: 1}))
			wc := next(t, a.scq)
			assert.Equal(t, WCRemAccessErr, wc.Status, "status %s", wc.Status)
			for i, v := range target.Bytes() {
				require.Equal(t, byte(0xEE), v, "byte %d of the target changed", i)
			}
			eventually(t, "requester QP in ERR", func() bool { return a.qp.State() == QPSErr })
		})
	}
}

// A CQ that fills up overflows: it raises a CQ error event, stops taking
// completions, Poll reports the loss once the CQ is empty, and the QP that
// could not complete goes to ERR.
func TestCQOverflow(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{recvCQ: 1})
	for i := range 3 {
		require.NoError(t, b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(i*100, 100)}}))
	}
	for i := range 3 {
		require.NoError(t, a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 10)}}))
	}
	var cqErr, qpFatal bool
	for !cqErr || !qpFatal {
		e := nextEvent(t, b.ctx)
		switch e.Type {
		case EventCQErr:
			assert.Same(t, b.rcq, e.CQ)
			cqErr = true
		case EventQPFatal:
			assert.Same(t, b.qp, e.QP)
			qpFatal = true
		default:
			t.Fatalf("unexpected event %s", e)
		}
	}
	assert.Equal(t, QPSErr, b.qp.State())
	wc := make([]WC, 4)
	n, err := b.rcq.Poll(wc)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the one completion the CQ held")
	assert.Equal(t, WCSuccess, wc[0].Status)
	n, err = b.rcq.Poll(wc)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, ErrCQOverflow)
}

// Sends may be posted in RTS (and SQD, ERR) only; the error names the state.
// Receives may be posted from INIT on.
func TestPostInWrongState(t *testing.T) {
	ca, cb := startPair(t)
	a, b := newHost(t, ca, hostOpts{}), newHost(t, cb, hostOpts{})
	wr := &SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}}
	try := func(state string) {
		t.Helper()
		err := a.qp.PostSend(wr)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrQPState)
		assert.Contains(t, err.Error(), "qp in "+state)
		assert.Contains(t, err.Error(), "post send SEND on qp")
	}
	try("RESET")
	err := a.qp.PostRecv(&RecvWR{SGL: []SGE{a.mr.SGE(0, 8)}})
	assert.ErrorIs(t, err, ErrQPState)
	assert.Contains(t, err.Error(), "RESET")

	require.NoError(t, a.qp.ModifyToInit(nil))
	try("INIT")
	require.NoError(t, a.qp.PostRecv(&RecvWR{SGL: []SGE{a.mr.SGE(0, 8)}}), "receives are allowed in INIT")
	eb, err := b.qp.Endpoint(1, 0)
	require.NoError(t, err)
	require.NoError(t, a.qp.ModifyToRTR(eb, nil))
	try("RTR")
	require.NoError(t, a.qp.ModifyToRTS(0, nil))
	assert.NoError(t, a.qp.PostSend(wr))
}

// A Modify without an attribute its transition requires fails, names the
// attribute, and leaves the QP as it was.
func TestModifyMissingAttribute(t *testing.T) {
	ca, cb := startPair(t)
	peer := newHost(t, cb, hostOpts{})
	dgid, err := cb.QueryGID(1, 1)
	require.NoError(t, err)
	rtr := QPAttr{State: QPSRTR, PathMTU: 1024, DestQPN: peer.qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, AV: AddressVector{DGID: dgid, SGIDIndex: 1, HopLimit: 64}}
	rtrMask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	rts := QPAttr{State: QPSRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	rtsMask := QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	cases := []struct {
		name    string
		typ     QPType
		from    QPState
		attr    QPAttr
		mask    QPAttrMask
		missing string
	}{
		{"RC init without port", RC, QPSReset, QPAttr{State: QPSInit, Port: 1}, QPAttrState | QPAttrPKeyIndex | QPAttrAccessFlags, "IBV_QP_PORT"},
		{"RC init without access", RC, QPSReset, QPAttr{State: QPSInit, Port: 1}, QPAttrState | QPAttrPKeyIndex | QPAttrPort, "IBV_QP_ACCESS_FLAGS"},
		{"UD init without qkey", UD, QPSReset, QPAttr{State: QPSInit, Port: 1}, QPAttrState | QPAttrPKeyIndex | QPAttrPort, "IBV_QP_QKEY"},
		{"RC rtr without path MTU", RC, QPSInit, rtr, rtrMask &^ QPAttrPathMTU, "IBV_QP_PATH_MTU"},
		{"RC rtr without AV", RC, QPSInit, rtr, rtrMask &^ QPAttrAV, "IBV_QP_AV"},
		{"RC rtr without dest QPN", RC, QPSInit, rtr, rtrMask &^ QPAttrDestQPN, "IBV_QP_DEST_QPN"},
		{"RC rts without SQ PSN", RC, QPSRTR, rts, rtsMask &^ QPAttrSQPSN, "IBV_QP_SQ_PSN"},
		{"RC rts without timeout", RC, QPSRTR, rts, rtsMask &^ QPAttrTimeout, "IBV_QP_TIMEOUT"},
		{"UD rts without SQ PSN", UD, QPSRTR, QPAttr{State: QPSRTS}, QPAttrState, "IBV_QP_SQ_PSN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, ca, hostOpts{})
			q, err := h.pd.CreateQP(QPInitAttr{SendCQ: h.scq, RecvCQ: h.rcq, QPType: c.typ,
				Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			if c.from >= QPSInit {
				require.NoError(t, q.ModifyToInit(nil))
			}
			if c.from >= QPSRTR {
				ep, err := peer.qp.Endpoint(1, 1)
				require.NoError(t, err)
				require.NoError(t, q.ModifyToRTR(ep, nil))
			}
			before := q.Query()
			attr := c.attr
			err = q.Modify(&attr, c.mask)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidAttr)
			assert.Contains(t, err.Error(), c.missing)
			assert.Contains(t, err.Error(), "requires")
			assert.Equal(t, c.from, q.State())
			assert.Equal(t, before, q.Query(), "a refused Modify changed the QP")
		})
	}
}

// Objects in use cannot be destroyed; once their users are gone they can,
// exactly once.
func TestDestroyBusy(t *testing.T) {
	ca, _ := startPair(t)
	ch, err := ca.CreateCompChannel()
	require.NoError(t, err)
	pd, err := ca.AllocPD()
	require.NoError(t, err)
	cq, err := ca.CreateCQ(8, ch)
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 64), AccessLocalWrite)
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	q, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: RC,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	require.NoError(t, err)

	busy := []struct {
		name string
		do   func() error
	}{
		{"pd with mr, srq and qp", pd.Dealloc},
		{"cq used by a qp", cq.Destroy},
		{"srq used by a qp", srq.Destroy},
		{"comp channel with a cq", ch.Destroy},
	}
	for _, c := range busy {
		err := c.do()
		assert.ErrorIs(t, err, ErrBusy, c.name)
	}
	require.NoError(t, q.Destroy())
	assert.ErrorIs(t, q.Destroy(), ErrDestroyed)
	assert.ErrorIs(t, pd.Dealloc(), ErrBusy, "pd with mr and srq")
	require.NoError(t, srq.Destroy())
	require.NoError(t, mr.Dereg())
	require.NoError(t, pd.Dealloc())
	assert.ErrorIs(t, ch.Destroy(), ErrBusy, "channel with its cq")
	require.NoError(t, cq.Destroy())
	require.NoError(t, ch.Destroy())
	_, err = cq.Poll(make([]WC, 1))
	assert.ErrorIs(t, err, ErrDestroyed)
	assert.Equal(t, 0, ca.Device().Resources().QPs+ca.Device().Resources().PDs+ca.Device().Resources().CQs)
}
