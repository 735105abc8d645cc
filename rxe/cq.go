package rxe

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// CQ is a completion queue. Completions are read with Poll; a caller that
// wants to block arms the CQ (Arm) and waits on C, which receives a value
// when the next (solicited) completion arrives, like a completion channel.
type CQ struct {
	d      *Device
	cq     *qp.CQ
	handle uint32
	users  int // QPs using the CQ
	c      chan struct{}
	dead   bool
	ctx    any
}

// CreateCQ creates a completion queue holding depth completions
// (1 .. MaxCQE), as ibv_create_cq.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	return d.CreateRingCQ(depth, nil)
}

// CreateRingCQ creates a completion queue of depth completions that go to
// ring (see qp.CQRing), or with a nil ring one that keeps them for Poll.
// The device writes into the ring under its lock, as a NIC writes CQEs.
func (d *Device) CreateRingCQ(depth int, ring qp.CQRing) (*CQ, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if depth < 1 || depth > MaxCQE {
		return nil, fmt.Errorf("create cq on %s: depth %d outside 1..%d: %w", d.name, depth, MaxCQE, ErrInvalid)
	}
	if d.cqs >= MaxCQ {
		return nil, fmt.Errorf("create cq on %s: %w", d.name, ErrLimit)
	}
	q := qp.NewCQ(depth)
	if ring != nil {
		q = qp.NewRingCQ(depth, ring)
	}
	c := &CQ{d: d, cq: q, handle: d.nextHandle(), c: make(chan struct{}, 1)}
	c.cq.Notify = c.notify
	c.cq.Events = func(e qp.Event) { d.raise(AsyncEvent{Type: e.Type, CQ: c}) }
	d.cqs++
	return c, nil
}

// notify runs under mu when an armed CQ gets a completion. The channel holds
// one pending notification; more coalesce, as completion-channel events do
// until acknowledged.
func (c *CQ) notify() {
	select {
	case c.c <- struct{}{}:
	default:
	}
}

// Handle returns the CQ's handle, unique among the device's objects.
func (c *CQ) Handle() uint32 { return c.handle }

// SetContext attaches a caller value to the CQ (the cq_context of
// ibv_create_cq); Context returns it.
func (c *CQ) SetContext(v any) { c.d.mu.Lock(); c.ctx = v; c.d.mu.Unlock() }

// Context returns the value SetContext attached.
func (c *CQ) Context() any { c.d.mu.Lock(); defer c.d.mu.Unlock(); return c.ctx }

// Depth returns how many completions the CQ holds.
func (c *CQ) Depth() int {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.cq.Depth()
}

// Len returns how many completions wait to be polled.
func (c *CQ) Len() int {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.cq.Len()
}

// Overflowed reports whether the CQ overflowed (it then takes no more
// completions, and EventCQErr was raised).
func (c *CQ) Overflowed() bool {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.cq.Overflowed()
}

// Poll moves up to len(out) completions into out, oldest first, and returns
// how many (ibv_poll_cq).
func (c *CQ) Poll(out []qp.WC) int {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.cq.Poll(out)
}

// Arm requests one notification on C for the next completion, or with
// solicitedOnly for the next solicited or failed one (ibv_req_notify_cq).
func (c *CQ) Arm(solicitedOnly bool) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.dead {
		return fmt.Errorf("arm cq %d: %w", c.handle, ErrDestroyed)
	}
	c.cq.Arm(solicitedOnly)
	return nil
}

// C returns the notification channel: it receives a value when an armed CQ
// gets a completion. The channel is never closed.
func (c *CQ) C() <-chan struct{} { return c.c }

// Resize changes the depth (ibv_resize_cq); it fails when more completions
// wait than the new depth holds.
func (c *CQ) Resize(depth int) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if depth < 1 || depth > MaxCQE {
		return fmt.Errorf("resize cq %d to %d: outside 1..%d: %w", c.handle, depth, MaxCQE, ErrInvalid)
	}
	if !c.cq.Resize(depth) {
		return fmt.Errorf("resize cq %d to %d: %d completions wait: %w", c.handle, depth, c.cq.Len(), ErrInvalid)
	}
	return nil
}

// SetRing moves a ring CQ to a new ring of depth completions (its resize):
// after it returns the device writes only to the new ring.
func (c *CQ) SetRing(depth int, ring qp.CQRing) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.dead {
		return fmt.Errorf("resize cq %d: %w", c.handle, ErrDestroyed)
	}
	if depth < 1 || depth > MaxCQE {
		return fmt.Errorf("resize cq %d to %d: outside 1..%d: %w", c.handle, depth, MaxCQE, ErrInvalid)
	}
	if !c.cq.SetRing(depth, ring) {
		return fmt.Errorf("resize cq %d: not a ring CQ: %w", c.handle, ErrInvalid)
	}
	return nil
}

// DestroyCQ destroys a completion queue; it fails with ErrBusy while a QP
// uses it.
func (d *Device) DestroyCQ(c *CQ) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkCQ(c); err != nil {
		return fmt.Errorf("destroy cq: %w", err)
	}
	if c.users > 0 {
		return fmt.Errorf("destroy cq %d: %d QPs use it: %w", c.handle, c.users, ErrBusy)
	}
	c.dead = true
	d.cqs--
	return nil
}

func (d *Device) checkCQ(c *CQ) error {
	switch {
	case c == nil:
		return fmt.Errorf("nil cq: %w", ErrInvalid)
	case c.d != d:
		return fmt.Errorf("cq %d: %w", c.handle, ErrWrongDevice)
	case c.dead:
		return fmt.Errorf("cq %d: %w", c.handle, ErrDestroyed)
	}
	return nil
}
