package verbsapi

import (
	"fmt"

	"github.com/softroce/softroce/rxe"
)

// QPInitAttr is struct ibv_qp_init_attr.
type QPInitAttr struct {
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, when set, is where the QP takes its receive WQEs from.
	SRQ    *SRQ
	Cap    QPCap
	QPType QPType
	// SigAll makes every send WR signaled (sq_sig_all).
	SigAll bool
	// Context is a caller value (qp_context), returned by QP.UserContext.
	Context any
}

// QP is a queue pair (struct ibv_qp).
type QP struct {
	pd   *PD
	qp   *rxe.QP
	init QPInitAttr
}

// CreateQP creates a queue pair in RESET (ibv_create_qp). Capacities are
// checked against the device limits.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("create %s qp in pd %d: send and receive CQs are required: %w", attr.QPType, pd.Handle(), ErrInvalid)
	}
	c := pd.ctx
	for _, cq := range []*CQ{attr.SendCQ, attr.RecvCQ} {
		if cq.ctx != c {
			return nil, fmt.Errorf("create %s qp in pd %d: cq %d belongs to another context: %w", attr.QPType, pd.Handle(), cq.Handle(), ErrInvalid)
		}
	}
	init := rxe.QPInit{Type: attr.QPType, SendCQ: attr.SendCQ.cq, RecvCQ: attr.RecvCQ.cq, Cap: attr.Cap, SigAll: attr.SigAll}
	if attr.SRQ != nil {
		init.SRQ = attr.SRQ.srq
	}
	x, err := c.dev.CreateQP(pd.pd, init)
	if err != nil {
		return nil, err
	}
	// The device grants what it sizes the queues for (at least what was
	// asked), as ibv_create_qp writes back into cap.
	attr.Cap = x.Init().Cap
	q := &QP{pd: pd, qp: x, init: attr}
	c.mu.Lock()
	c.qps[x] = q
	c.mu.Unlock()
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qp.QPN() }

// Handle returns the QP's handle.
func (q *QP) Handle() uint32 { return q.qp.Handle() }

// Type returns the QP's transport type.
func (q *QP) Type() QPType { return q.qp.Type() }

// State returns the QP's current state.
func (q *QP) State() QPState { return q.qp.State() }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// InitAttr returns the attributes the QP was created with.
func (q *QP) InitAttr() QPInitAttr { return q.init }

// UserContext returns QPInitAttr.Context.
func (q *QP) UserContext() any { return q.init.Context }

// Modify changes the QP's attributes and state (ibv_modify_qp). The mask
// must name every attribute the transition requires and nothing it does not
// allow (IBTA's table, as Linux's ib_modify_qp_is_ok); a refused Modify
// leaves the QP unchanged and its error names the transition and the
// attribute, e.g. "modify qp 17 INIT->RTR: RC requires IBV_QP_PATH_MTU".
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error { return q.qp.Modify(attr, mask) }

// Query returns the QP's attributes (ibv_query_qp); see InitAttr for the
// creation attributes.
func (q *QP) Query() QPAttr { return q.qp.Query() }

// PostSend queues a send work request (ibv_post_send). The WR is copied;
// its buffers are read when the request runs, so they must not change until
// it completes. Errors name the QP and the cause, e.g. posting in RESET,
// INIT or RTR: "post send SEND on qp 17: qp in INIT: qp state does not allow
// this" (errors.Is ErrQPState).
func (q *QP) PostSend(wr *SendWR) error { return q.qp.PostSend(wr) }

// PostSendList posts wrs in order, as ibv_post_send does a linked list, and
// stops at the first failure, returning its index (the bad_wr) and error.
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	for i := range wrs {
		if err := q.qp.PostSend(&wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// PostRecv queues a receive work request (ibv_post_recv); the WR is copied.
func (q *QP) PostRecv(wr *RecvWR) error { return q.qp.PostRecv(wr) }

// SetRecvRefill sets the function the QP calls when it finds its receive
// queue empty, which posts WRs waiting elsewhere with post: the drop-in's
// receive rings, which the device reads as a NIC reads its receive queue,
// when a message needs a WR. It runs under the device's lock and must not
// call the device.
func (q *QP) SetRecvRefill(f func(post func(*RecvWR) error)) { q.qp.SetRecvRefill(f) }

// SetQueueWatch sets the function the QP calls whenever WRs leave its
// queues, with how many each still holds, before their completions are
// pushed: how a poster keeping its own count of free slots (the drop-in's
// rings) learns that room was made. It runs under the device's lock and
// must not call the device.
func (q *QP) SetQueueWatch(f func(send, recv int)) { q.qp.SetQueueWatch(f) }

// RefillRecv calls the refill function now (see SetRecvRefill).
func (q *QP) RefillRecv() { q.qp.RefillRecv() }

// Outstanding returns how many send WRs the QP holds (posted and not yet
// retired by a completion or flush) and how many receive WRs wait in its
// own receive queue: how full its queues are, for a poster that keeps its
// own count (the drop-in's rings).
func (q *QP) Outstanding() (send, recv int) { return q.qp.Outstanding() }

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work is dropped
// without completions.
func (q *QP) Destroy() error {
	c := q.pd.ctx
	if err := c.dev.DestroyQP(q.qp); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.qps, q.qp)
	c.mu.Unlock()
	return nil
}

// SRQInitAttr is struct ibv_srq_init_attr: capacity, SGEs per WQE and the
// initial limit (0: no limit event armed).
type SRQInitAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	pd  *PD
	srq *rxe.SRQ
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	s, err := pd.ctx.dev.CreateSRQ(pd.pd, rxe.SRQInit(attr))
	if err != nil {
		return nil, err
	}
	srq := &SRQ{pd: pd, srq: s}
	pd.ctx.mu.Lock()
	pd.ctx.srqs[s] = srq
	pd.ctx.mu.Unlock()
	return srq, nil
}

// Handle returns the SRQ's handle.
func (s *SRQ) Handle() uint32 { return s.srq.Handle() }

// PostRecv queues a receive work request (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error { return s.srq.PostRecv(wr) }

// ModifyLimit arms the limit event (ibv_modify_srq with IBV_SRQ_LIMIT):
// EventSRQLimitReached is raised once when fewer than limit WQEs remain.
func (s *SRQ) ModifyLimit(limit int) error { return s.srq.SetLimit(limit) }

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() SRQInitAttr { return SRQInitAttr(s.srq.Query()) }

// Len returns how many receive WQEs are posted.
func (s *SRQ) Len() int { return s.srq.Len() }

// SetRecvRefill sets the function the SRQ calls each time a QP takes a WQE
// from it, which posts WRs waiting elsewhere with post (the drop-in's SRQ
// ring). It runs under the device's lock and must not call the device.
func (s *SRQ) SetRecvRefill(f func(post func(*RecvWR) error)) { s.srq.SetRecvRefill(f) }

// SetQueueWatch sets the function told how many WQEs the SRQ holds
// whenever one leaves, under the device's lock.
func (s *SRQ) SetQueueWatch(f func(n int)) { s.srq.SetQueueWatch(f) }

// RefillRecv calls the refill function now (see SetRecvRefill).
func (s *SRQ) RefillRecv() { s.srq.RefillRecv() }

// Destroy destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy while a
// QP uses it.
func (s *SRQ) Destroy() error {
	c := s.pd.ctx
	if err := c.dev.DestroySRQ(s.srq); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.srqs, s.srq)
	c.mu.Unlock()
	return nil
}
