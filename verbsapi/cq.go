package verbsapi

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
)

// CQ is a completion queue (struct ibv_cq).
type CQ struct {
	ctx  *Context
	cq   *rxe.CQ
	ch   *CompChannel
	stop chan struct{} // ends the forwarder to ch
	dead atomic.Bool
}

// CreateCQ creates a completion queue holding cqe completions
// (ibv_create_cq). With a channel, notifications requested with ReqNotify
// arrive on the channel (GetEvent); without, on the CQ itself (Wait).
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	return c.CreateRingCQ(cqe, ch, nil)
}

// CQRing is storage for completions outside the device, such as a ring in
// memory shared with another process (see qp.CQRing).
type CQRing = qp.CQRing

// CreateRingCQ creates a completion queue whose completions the device
// writes into ring rather than keeping them for Poll: the drop-in's CQs,
// whose rings programs read without a call. A nil ring is CreateCQ.
func (c *Context) CreateRingCQ(cqe int, ch *CompChannel, ring CQRing) (*CQ, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check("create cq"); err != nil {
		return nil, err
	}
	if ch != nil {
		if ch.ctx != c {
			return nil, fmt.Errorf("create cq on %s: completion channel of another context: %w", c.dev.Name(), ErrInvalid)
		}
		if ch.dead {
			return nil, fmt.Errorf("create cq on %s: completion channel: %w", c.dev.Name(), ErrDestroyed)
		}
	}
	rcq, err := c.dev.CreateRingCQ(cqe, ring)
	if err != nil {
		return nil, err
	}
	cq := &CQ{ctx: c, cq: rcq, ch: ch}
	c.cqs[rcq] = cq
	if ch != nil {
		ch.users++
		cq.stop = make(chan struct{})
		go cq.forward()
	}
	return cq, nil
}

// forward passes the CQ's notifications to its channel until Destroy: a
// completion channel gathers the events of several CQs.
func (cq *CQ) forward() {
	for {
		select {
		case <-cq.stop:
			return
		case <-cq.cq.C():
			select {
			case cq.ch.c <- cq:
			case <-cq.stop:
				return
			}
		}
	}
}

// Handle returns the CQ's handle.
func (cq *CQ) Handle() uint32 { return cq.cq.Handle() }

// Depth returns how many completions the CQ holds (ibv_cq.cqe).
func (cq *CQ) Depth() int { return cq.cq.Depth() }

// Channel returns the completion channel the CQ reports to, or nil.
func (cq *CQ) Channel() *CompChannel { return cq.ch }

// Poll moves up to len(wc) completions into wc, oldest first, and returns
// how many (ibv_poll_cq). Once an overflowed CQ is empty, Poll returns
// ErrCQOverflow: completions were lost.
func (cq *CQ) Poll(wc []WC) (int, error) {
	if cq.dead.Load() {
		return 0, fmt.Errorf("poll cq %d: %w", cq.Handle(), ErrDestroyed)
	}
	n := cq.cq.Poll(wc)
	if n == 0 && len(wc) > 0 && cq.cq.Overflowed() {
		return 0, fmt.Errorf("poll cq %d: %w", cq.Handle(), ErrCQOverflow)
	}
	return n, nil
}

// ReqNotify asks for one notification (ibv_req_notify_cq): at the next
// completion, or with solicitedOnly at the next solicited or failed one.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.dead.Load() {
		return fmt.Errorf("req notify cq %d: %w", cq.Handle(), ErrDestroyed)
	}
	return cq.cq.Arm(solicitedOnly)
}

// Wait blocks until the notification ReqNotify asked for arrives, or ctx is
// done. It is for CQs without a completion channel.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq.ch != nil {
		return fmt.Errorf("wait on cq %d: %w", cq.Handle(), ErrHasChannel)
	}
	select {
	case <-cq.cq.C():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait on cq %d: %w", cq.Handle(), ctx.Err())
	}
}

// PollWait returns at least one completion, blocking until one arrives or
// ctx is done: poll, and when the CQ is empty, request a notification, poll
// again (a completion may have arrived before the request) and wait. It is
// for CQs without a completion channel.
func (cq *CQ) PollWait(ctx context.Context, wc []WC) (int, error) {
	if cq.ch != nil {
		return 0, fmt.Errorf("poll-wait on cq %d: %w", cq.Handle(), ErrHasChannel)
	}
	for {
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := cq.ReqNotify(false); err != nil {
			return 0, err
		}
		if n, err := cq.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// Resize changes the CQ's depth (ibv_resize_cq).
func (cq *CQ) Resize(cqe int) error { return cq.cq.Resize(cqe) }

// ResizeRing moves a ring CQ to a new ring of cqe completions; once it
// returns, completions go only to the new ring.
func (cq *CQ) ResizeRing(cqe int, ring CQRing) error { return cq.cq.SetRing(cqe, ring) }

// Destroy destroys the CQ (ibv_destroy_cq); it fails with ErrBusy while a
// QP uses it.
func (cq *CQ) Destroy() error {
	if err := cq.ctx.dev.DestroyCQ(cq.cq); err != nil {
		return err
	}
	cq.dead.Store(true)
	c := cq.ctx
	c.mu.Lock()
	delete(c.cqs, cq.cq)
	if cq.ch != nil {
		cq.ch.users--
		close(cq.stop)
	}
	c.mu.Unlock()
	return nil
}

// CompChannel is a completion channel (struct ibv_comp_channel): one place
// to wait for the notifications of several CQs.
type CompChannel struct {
	ctx   *Context
	c     chan *CQ
	users int  // CQs reporting to it (under ctx.mu)
	dead  bool // under ctx.mu
}

// CreateCompChannel creates a completion channel
// (ibv_create_comp_channel).
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check("create comp channel"); err != nil {
		return nil, err
	}
	ch := &CompChannel{ctx: c, c: make(chan *CQ, 64)}
	c.channels[ch] = struct{}{}
	return ch, nil
}

// GetEvent waits for the next notification of one of the channel's CQs
// (ibv_get_cq_event) and returns that CQ, or fails when ctx is done. As in
// verbs, the CQ must be re-armed with ReqNotify for another one.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	select {
	case cq := <-ch.c:
		return cq, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("get cq event: %w", ctx.Err())
	}
}

// AckEvents acknowledges n events of cq (ibv_ack_cq_events). Go's garbage
// collector makes the acknowledgement unnecessary for safety; it is kept
// so that code ported from verbs reads the same.
func (ch *CompChannel) AckEvents(cq *CQ, n int) {}

// Destroy destroys the channel (ibv_destroy_comp_channel); it fails with
// ErrBusy while CQs report to it.
func (ch *CompChannel) Destroy() error {
	c := ch.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ch.dead:
		return fmt.Errorf("destroy comp channel: %w", ErrDestroyed)
	case ch.users > 0:
		return fmt.Errorf("destroy comp channel: %d CQs report to it: %w", ch.users, ErrBusy)
	}
	ch.dead = true
	delete(c.channels, ch)
	return nil
}

// PollSpin polls, yielding the processor between tries while the CQ is
// empty, 64 times, then blocks on a notification (PollWait): the latency of
// a busy poll for a completion that is about to arrive, without two
// processes on a small machine starving their devices' goroutines.
func (c *CQ) PollSpin(ctx context.Context, wc []WC) (int, error) {
	for range 64 {
		n, err := c.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		runtime.Gosched()
	}
	return c.PollWait(ctx, wc)
}
