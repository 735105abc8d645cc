package qp

import (
	"fmt"
	"math/bits"
	"strings"
)

// Modify changes the QP's attributes and state, as ibv_modify_qp. The mask
// must hold every attribute the transition requires and nothing it does not
// allow, exactly as Linux's ib_modify_qp_is_ok encodes IBTA's table
// (qpTransitions); without AttrState the transition is from the current
// state to itself. Values are checked against rxe's limits before anything
// changes, so a refused Modify leaves the QP as it was.
func (q *QP) Modify(attr *Attr, mask AttrMask) error {
	cur := q.attr.State
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if err := q.checkModify(attr, mask, cur, next); err != nil {
		return err
	}
	prev := q.attr
	q.applyAttr(attr, mask)
	switch {
	case next == Err && cur != Err:
		q.toError() // flushes both queues and sets the state
	default:
		q.attr.State = next
	}
	q.sendOnModify(prev.State, mask)
	q.recvOnModify(prev.State, mask)
	return nil
}

// transition is one cell of the state table: whether it exists, and per QP
// type the attributes it requires and those it allows.
type transition struct {
	valid    bool
	req, opt [UD + 1]AttrMask
}

// qpTransitions is Linux's qp_state_table (drivers/infiniband/core/verbs.c)
// for RC, UC and UD, indexed [current][next]. AttrState is always allowed.
var qpTransitions = [Err + 1][Err + 1]transition{
	Reset: {
		Reset: {valid: true},
		Init: {valid: true, req: [UD + 1]AttrMask{
			RC: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			UC: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			UD: AttrPKeyIndex | AttrPort | AttrQKey,
		}},
	},
	Init: {
		Reset: {valid: true},
		Err:   {valid: true},
		Init: {valid: true, opt: [UD + 1]AttrMask{
			RC: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			UC: AttrPKeyIndex | AttrPort | AttrAccessFlags,
			UD: AttrPKeyIndex | AttrPort | AttrQKey,
		}},
		RTR: {valid: true,
			req: [UD + 1]AttrMask{
				RC: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
				UC: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			},
			opt: [UD + 1]AttrMask{
				RC: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				UC: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				UD: AttrPKeyIndex | AttrQKey,
			}},
	},
	RTR: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			req: [UD + 1]AttrMask{
				RC: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRdAtomic,
				UC: AttrSQPSN,
				UD: AttrSQPSN,
			},
			opt: [UD + 1]AttrMask{
				RC: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState,
				UC: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState,
				UD: AttrCurState | AttrQKey,
			}},
	},
	RTS: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true, opt: [UD + 1]AttrMask{
			RC: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer,
			UC: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState,
			UD: AttrCurState | AttrQKey,
		}},
		SQD: {valid: true, opt: [UD + 1]AttrMask{
			RC: AttrEnSQDAsyncNotify,
			UC: AttrEnSQDAsyncNotify,
			UD: AttrEnSQDAsyncNotify,
		}},
	},
	SQD: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true, opt: [UD + 1]AttrMask{
			RC: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState,
			UC: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState,
			UD: AttrCurState | AttrQKey,
		}},
		SQD: {valid: true, opt: [UD + 1]AttrMask{
			RC: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic |
				AttrMaxDestRdAtomic | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer |
				AttrPathMigState,
			UC: AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState,
			UD: AttrPKeyIndex | AttrQKey,
		}},
	},
	SQE: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true, opt: [UD + 1]AttrMask{
			UC: AttrCurState | AttrAccessFlags,
			UD: AttrCurState | AttrQKey,
		}},
	},
	Err: {
		Reset: {valid: true},
		Err:   {valid: true},
	},
}

// Limits Modify enforces, from rxe_param.h and IBTA field widths.
const (
	maxQPRdAtom = 128 // rxe max_qp_rd_atom and max_qp_init_rd_atom
	maxPSN      = psnMask
)

// checkModify validates a Modify without changing anything.
func (q *QP) checkModify(attr *Attr, mask AttrMask, cur, next State) error {
	fail := func(err error, format string, args ...any) error {
		return fmt.Errorf("modify qp %d %s->%s: %s: %w", q.cfg.QPN, cur, next, fmt.Sprintf(format, args...), err)
	}
	if next > Err {
		return fail(ErrInvalidAttr, "unknown state %d", uint8(next))
	}
	t := q.cfg.Type
	if mask&AttrCurState != 0 {
		switch cur {
		case RTR, RTS, SQD, SQE:
		default:
			return fail(ErrInvalidAttr, "IBV_QP_CUR_STATE is only allowed from RTR, RTS, SQD or SQE")
		}
		if attr.CurState != cur {
			return fail(ErrInvalidAttr, "IBV_QP_CUR_STATE says %s but the QP is in %s", attr.CurState, cur)
		}
	}
	tr := &qpTransitions[cur][next]
	if !tr.valid {
		return fail(ErrBadTransition, "no such transition")
	}
	req, opt := tr.req[t], tr.opt[t]
	if missing := req &^ mask; missing != 0 {
		return fail(ErrInvalidAttr, "%s requires %s", t, missing.lowest())
	}
	if mask&AttrCap != 0 {
		// No transition allows it (ib_modify_qp_is_ok); say why.
		return fail(ErrNotSupported, "IBV_QP_CAP: resizing a QP's queues is not supported")
	}
	if extra := mask &^ (req | opt | AttrState); extra != 0 {
		return fail(ErrInvalidAttr, "%s does not allow %s", t, extra.lowest())
	}
	if mask&AttrAltPath != 0 {
		// Linux refuses alternate paths on RoCE ports (_ib_modify_qp).
		return fail(ErrNotSupported, "IBV_QP_ALT_PATH: alternate paths are not supported on RoCE")
	}
	if cur == SQD && mask&AttrState != 0 && next != Err && next != Reset && q.sqDraining() {
		// rxe_qp_chk_attr: while the drain runs, only ERR may be asked
		// for (softroce also allows RESET, which IBTA allows from any
		// state).
		return fail(ErrQPState, "the send queue is still draining")
	}
	if mask&AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fail(ErrInvalidAttr, "IBV_QP_PKEY_INDEX %d: the P_Key table has one entry", attr.PKeyIndex)
	}
	if mask&AttrPort != 0 && attr.Port != 1 {
		return fail(ErrInvalidAttr, "IBV_QP_PORT %d: the device has port 1 only", attr.Port)
	}
	if mask&AttrAV != 0 && !attr.AV.DGID.IsValid() {
		return fail(ErrInvalidAttr, "IBV_QP_AV has no destination GID")
	}
	if mask&AttrPathMTU != 0 {
		if !attr.PathMTU.Valid() {
			return fail(ErrInvalidAttr, "IBV_QP_PATH_MTU %d is not an IB MTU", attr.PathMTU)
		}
		if attr.PathMTU > q.cfg.MaxMTU {
			return fail(ErrInvalidAttr, "IBV_QP_PATH_MTU %d exceeds the port's max MTU %d", attr.PathMTU, q.cfg.MaxMTU)
		}
	}
	checks := []struct {
		bit  AttrMask
		v    uint32
		max  uint32
		name string
	}{
		{AttrTimeout, uint32(attr.Timeout), 31, "IBV_QP_TIMEOUT"},
		{AttrRetryCnt, uint32(attr.RetryCnt), 7, "IBV_QP_RETRY_CNT"},
		{AttrRNRRetry, uint32(attr.RNRRetry), 7, "IBV_QP_RNR_RETRY"},
		{AttrMinRNRTimer, uint32(attr.MinRNRTimer), 31, "IBV_QP_MIN_RNR_TIMER"},
		{AttrRQPSN, attr.RQPSN, maxPSN, "IBV_QP_RQ_PSN"},
		{AttrSQPSN, attr.SQPSN, maxPSN, "IBV_QP_SQ_PSN"},
		{AttrDestQPN, attr.DestQPN, maxPSN, "IBV_QP_DEST_QPN"},
		{AttrMaxQPRdAtomic, uint32(attr.MaxRdAtomic), maxQPRdAtom, "IBV_QP_MAX_QP_RD_ATOMIC"},
		{AttrMaxDestRdAtomic, uint32(attr.MaxDestRdAtomic), maxQPRdAtom, "IBV_QP_MAX_DEST_RD_ATOMIC"},
	}
	for _, c := range checks {
		if mask&c.bit != 0 && c.v > c.max {
			return fail(ErrInvalidAttr, "%s %d exceeds %d", c.name, c.v, c.max)
		}
	}
	return nil
}

// sqDraining reports whether an SQD drain is still running: WQEs the
// requester had started when the QP entered SQD have not all completed.
func (q *QP) sqDraining() bool { return q.attr.State == SQD && q.sq.cons < q.req.drainLimit }

// applyAttr stores the attributes the mask names (the state aside). Like
// rxe, max_rd_atomic and max_dest_rd_atomic are kept rounded up to a power of
// two, and Query reports the rounded values.
func (q *QP) applyAttr(attr *Attr, mask AttrMask) {
	a := &q.attr
	if mask&AttrCurState != 0 {
		a.CurState = attr.CurState
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if mask&AttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&AttrPort != 0 {
		a.Port = attr.Port
	}
	if mask&AttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&AttrAV != 0 {
		a.AV = attr.AV
	}
	if mask&AttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&AttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&AttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = uint8(roundPow2(int(attr.MaxRdAtomic)))
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = uint8(roundPow2(int(attr.MaxDestRdAtomic)))
	}
	if mask&AttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
}

// recvOnModify applies a Modify to the receive side; q.attr already holds
// the new attributes and prev is the state before.
func (q *QP) recvOnModify(prev State, mask AttrMask) {
	r := &q.resp
	st := q.attr.State
	if mask&AttrMaxDestRdAtomic != 0 {
		// rxe frees and reallocates the resources (rxe_qp_from_attr).
		r.allocResources(q.attr.MaxDestRdAtomic)
	}
	if mask&AttrRQPSN != 0 {
		p := q.attr.RQPSN & psnMask
		r.psn, r.ackPSN = p, p
		r.sentPSNNak = false
	}
	if st == prev {
		return
	}
	switch st {
	case Reset:
		q.resetRecv()
	case Err:
		// A modify to ERR stops the responder: READ responses still
		// queued are not sent (rxe drops its pending request packets),
		// unlike an error the responder raises itself, whose NAK still
		// goes out. The acknowledgements queued ahead of them do go out:
		// each answers a request already executed, a message the program
		// may already have seen complete, and an RNIC (or rxe, which
		// sends the ACK as it completes) has sent it by then. librdmacm's
		// rdma_disconnect moves the QP to ERR, so a program that
		// disconnects on its last completion would otherwise leave the
		// peer's last send unacknowledged, to fail flushed or retried
		// out. TransmitAck does the same for a QP being destroyed.
		r.keepAcks()
	}
}

// maskNames are the ibv names of the attribute mask bits, by bit number.
var maskNames = [...]string{
	"IBV_QP_STATE", "IBV_QP_CUR_STATE", "IBV_QP_EN_SQD_ASYNC_NOTIFY", "IBV_QP_ACCESS_FLAGS",
	"IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_QKEY", "IBV_QP_AV", "IBV_QP_PATH_MTU",
	"IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT", "IBV_QP_RNR_RETRY", "IBV_QP_RQ_PSN",
	"IBV_QP_MAX_QP_RD_ATOMIC", "IBV_QP_ALT_PATH", "IBV_QP_MIN_RNR_TIMER", "IBV_QP_SQ_PSN",
	"IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_PATH_MIG_STATE", "IBV_QP_CAP", "IBV_QP_DEST_QPN",
}

// lowest returns the mask holding only m's lowest set bit.
func (m AttrMask) lowest() AttrMask { return m & -m }

// String names the bits of m, e.g. "IBV_QP_STATE|IBV_QP_PORT".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for m != 0 {
		b := bits.TrailingZeros32(uint32(m))
		if b < len(maskNames) {
			parts = append(parts, maskNames[b])
		} else {
			parts = append(parts, fmt.Sprintf("0x%x", uint32(1)<<b))
		}
		m &= m - 1
	}
	return strings.Join(parts, "|")
}
