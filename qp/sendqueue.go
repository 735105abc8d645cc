package qp

import (
	"fmt"
)

// wqeState is where a send WQE is in its life, as rxe's wqe->state.
type wqeState uint8

const (
	// wqePosted: queued, the requester has not started it (or a retry sent
	// it back here).
	wqePosted wqeState = iota
	// wqeProcessing: some but not all of its packets have been sent.
	wqeProcessing
	// wqePending: every packet sent; an RC WQE waits for its ACK or response.
	wqePending
	// wqeDone: finished without needing an ACK (UC, UD, local operations);
	// it retires when it reaches the head of the queue.
	wqeDone
	// wqeError: the requester failed it (status says why); it completes in
	// error, and the QP goes to ERR, when it reaches the head.
	wqeError
)

// maxMsgSize is the largest message a WR may describe (2^31, as mainline rxe
// reports in max_msg_sz and IBTA allows in a RETH).
const maxMsgSize = 1 << 31

// sendWQE is a send work request as the engine keeps it: a copy of the WR
// (with its SGL, inline data and address handle in storage the WQE owns, so
// the caller may reuse its own) plus the requester's and completer's
// progress through it.
type sendWQE struct {
	wr     SendWR
	sgl    []SGE  // backing store of wr.SGL, cap MaxSendSGE
	inline []byte // backing store of wr.Inline, cap MaxInline
	ah     AddressVector
	length uint32 // message length in bytes

	state  wqeState
	status WCStatus

	// firstPSN and lastPSN bound the PSNs of the current (last sent)
	// request for this WQE; a READ re-requested after a partial response
	// gets a new range.
	firstPSN, lastPSN uint32
	sent              uint32 // request payload bytes handed out
	iova              uint64 // remote address the next request packet targets
	rcvd              uint32 // READ: response bytes already scattered
	readBase          uint32 // READ: rcvd when the current request was sent
	hasRdAtomic       bool   // holds one of the max_rd_atomic credits
}

// isReadOrAtomic reports whether the WQE is answered by a response rather
// than an ACK, and so holds a max_rd_atomic credit.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case WRRead, WRCmpSwap, WRFetchAdd:
		return true
	}
	return false
}

func (w *sendWQE) isAtomic() bool {
	return w.wr.Opcode == WRCmpSwap || w.wr.Opcode == WRFetchAdd
}

// isLocal reports whether the WQE is a local operation, executed by the
// requester in queue order without sending anything.
func (w *sendWQE) isLocal() bool { return w.wr.Opcode == WRLocalInv || w.wr.Opcode == WRBindMW }

func (w *sendWQE) isInline() bool { return w.wr.Flags&SendInline != 0 }

// carriesPayload reports whether the WQE's requests carry its data (SEND and
// WRITE); READ and atomics carry none.
func (w *sendWQE) carriesPayload() bool {
	switch w.wr.Opcode {
	case WRSend, WRSendImm, WRSendInv, WRWrite, WRWriteImm:
		return true
	}
	return false
}

// sendQueue is a ring of preallocated WQEs. Indices are absolute counters
// (slot = index mod capacity): cons is the oldest WQE not yet retired, prod
// the next free one. The requester's position (requester.idx) lies between.
type sendQueue struct {
	ring       []sendWQE
	cons, prod uint64
	// sgl and inline are the blocks the WQEs' SGL and inline storage are
	// cut from (storage).
	sgl    []SGE
	inline []byte
}

func (s *sendQueue) at(i uint64) *sendWQE { return &s.ring[i%uint64(len(s.ring))] }
func (s *sendQueue) len() int             { return int(s.prod - s.cons) }

// initSend allocates the send queue, so that posting does not allocate. The
// WQEs' SGL and inline storage come from one block each, not one slice per
// WQE: a simulation creates thousands of QPs with deep queues. The
// requester's gather buffer is left to gatherBuf. They are old's, cleared,
// where old's are large enough (a QP built from a spare).
func (q *QP) initSend(old *storage) {
	n := q.cfg.MaxSendWR
	if n < 1 {
		n = 1
	}
	q.sq.ring = reuse(&old.ring, n)
	sge := q.cfg.MaxSendSGE
	var sgl []SGE
	if sge > 0 {
		sgl = reuse(&old.sgl, n*sge)
	}
	inl := q.cfg.MaxInline
	var inline []byte
	if inl > 0 {
		inline = reuse(&old.inline, n*inl)
	}
	q.sq.sgl, q.sq.inline = sgl, inline
	for i := range q.sq.ring {
		w := &q.sq.ring[i]
		if sge > 0 {
			w.sgl = sgl[i*sge : i*sge : (i+1)*sge]
		}
		if inl > 0 {
			w.inline = inline[i*inl : i*inl : (i+1)*inl]
		}
	}
	q.resetSend()
}

// gatherBuf returns n bytes of the requester's gather buffer, or nil when n
// exceeds one packet's payload at the largest MTU the QP may use. The
// buffer is allocated on first use, not with the QP: most QPs never send a
// packet spanning several SGEs, and a simulation creates thousands.
func (q *QP) gatherBuf(n uint32) []byte {
	size := max(int(q.cfg.MaxMTU), 4096)
	if int(n) > size {
		return nil
	}
	if q.req.scratch == nil {
		q.req.scratch = make([]byte, size)
	}
	return q.req.scratch[:n]
}

// resetSend returns the send side to its state after creation (RESET),
// dropping queued WQEs without completions, as rxe does on a modify to RESET.
func (q *QP) resetSend() {
	q.sq.cons = q.sq.prod
	defer q.noteRetired()
	q.req.reset(q.sq.prod)
	q.comp.reset()
	q.pace, q.np = pacer{}, notifier{}
	q.comp.retryCnt = q.attr.RetryCnt
	q.comp.rnrRetry = q.attr.RNRRetry
	q.req.rdMax = rdAtomicCredits(q.attr.MaxRdAtomic)
}

// rdAtomicCredits rounds max_rd_atomic up to a power of two, as rxe does.
func rdAtomicCredits(n uint8) int {
	if n == 0 {
		return 0
	}
	c := 1
	for c < int(n) {
		c <<= 1
	}
	return c
}

// PostSend queues a send work request. The WR, its SGL, inline data and
// address handle are copied, so the caller may reuse them at once. In ERR
// the WR is accepted and completes at once with WR_FLUSH_ERR, as in rxe.
func (q *QP) PostSend(wr *SendWR) error {
	if err := q.checkSendWR(wr); err != nil {
		return fmt.Errorf("post send %s on qp %d: %w", wr.Opcode, q.cfg.QPN, err)
	}
	w := q.sq.at(q.sq.prod)
	sgl, inline := w.sgl[:0], w.inline[:0]
	*w = sendWQE{wr: *wr}
	if wr.Flags&SendInline != 0 && wr.Opcode != WRLocalInv && wr.Opcode != WRBindMW {
		inline = append(inline, wr.Inline...)
		w.length = uint32(len(inline))
		sgl = sgl[:0]
	} else {
		sgl = append(sgl, wr.SGL...)
		for i := range sgl {
			w.length += sgl[i].Length
		}
	}
	w.sgl, w.inline = sgl, inline
	w.wr.SGL, w.wr.Inline = sgl, inline
	if wr.AH != nil {
		w.ah = *wr.AH
		w.wr.AH = &w.ah
	}
	switch {
	case w.isAtomic():
		w.iova = wr.RemoteAddr
	case w.wr.Opcode == WRRead || w.wr.Opcode == WRWrite || w.wr.Opcode == WRWriteImm:
		w.iova = wr.RemoteAddr
	}
	q.sq.prod++
	if q.attr.State == Err || q.attr.State == SQE {
		q.flushSend()
	}
	return nil
}

// checkSendWR validates a WR against the QP's state, type and capacities.
func (q *QP) checkSendWR(wr *SendWR) error {
	switch q.attr.State {
	case Reset, Init, RTR:
		return fmt.Errorf("qp in %s: %w", q.attr.State, ErrQPState)
	}
	if !opcodeAllowed(q.cfg.Type, wr.Opcode) {
		return fmt.Errorf("opcode not supported on a %s qp: %w", q.cfg.Type, ErrInvalidWR)
	}
	if q.sq.len() >= len(q.sq.ring) {
		return fmt.Errorf("%d requests outstanding: %w", q.sq.len(), ErrQueueFull)
	}
	var length uint64
	if wr.Flags&SendInline != 0 && wr.Opcode != WRLocalInv && wr.Opcode != WRBindMW {
		switch wr.Opcode {
		case WRRead, WRCmpSwap, WRFetchAdd:
			return fmt.Errorf("inline data on a request without payload: %w", ErrInvalidWR)
		}
		if len(wr.Inline) > q.cfg.MaxInline {
			return fmt.Errorf("%d inline bytes, max_inline_data is %d: %w",
				len(wr.Inline), q.cfg.MaxInline, ErrInvalidWR)
		}
		length = uint64(len(wr.Inline))
	} else {
		if len(wr.SGL) > q.cfg.MaxSendSGE {
			return fmt.Errorf("%d SGEs, max_send_sge is %d: %w", len(wr.SGL), q.cfg.MaxSendSGE, ErrInvalidWR)
		}
		for i := range wr.SGL {
			length += uint64(wr.SGL[i].Length)
		}
	}
	if length > maxMsgSize {
		return fmt.Errorf("message of %d bytes exceeds max_msg_sz %d: %w", length, maxMsgSize, ErrInvalidWR)
	}
	switch wr.Opcode {
	case WRCmpSwap, WRFetchAdd:
		if length != 8 {
			// rxe's validate_send_wr: the local buffer receives the
			// original 8-byte value.
			return fmt.Errorf("atomic local buffer of %d bytes, must be 8: %w", length, ErrInvalidWR)
		}
		if wr.RemoteAddr&7 != 0 {
			return fmt.Errorf("atomic remote address %#x not 8-byte aligned: %w", wr.RemoteAddr, ErrInvalidWR)
		}
		fallthrough
	case WRRead:
		if q.attr.MaxRdAtomic == 0 {
			return fmt.Errorf("max_rd_atomic is 0, no READ or atomic can be sent: %w", ErrInvalidWR)
		}
	}
	if q.cfg.Type == UD && wr.AH == nil {
		return fmt.Errorf("UD send without an address handle: %w", ErrInvalidWR)
	}
	return nil
}

// opcodeAllowed is rxe's rxe_wr_opcode_info matrix, less what softroce does
// not implement (REG_MR) and SEND_WITH_INV on UC/UD, which rxe
// accepts at post time and then fails in the requester because those
// transports have no opcode carrying an IETH.
func opcodeAllowed(t Type, op WROpcode) bool {
	switch op {
	case WRSend, WRSendImm:
		return true
	case WRWrite, WRWriteImm, WRBindMW:
		return t == RC || t == UC
	case WRRead, WRCmpSwap, WRFetchAdd, WRLocalInv, WRSendInv:
		return t == RC
	}
	return false
}

// wcOpcode maps a WR opcode to the completion opcode, as rxe's
// wr_to_wc_opcode.
func wcOpcode(op WROpcode) WCOpcode {
	switch op {
	case WRWrite, WRWriteImm:
		return WCRDMAWrite
	case WRRead:
		return WCRDMARead
	case WRCmpSwap:
		return WCCompSwap
	case WRFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// completeWQE retires the WQE at the head of the send queue: it posts a
// completion when the WQE is signaled (or SigAll) or failed (IBTA 10.7.3.1:
// an error always completes) and releases its max_rd_atomic credit. The
// head advances before the completion is pushed, so that a CQ overflow,
// which moves the QP to ERR, flushes only the WQEs behind it.
func (q *QP) completeWQE(w *sendWQE) {
	if w.hasRdAtomic {
		w.hasRdAtomic = false
		q.req.rdOut--
	}
	q.sq.cons++
	if q.req.idx < q.sq.cons {
		q.req.idx = q.sq.cons
	}
	q.noteRetired()
	switch w.wr.Opcode {
	case WRSend, WRSendImm, WRSendInv:
		// rxe counts rdma_sends as SEND WQEs retire, whatever their status.
		q.counters.RdmaSends++
	}
	if !q.cfg.SigAll && w.wr.Flags&SendSignaled == 0 && w.status == WCSuccess {
		return
	}
	// As mainline rxe's make_send_cqe, a failed completion carries only the
	// ID and status (IBTA: the other fields are undefined).
	wc := WC{ID: w.wr.ID, Status: w.status}
	if w.status == WCSuccess {
		wc.Opcode = wcOpcode(w.wr.Opcode)
		wc.ByteLen = w.length
		if w.wr.Opcode == WRSendImm || w.wr.Opcode == WRWriteImm {
			wc.Flags = WCWithImm
		}
	}
	q.complete(q.cfg.SendCQ, &wc, false)
}

// retireDone retires WQEs at the head that need nothing more: finished
// UC/UD sends and local operations complete; a WQE the requester failed
// completes in error and moves the QP to ERR. It then checks whether an SQD
// drain has finished.
func (q *QP) retireDone() {
	for q.sq.cons != q.sq.prod && q.attr.State != Err {
		w := q.sq.at(q.sq.cons)
		switch w.state {
		case wqeDone:
			q.completeWQE(w)
		case wqeError:
			q.completeWQE(w)
			q.toError()
			return
		default:
			q.checkDrained()
			return
		}
	}
	q.checkDrained()
}

// failWQE completes the WQE at the head with status and moves the QP to
// ERR, flushing everything behind it.
func (q *QP) failWQE(w *sendWQE, status WCStatus) {
	w.status = status
	q.completeWQE(w)
	q.toError()
}

// flushSend completes every WQE still on the send queue with WR_FLUSH_ERR,
// oldest first and whether signaled or not, as rxe does on entering ERR, and
// stops the requester and the completer's timers.
func (q *QP) flushSend() {
	for q.sq.cons != q.sq.prod {
		w := q.sq.at(q.sq.cons)
		w.status = WCWRFlushErr
		q.completeWQE(w)
	}
	q.req.reset(q.sq.prod)
	q.req.psn, q.req.maxPSN = q.comp.psn, q.comp.psn
	psn := q.comp.psn
	q.comp.reset()
	q.comp.psn = psn
}

// checkDrained raises EventSQDrained once, when the QP is in SQD, asked for
// the event, and every WQE started before the drain began has completed.
func (q *QP) checkDrained() {
	if q.attr.State != SQD || !q.req.drainNotify {
		return
	}
	if q.sq.cons < q.req.drainLimit {
		return
	}
	q.req.drainNotify = false
	q.event(EventSQDrained)
}
