package rxe

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// SRQ is a shared receive queue.
type SRQ struct {
	d      *Device
	pd     *PD
	srq    *qp.SRQ
	handle uint32
	users  int // QPs using the SRQ
	dead   bool
}

// SRQInit is what ibv_create_srq takes: capacity, SGEs per WQE and the
// initial limit (0: disarmed).
type SRQInit struct {
	MaxWR  int
	MaxSGE int
	Limit  int
}

// CreateSRQ creates a shared receive queue in pd.
func (d *Device) CreateSRQ(pd *PD, init SRQInit) (*SRQ, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return nil, fmt.Errorf("create srq: %w", err)
	}
	if init.MaxWR < 1 || init.MaxWR > MaxSRQWR || init.MaxSGE < 1 || init.MaxSGE > MaxSRQSGE {
		return nil, fmt.Errorf("create srq in pd %d: max_wr %d (1..%d) or max_sge %d (1..%d): %w",
			pd.handle, init.MaxWR, MaxSRQWR, init.MaxSGE, MaxSRQSGE, ErrInvalid)
	}
	if d.srqs >= MaxSRQ {
		return nil, fmt.Errorf("create srq in pd %d: %w", pd.handle, ErrLimit)
	}
	s := &SRQ{d: d, pd: pd, handle: d.nextHandle()}
	s.srq = qp.NewSRQ(init.MaxWR, init.MaxSGE, func(e qp.Event) { d.raise(AsyncEvent{Type: e.Type, SRQ: s}) })
	if err := s.srq.SetLimit(init.Limit); err != nil {
		return nil, fmt.Errorf("create srq in pd %d: %w", pd.handle, err)
	}
	d.srqs++
	pd.users++
	return s, nil
}

// Handle returns the SRQ's handle, unique among the device's objects.
func (s *SRQ) Handle() uint32 { return s.handle }

// PostRecv queues a receive work request (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *qp.RecvWR) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.dead {
		return fmt.Errorf("post srq recv on srq %d: %w", s.handle, ErrDestroyed)
	}
	return s.srq.Post(wr)
}

// SetRecvRefill sets the function the SRQ calls, under the device's lock,
// at every take: it posts WRs waiting elsewhere (see
// qp.SRQ.SetRecvRefill). It must not call the device.
func (s *SRQ) SetRecvRefill(f func(post func(*qp.RecvWR) error)) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.srq.SetRecvRefill(f)
}

// SetQueueWatch sets the function the SRQ calls, under the device's lock,
// with how many WQEs it holds whenever one leaves. It must not call the
// device.
func (s *SRQ) SetQueueWatch(f func(n int)) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.srq.SetQueueWatch(f)
}

// RefillRecv calls the refill function now (see SetRecvRefill).
func (s *SRQ) RefillRecv() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if !s.dead {
		s.srq.RefillRecv()
	}
}

// SetLimit arms the limit event (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) SetLimit(limit int) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if err := s.srq.SetLimit(limit); err != nil {
		return fmt.Errorf("modify srq %d: %w", s.handle, err)
	}
	return nil
}

// Query returns the SRQ's capacity, SGEs per WQE and armed limit
// (ibv_query_srq).
func (s *SRQ) Query() SRQInit {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return SRQInit{MaxWR: s.srq.Max(), MaxSGE: s.srq.MaxSGE(), Limit: s.srq.Limit()}
}

// Len returns how many receive WQEs are posted.
func (s *SRQ) Len() int {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.srq.Len()
}

// DestroySRQ destroys an SRQ; it fails with ErrBusy while a QP uses it.
func (d *Device) DestroySRQ(s *SRQ) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case s == nil:
		return fmt.Errorf("destroy srq: nil: %w", ErrInvalid)
	case s.d != d:
		return fmt.Errorf("destroy srq %d: %w", s.handle, ErrWrongDevice)
	case s.dead:
		return fmt.Errorf("destroy srq %d: %w", s.handle, ErrDestroyed)
	case s.users > 0:
		return fmt.Errorf("destroy srq %d: %d QPs use it: %w", s.handle, s.users, ErrBusy)
	}
	s.dead = true
	d.srqs--
	s.pd.users--
	return nil
}
