package qp

import "fmt"

// SRQ is a shared receive queue: receive WQEs that any QP created with it
// consumes, first posted first used. Like every engine object it is not safe
// for concurrent use; the device serializes calls on the SRQ and its QPs.
type SRQ struct {
	ring   wqeRing
	limit  int // armed limit, 0 when disarmed
	events func(Event)
	// refill and watch: as a QP's (SetRecvRefill, SetQueueWatch), for
	// WQEs posted to a ring the engine cannot see; post is Post, bound
	// once.
	refill func(post func(*RecvWR) error)
	post   func(*RecvWR) error
	watch  func(n int)
}

// SetRecvRefill sets the function take calls first, which moves WRs posted
// elsewhere (a ring shared with a program) into the SRQ with post: every
// take, so that the limit event counts them too.
func (s *SRQ) SetRecvRefill(f func(post func(*RecvWR) error)) { s.refill, s.post = f, s.Post }

// SetQueueWatch sets the function told how many WQEs the SRQ holds
// whenever one leaves it, before its completion is pushed.
func (s *SRQ) SetQueueWatch(f func(n int)) { s.watch = f }

// RefillRecv calls the refill function now, if there is one.
func (s *SRQ) RefillRecv() {
	if s.refill != nil {
		s.refill(s.post)
	}
}

// NewSRQ returns an SRQ holding up to maxWR WQEs of up to maxSGE SGEs each.
// events, when set, receives EventSRQLimitReached.
func NewSRQ(maxWR, maxSGE int, events func(Event)) *SRQ {
	s := &SRQ{events: events}
	s.ring.init(maxWR, maxSGE, &storage{})
	return s
}

// Post queues a receive work request; its SGL is copied.
func (s *SRQ) Post(wr *RecvWR) error {
	if err := s.ring.check(wr); err != nil {
		return fmt.Errorf("post srq recv: %w", err)
	}
	s.ring.push(wr)
	return nil
}

// SetLimit arms the limit event, as ibv_modify_srq with IBV_SRQ_LIMIT: when
// the responder takes a WQE and fewer than limit remain, the SRQ raises
// EventSRQLimitReached once and disarms. A limit of 0 disarms it.
func (s *SRQ) SetLimit(limit int) error {
	if limit < 0 || limit > len(s.ring.wqes) {
		return fmt.Errorf("srq limit %d outside 0..%d: %w", limit, len(s.ring.wqes), ErrInvalidAttr)
	}
	s.limit = limit
	return nil
}

// Limit returns the armed limit (0 when disarmed).
func (s *SRQ) Limit() int { return s.limit }

// Len returns how many WQEs are posted.
func (s *SRQ) Len() int { return s.ring.n }

// Max returns how many WQEs the SRQ holds.
func (s *SRQ) Max() int { return len(s.ring.wqes) }

// MaxSGE returns how many SGEs a WQE may have.
func (s *SRQ) MaxSGE() int { return s.ring.maxSGE }

// take moves the oldest WQE into dst and reports whether there was one. The
// limit event fires here, as in rxe's get_srq_wqe.
func (s *SRQ) take(dst *recvWQE) bool {
	s.RefillRecv()
	w := s.ring.peek()
	if w == nil {
		return false
	}
	dst.copyFrom(w)
	s.ring.pop()
	if s.watch != nil {
		s.watch(s.ring.n)
	}
	if s.limit > 0 && s.ring.n < s.limit {
		s.limit = 0
		if s.events != nil {
			s.events(Event{Type: EventSRQLimitReached})
		}
	}
	return true
}
