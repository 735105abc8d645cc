package qp

import "fmt"

// recvWQE is a receive work request as the engine keeps it: the WR's ID and
// a copy of its SGL in storage the WQE owns, so the caller may reuse its own.
type recvWQE struct {
	id     uint64
	sgl    []SGE  // len = the WR's SGE count, cap = the queue's max SGE
	length uint64 // sum of the SGE lengths
}

// set copies wr into the WQE without allocating (the SGL fits the
// preallocated capacity: callers check the SGE count first).
func (w *recvWQE) set(wr *RecvWR) {
	w.id = wr.ID
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.length = 0
	for i := range w.sgl {
		w.length += uint64(w.sgl[i].Length)
	}
}

// copyFrom copies another WQE (an SRQ entry the responder takes) into w.
func (w *recvWQE) copyFrom(o *recvWQE) {
	w.id = o.id
	w.sgl = append(w.sgl[:0], o.sgl...)
	w.length = o.length
}

// wqeRing is a bounded FIFO of preallocated receive WQEs, shared by a QP's
// receive queue and an SRQ. All SGE storage is allocated up front, so posting
// and consuming never allocate.
type wqeRing struct {
	wqes   []recvWQE
	sges   []SGE // the block the WQEs' SGLs are cut from (storage)
	head   int   // oldest posted WQE
	n      int   // posted WQEs
	maxSGE int
}

// init makes the ring's WQEs and SGEs: old's, cleared, where old's are
// large enough (a QP built from a spare).
func (r *wqeRing) init(maxWR, maxSGE int, old *storage) {
	if maxWR < 1 {
		maxWR = 1
	}
	if maxSGE < 1 {
		maxSGE = 1
	}
	r.maxSGE = maxSGE
	r.wqes = reuse(&old.rwqes, maxWR)
	sges := reuse(&old.rsges, maxWR*maxSGE)
	r.sges = sges
	for i := range r.wqes {
		r.wqes[i].sgl = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
	r.head, r.n = 0, 0
}

// check validates a WR against the ring's limits.
func (r *wqeRing) check(wr *RecvWR) error {
	if len(wr.SGL) > r.maxSGE {
		return fmt.Errorf("%d SGEs, max is %d: %w", len(wr.SGL), r.maxSGE, ErrTooManySGE)
	}
	if r.n == len(r.wqes) {
		return fmt.Errorf("%d WQEs posted: %w", r.n, ErrQueueFull)
	}
	return nil
}

// push appends a checked WR.
func (r *wqeRing) push(wr *RecvWR) {
	r.wqes[(r.head+r.n)%len(r.wqes)].set(wr)
	r.n++
}

// peek returns the oldest WQE, or nil when none is posted.
func (r *wqeRing) peek() *recvWQE {
	if r.n == 0 {
		return nil
	}
	return &r.wqes[r.head]
}

// pop drops the oldest WQE.
func (r *wqeRing) pop() {
	if r.n == 0 {
		return
	}
	r.head = (r.head + 1) % len(r.wqes)
	r.n--
}

// clear drops every WQE without completing it.
func (r *wqeRing) clear() { r.head, r.n = 0, 0 }

// recvQueue is a QP's own receive queue (unused when the QP has an SRQ).
type recvQueue struct {
	ring wqeRing
	// refill, when set, moves WRs posted somewhere the engine cannot see
	// (a ring in memory shared with a program) into the queue with
	// PostRecv. It runs when the responder finds the queue empty, so
	// that a WR posted before a message arrived is there for it.
	refill func(post func(*RecvWR) error)
	post   func(*RecvWR) error // PostRecv, bound once (no allocation per refill)
}

// SetRecvRefill sets the function the responder calls when it finds the
// receive queue empty (see recvQueue.refill); nil removes it.
func (q *QP) SetRecvRefill(f func(post func(*RecvWR) error)) {
	q.rq.refill, q.rq.post = f, q.PostRecv
}

// RefillRecv calls the refill function now, if there is one: how WRs
// waiting outside get in when no message asks for them (a QP in ERR
// flushes them).
func (q *QP) RefillRecv() {
	if q.rq.refill != nil {
		q.rq.refill(q.rq.post)
	}
}

// initRecv allocates the receive queue (unless the QP uses an SRQ) and the
// responder's resources, so that receiving never allocates.
func (q *QP) initRecv(old *storage) {
	if q.cfg.SRQ == nil {
		q.rq.ring.init(q.cfg.MaxRecvWR, q.cfg.MaxRecvSGE, old)
	} else {
		// The responder copies the SRQ WQE it takes into a slot of its
		// own, as rxe's resp.srq_wqe: the SRQ slot may be reposted while
		// a multi-packet message is still arriving.
		q.resp.srqWQE.sgl = make([]SGE, 0, q.cfg.SRQ.ring.maxSGE)
	}
	q.resp.allocResources(q.attr.MaxDestRdAtomic)
	q.resetRecv()
}

// resetRecv returns the receive side to its state after creation (RESET):
// posted WQEs are dropped without completions, as on a modify to RESET.
func (q *QP) resetRecv() {
	if q.cfg.SRQ == nil {
		q.rq.ring.clear()
		q.noteRetired()
	}
	q.resp.reset(q.attr.RQPSN)
}

// PostRecv queues a receive work request; its SGL is copied. It is refused
// in RESET (IBTA 10.3.1: posting to a QP in RESET is an error) and on a QP
// that uses an SRQ. In ERR the WR is accepted and completes at once with
// WR_FLUSH_ERR.
func (q *QP) PostRecv(wr *RecvWR) error {
	if err := q.checkRecvWR(wr); err != nil {
		return fmt.Errorf("post recv on qp %d: %w", q.cfg.QPN, err)
	}
	if q.attr.State == Err {
		wc := WC{ID: wr.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.cfg.QPN}
		q.cfg.RecvCQ.push(&wc, true)
		return nil
	}
	q.rq.ring.push(wr)
	return nil
}

func (q *QP) checkRecvWR(wr *RecvWR) error {
	if q.cfg.SRQ != nil {
		return ErrHasSRQ
	}
	if q.attr.State == Reset {
		return fmt.Errorf("qp in %s: %w", q.attr.State, ErrQPState)
	}
	if len(wr.SGL) > q.rq.ring.maxSGE {
		return fmt.Errorf("%d SGEs, max_recv_sge is %d: %w", len(wr.SGL), q.rq.ring.maxSGE, ErrTooManySGE)
	}
	if q.attr.State != Err && q.rq.ring.n == len(q.rq.ring.wqes) {
		return fmt.Errorf("%d WQEs posted: %w", q.rq.ring.n, ErrQueueFull)
	}
	return nil
}

// flushRecv runs on entering ERR: the message the responder was receiving
// and every posted receive WQE complete with WR_FLUSH_ERR, oldest first.
// WQEs of an SRQ stay there, as other QPs share it; instead the QP raises
// EventQPLastWQEReached (IBTA 11.6.3.1: no more WQEs of the SRQ will be
// consumed by this QP).
func (q *QP) flushRecv() {
	r := &q.resp
	cq := q.cfg.RecvCQ
	ok := true
	if r.wqe != nil {
		wc := WC{ID: r.wqe.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.cfg.QPN}
		ok = cq.push(&wc, true)
		if !r.fromSRQ {
			q.rq.ring.pop()
		}
		r.wqe = nil
	}
	if q.cfg.SRQ != nil {
		q.event(EventQPLastWQEReached)
	} else {
		// Once the CQ overflows the remaining WQEs are lost: their
		// completions could only fail again.
		for w := q.rq.ring.peek(); w != nil && ok; w = q.rq.ring.peek() {
			wc := WC{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.cfg.QPN}
			ok = cq.push(&wc, true)
			q.rq.ring.pop()
		}
		q.rq.ring.clear()
		q.noteRetired()
	}
	r.abandon()
}
