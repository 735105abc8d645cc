package qp

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modifyRow is one transition of Linux's qp_state_table (verbs.c),
// transcribed here independently of qpTransitions.
type modifyRow struct {
	cur, next State
	typ       Type
	req, opt  AttrMask
}

const (
	mPKey = AttrPKeyIndex
	mPort = AttrPort
	mAcc  = AttrAccessFlags
	mQKey = AttrQKey
	mCur  = AttrCurState
	mAlt  = AttrAltPath
	mMig  = AttrPathMigState
	mRNRT = AttrMinRNRTimer
)

func modifyRows() []modifyRow {
	rows := []modifyRow{
		{Reset, Init, RC, mPKey | mPort | mAcc, 0},
		{Reset, Init, UC, mPKey | mPort | mAcc, 0},
		{Reset, Init, UD, mPKey | mPort | mQKey, 0},
		{Init, Init, RC, 0, mPKey | mPort | mAcc},
		{Init, Init, UC, 0, mPKey | mPort | mAcc},
		{Init, Init, UD, 0, mPKey | mPort | mQKey},
		{Init, RTR, RC, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | mRNRT, mAlt | mAcc | mPKey},
		{Init, RTR, UC, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, mAlt | mAcc | mPKey},
		{Init, RTR, UD, 0, mPKey | mQKey},
		{RTR, RTS, RC, AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic, mCur | mAlt | mAcc | mRNRT | mMig},
		{RTR, RTS, UC, AttrSQPSN, mCur | mAlt | mAcc | mMig},
		{RTR, RTS, UD, AttrSQPSN, mCur | mQKey},
		{RTS, RTS, RC, 0, mCur | mAcc | mAlt | mMig | mRNRT},
		{RTS, RTS, UC, 0, mCur | mAcc | mAlt | mMig},
		{RTS, RTS, UD, 0, mCur | mQKey},
		{SQD, RTS, RC, 0, mCur | mAlt | mAcc | mRNRT | mMig},
		{SQD, RTS, UC, 0, mCur | mAlt | mAcc | mMig},
		{SQD, RTS, UD, 0, mCur | mQKey},
		{SQD, SQD, RC, 0, mPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
			AttrMaxDestRdAtomic | mAlt | mAcc | mPKey | mRNRT | mMig},
		{SQD, SQD, UC, 0, AttrAV | mAlt | mAcc | mPKey | mMig},
		{SQD, SQD, UD, 0, mPKey | mQKey},
		{SQE, RTS, RC, 0, 0},
		{SQE, RTS, UC, 0, mCur | mAcc},
		{SQE, RTS, UD, 0, mCur | mQKey},
	}
	for _, typ := range []Type{RC, UC, UD} {
		rows = append(rows,
			modifyRow{Reset, Reset, typ, 0, 0},
			modifyRow{RTS, SQD, typ, 0, AttrEnSQDAsyncNotify})
		for _, s := range []State{Init, RTR, RTS, SQD, SQE, Err} {
			rows = append(rows, modifyRow{s, Reset, typ, 0, 0}, modifyRow{s, Err, typ, 0, 0})
		}
	}
	return rows
}

// fullAttr holds valid values for every attribute.
func fullAttr(cur, next State) Attr {
	return Attr{State: next, CurState: cur, AccessFlags: AccessRemoteWrite | AccessRemoteRead,
		Port: 1, QKey: 0x11111111, AV: AddressVector{DGID: netip.MustParseAddr("192.0.2.7"), HopLimit: 64},
		PathMTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, RQPSN: 0x123456,
		SQPSN: 0x654321, MaxRdAtomic: 4, MaxDestRdAtomic: 4, DestQPN: 0x42}
}

// qpInState makes a QP of type typ and brings it to st the regular way (SQE,
// which only a send error enters, is set directly).
func qpInState(t *testing.T, typ Type, st State) *QP {
	t.Helper()
	q, err := New(Config{QPN: 17, Type: typ, SendCQ: NewCQ(16), RecvCQ: NewCQ(16), MaxSendWR: 2,
		MaxRecvWR: 2, Memory: newFakeMemory(), MaxMTU: 4096})
	require.NoError(t, err)
	step := func(from, to State) {
		row := findRow(from, to, typ)
		require.NotNil(t, row)
		a := fullAttr(from, to)
		require.NoError(t, q.Modify(&a, AttrState|row.req), "%s->%s", from, to)
	}
	path := map[State][]State{
		Reset: nil, Init: {Init}, RTR: {Init, RTR}, RTS: {Init, RTR, RTS},
		SQD: {Init, RTR, RTS, SQD}, SQE: {Init, RTR, RTS}, Err: {Init, Err},
	}
	from := Reset
	for _, to := range path[st] {
		step(from, to)
		from = to
	}
	if st == SQE {
		q.attr.State = SQE
	}
	require.Equal(t, st, q.State())
	return q
}

func findRow(cur, next State, typ Type) *modifyRow {
	for _, r := range modifyRows() {
		if r.cur == cur && r.next == next && r.typ == typ {
			return &r
		}
	}
	return nil
}

// TestModifyTransitionTable checks every (current, next, type) cell: valid
// cells accept exactly their required attributes plus any optional one, and
// refuse a missing required or any other attribute; other cells refuse.
// Refusals leave the QP unchanged.
func TestModifyTransitionTable(t *testing.T) {
	states := []State{Reset, Init, RTR, RTS, SQD, SQE, Err}
	for _, typ := range []Type{RC, UC, UD} {
		for _, cur := range states {
			for _, next := range states {
				name := fmt.Sprintf("%s/%s->%s", typ, cur, next)
				row := findRow(cur, next, typ)
				t.Run(name, func(t *testing.T) {
					if row == nil {
						q := qpInState(t, typ, cur)
						a := fullAttr(cur, next)
						err := q.Modify(&a, AttrState)
						require.ErrorIs(t, err, ErrBadTransition)
						assert.Equal(t, cur, q.State())
						return
					}
					testModifyRow(t, *row)
				})
			}
		}
	}
}

func testModifyRow(t *testing.T, row modifyRow) {
	cur, next := row.cur, row.next
	refuse := func(mask AttrMask, target error, want string) {
		t.Helper()
		q := qpInState(t, row.typ, cur)
		before := q.Query()
		a := fullAttr(cur, next)
		err := q.Modify(&a, mask)
		require.ErrorIs(t, err, target, "mask %s", mask)
		assert.Contains(t, err.Error(), want)
		assert.Contains(t, err.Error(), fmt.Sprintf("modify qp 17 %s->%s: ", cur, next))
		assert.Equal(t, before, q.Query(), "a refused modify changes nothing")
	}
	// Required only.
	q := qpInState(t, row.typ, cur)
	a := fullAttr(cur, next)
	require.NoError(t, q.Modify(&a, AttrState|row.req))
	assert.Equal(t, next, q.State())
	// Each required bit missing.
	for b := AttrMask(1); b <= AttrDestQPN; b <<= 1 {
		if row.req&b != 0 {
			refuse(AttrState|row.req&^b, ErrInvalidAttr, fmt.Sprintf("%s requires %s", row.typ, b))
		}
	}
	// Each optional bit added.
	for b := AttrMask(1); b <= AttrDestQPN; b <<= 1 {
		if row.opt&b == 0 {
			continue
		}
		if b == AttrAltPath {
			refuse(AttrState|row.req|b, ErrNotSupported, "IBV_QP_ALT_PATH")
			continue
		}
		q := qpInState(t, row.typ, cur)
		a := fullAttr(cur, next)
		require.NoError(t, q.Modify(&a, AttrState|row.req|b), "optional %s", b)
	}
	// Every other bit refused.
	for b := AttrCurState; b <= AttrDestQPN; b <<= 1 {
		if (row.req|row.opt)&b != 0 {
			continue
		}
		switch {
		case b == AttrCap:
			refuse(AttrState|row.req|b, ErrNotSupported, "IBV_QP_CAP")
		case b == AttrCurState && cur != RTR && cur != RTS && cur != SQD && cur != SQE:
			refuse(AttrState|row.req|b, ErrInvalidAttr, "IBV_QP_CUR_STATE")
		default:
			refuse(AttrState|row.req|b, ErrInvalidAttr, fmt.Sprintf("%s does not allow %s", row.typ, b))
		}
	}
}

func TestModifyWithoutStateIsSameStateTransition(t *testing.T) {
	q := qpInState(t, RC, RTS)
	a := fullAttr(RTS, RTS)
	a.MinRNRTimer = 3
	require.NoError(t, q.Modify(&a, AttrMinRNRTimer))
	assert.Equal(t, uint8(3), q.Query().MinRNRTimer)
	assert.Equal(t, RTS, q.State())
	// RTR->RTR does not exist.
	q = qpInState(t, RC, RTR)
	assert.ErrorIs(t, q.Modify(&a, AttrMinRNRTimer), ErrBadTransition)
}

func TestModifyErrorNamesAttributeAndRule(t *testing.T) {
	q := qpInState(t, RC, Init)
	a := fullAttr(Init, RTR)
	err := q.Modify(&a, AttrState|AttrAV|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "modify qp 17 INIT->RTR: RC requires IBV_QP_PATH_MTU"), err.Error())
}

func TestModifyValues(t *testing.T) {
	type tc struct {
		name string
		cur  State
		next State
		typ  Type
		mask AttrMask
		set  func(*Attr)
		want string
	}
	rtr := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	rts := AttrState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic
	init := AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
	cases := []tc{
		{"mtu not an IB MTU", Init, RTR, RC, rtr, func(a *Attr) { a.PathMTU = 1500 }, "IBV_QP_PATH_MTU 1500"},
		{"mtu above port max", Init, RTR, RC, rtr, func(a *Attr) { a.PathMTU = 8192 }, "IBV_QP_PATH_MTU"},
		{"port 2", Reset, Init, RC, init, func(a *Attr) { a.Port = 2 }, "IBV_QP_PORT 2"},
		{"pkey index 1", Reset, Init, RC, init, func(a *Attr) { a.PKeyIndex = 1 }, "IBV_QP_PKEY_INDEX 1"},
		{"timeout 32", RTR, RTS, RC, rts, func(a *Attr) { a.Timeout = 32 }, "IBV_QP_TIMEOUT 32"},
		{"retry 8", RTR, RTS, RC, rts, func(a *Attr) { a.RetryCnt = 8 }, "IBV_QP_RETRY_CNT 8"},
		{"rnr retry 8", RTR, RTS, RC, rts, func(a *Attr) { a.RNRRetry = 8 }, "IBV_QP_RNR_RETRY 8"},
		{"min rnr timer 32", Init, RTR, RC, rtr, func(a *Attr) { a.MinRNRTimer = 32 }, "IBV_QP_MIN_RNR_TIMER 32"},
		{"rq psn 2^24", Init, RTR, RC, rtr, func(a *Attr) { a.RQPSN = 1 << 24 }, "IBV_QP_RQ_PSN"},
		{"sq psn 2^24", RTR, RTS, RC, rts, func(a *Attr) { a.SQPSN = 1 << 24 }, "IBV_QP_SQ_PSN"},
		{"dest qpn 2^24", Init, RTR, UC, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			func(a *Attr) { a.DestQPN = 1 << 24 }, "IBV_QP_DEST_QPN"},
		{"max rd atomic 129", RTR, RTS, RC, rts, func(a *Attr) { a.MaxRdAtomic = 129 }, "IBV_QP_MAX_QP_RD_ATOMIC 129"},
		{"max dest rd atomic 200", Init, RTR, RC, rtr, func(a *Attr) { a.MaxDestRdAtomic = 200 }, "IBV_QP_MAX_DEST_RD_ATOMIC 200"},
		{"av without dgid", Init, RTR, RC, rtr, func(a *Attr) { a.AV = AddressVector{} }, "IBV_QP_AV"},
		{"cur state mismatch", RTR, RTS, RC, rts | AttrCurState, func(a *Attr) { a.CurState = RTS }, "IBV_QP_CUR_STATE says RTS"},
		{"unknown state", RTS, RTS, RC, AttrState, func(a *Attr) { a.State = 9 }, "unknown state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := qpInState(t, c.typ, c.cur)
			before := q.Query()
			a := fullAttr(c.cur, c.next)
			c.set(&a)
			err := q.Modify(&a, c.mask)
			require.ErrorIs(t, err, ErrInvalidAttr)
			assert.Contains(t, err.Error(), c.want)
			assert.Equal(t, before, q.Query())
		})
	}
	// Boundary values are accepted.
	q := qpInState(t, RC, Init)
	a := fullAttr(Init, RTR)
	a.MinRNRTimer, a.RQPSN, a.DestQPN, a.MaxDestRdAtomic, a.PathMTU = 31, 0xFFFFFF, 0xFFFFFF, 128, 4096
	require.NoError(t, q.Modify(&a, rtr))
	a = fullAttr(RTR, RTS)
	a.Timeout, a.RetryCnt, a.RNRRetry, a.SQPSN, a.MaxRdAtomic = 31, 7, 7, 0xFFFFFF, 128
	require.NoError(t, q.Modify(&a, rts))
}

func TestModifyMaxMTUFromConfig(t *testing.T) {
	q, err := New(Config{QPN: 1, Type: UC, SendCQ: NewCQ(4), RecvCQ: NewCQ(4), Memory: newFakeMemory(), MaxMTU: 1024})
	require.NoError(t, err)
	a := fullAttr(Reset, Init)
	require.NoError(t, q.Modify(&a, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	a = fullAttr(Init, RTR)
	a.PathMTU = 2048
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	assert.ErrorIs(t, q.Modify(&a, mask), ErrInvalidAttr)
	a.PathMTU = 1024
	require.NoError(t, q.Modify(&a, mask))
	assert.Equal(t, MTU(1024), q.Query().PathMTU)
}

func TestModifyStoresAndRounds(t *testing.T) {
	q := qpInState(t, RC, Init)
	a := fullAttr(Init, RTR)
	a.MaxDestRdAtomic = 5
	a.RQPSN = 0xABCDEF
	require.NoError(t, q.Modify(&a, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
	got := q.Query()
	assert.Equal(t, uint8(8), got.MaxDestRdAtomic, "rounded up to a power of two, as rxe")
	assert.Nil(t, q.resp.res, "made at the first request")
	q.resp.sizeResources()
	assert.Equal(t, 8, q.resp.resCap)
	assert.Len(t, q.resp.res, ringStart, "grown as needed (TestRespRingsGrowLikeFullOnes)")
	assert.Equal(t, uint32(0xABCDEF), q.resp.psn)
	assert.Equal(t, a.AV, got.AV)
	assert.Equal(t, a.DestQPN, got.DestQPN)
	assert.Equal(t, a.PathMTU, got.PathMTU)
	assert.Equal(t, a.MinRNRTimer, got.MinRNRTimer)

	a = fullAttr(RTR, RTS)
	a.MaxRdAtomic = 3
	require.NoError(t, q.Modify(&a, AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic))
	got = q.Query()
	assert.Equal(t, uint8(4), got.MaxRdAtomic)
	assert.Equal(t, a.SQPSN, got.SQPSN)
	assert.Equal(t, a.Timeout, got.Timeout)

	// SQD->SQD may resize the responder resources.
	require.NoError(t, q.Modify(&Attr{State: SQD}, AttrState))
	require.NoError(t, q.Modify(&Attr{State: SQD, MaxDestRdAtomic: 1}, AttrState|AttrMaxDestRdAtomic))
	assert.Len(t, q.resp.res, 1)
	assert.Equal(t, 1, q.resp.resCap)
}

func TestAttrMaskString(t *testing.T) {
	assert.Equal(t, "IBV_QP_STATE|IBV_QP_PATH_MTU|IBV_QP_DEST_QPN", (AttrState | AttrPathMTU | AttrDestQPN).String())
	assert.Equal(t, "0", AttrMask(0).String())
	assert.Equal(t, "0x200000", AttrMask(1<<21).String())
}

func TestModifySQDWhileDraining(t *testing.T) {
	mem := newFakeMemory()
	mem.Register(1, make([]byte, 64), AccessLocalWrite)
	q, err := New(Config{QPN: 17, Type: RC, SendCQ: NewCQ(16), RecvCQ: NewCQ(16), MaxSendWR: 4,
		MaxRecvWR: 2, Memory: mem, MaxMTU: 4096})
	require.NoError(t, err)
	for _, to := range []State{Init, RTR, RTS} {
		a := fullAttr(q.State(), to)
		require.NoError(t, q.Modify(&a, AttrState|findRow(q.State(), to, RC).req))
	}
	require.NoError(t, q.PostSend(&SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: 0, Length: 8, LKey: 1}}}))
	var o Outgoing
	require.True(t, q.Transmit(0, &o), "the SEND goes out and stays unacknowledged")
	require.NoError(t, q.Modify(&Attr{State: SQD}, AttrState))
	require.True(t, q.sqDraining())
	a := fullAttr(SQD, RTS)
	err = q.Modify(&a, AttrState)
	require.ErrorIs(t, err, ErrQPState)
	assert.Contains(t, err.Error(), "draining")
	assert.ErrorIs(t, q.Modify(&Attr{State: SQD, Timeout: 3}, AttrState|AttrTimeout), ErrQPState)
	assert.Equal(t, SQD, q.State())
	require.NoError(t, q.Modify(&Attr{State: Err}, AttrState), "ERR is always allowed")
}
