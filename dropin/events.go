package dropin

// events.go: asynchronous events and completion channels. Each connection
// reads the events of its own verbs context in one goroutine and queues
// each under the handle of its QP, CQ or SRQ. A completion channel is a queue of CQ handles per connection. Both
// signal the program through an eventfd in semaphore mode, one count per
// queued event, which the library reads before asking for the event.

import (
	"context"
	"encoding/binary"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// maxQueuedEvents bounds an event queue a program does not read: further
// events are dropped, as the device drops events nobody reads.
const maxQueuedEvents = 4096

// eventQueue is a queue of events with the eventfd that counts them.
type eventQueue[T any] struct {
	fd int // the eventfd, -1 until asked for
	q  []T
}

func newEventQueue[T any]() eventQueue[T] { return eventQueue[T]{fd: -1} }

// open returns the eventfd, creating it (counting what is already queued)
// on first use.
func (e *eventQueue[T]) open() (int, error) {
	if e.fd >= 0 {
		return e.fd, nil
	}
	fd, err := unix.Eventfd(uint(len(e.q)), unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return -1, err
	}
	e.fd = fd
	return fd, nil
}

// push queues v and counts it on the eventfd.
func (e *eventQueue[T]) push(v T) {
	if len(e.q) >= maxQueuedEvents {
		return
	}
	e.q = append(e.q, v)
	if e.fd >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		unix.Write(e.fd, one[:])
	}
}

// pop takes the oldest event.
func (e *eventQueue[T]) pop() (T, bool) {
	var v T
	if len(e.q) == 0 {
		return v, false
	}
	v = e.q[0]
	n := copy(e.q, e.q[1:])
	e.q = e.q[:n]
	return v, true
}

// remove drops the queued events drop selects, as the kernel drops the
// events of an object being destroyed. Their counts stay on the eventfd: a
// program that wakes for one finds the queue empty (EAGAIN) and waits again.
func (e *eventQueue[T]) remove(drop func(T) bool) {
	out := e.q[:0]
	for _, v := range e.q {
		if !drop(v) {
			out = append(out, v)
		}
	}
	e.q = out
}

func (e *eventQueue[T]) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
		e.fd = -1
	}
	e.q = nil
}

// owners maps a connection's QPs, CQs and SRQs to their handles, for
// routing the events about them.
type owners struct {
	mu sync.Mutex
	m  map[any]owner
}

type owner struct {
	c      *conn
	handle uint32
}

func (o *owners) init() { o.m = map[any]owner{} }

func (o *owners) add(obj any, c *conn, handle uint32) {
	o.mu.Lock()
	o.m[obj] = owner{c, handle}
	o.mu.Unlock()
}

func (o *owners) drop(obj any) {
	o.mu.Lock()
	delete(o.m, obj)
	o.mu.Unlock()
}

func (o *owners) get(obj any) (owner, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.m[obj]
	return w, ok
}

// routeAsyncEvents reads the asynchronous events of the connection's own
// context (verbsapi delivers each event to the context that owns its
// object) and queues each under its handle, until the context is closed.
// Events about objects already destroyed are dropped.
func (c *conn) routeAsyncEvents() {
	for {
		e, err := c.ctx.GetAsyncEvent(context.Background())
		if err != nil {
			return
		}
		var obj any
		var kind uint32
		switch {
		case e.QP != nil:
			obj, kind = e.QP, elemQP
			// A QP's async error took it to the error state, perhaps
			// with no completion to say so (wqring.go's kickPoller).
			c.kickPoller()
		case e.CQ != nil:
			obj, kind = e.CQ, elemCQ
		case e.SRQ != nil:
			obj, kind = e.SRQ, elemSRQ
		default:
			continue
		}
		if w, ok := c.owners.get(obj); ok {
			c.queueAsync(obj, wireAsyncEvent{EventType: uint32(e.Type), Kind: kind, Element: w.handle})
		}
	}
}

// queueAsync queues ev if its object is still the connection's (it may
// have been destroyed since the owner lookup).
func (c *conn) queueAsync(obj any, ev wireAsyncEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.owns(ev.Kind, ev.Element, obj) {
		return
	}
	c.async.push(ev)
}

// owns reports whether handle of kind names obj. Called with c.mu held.
func (c *conn) owns(kind, handle uint32, obj any) bool {
	switch kind {
	case elemQP:
		q := c.qps[handle]
		return q != nil && q.qp == obj
	case elemCQ:
		cq := c.cqs[handle]
		return cq != nil && cq.cq == obj
	case elemSRQ:
		s := c.srqs[handle]
		return s != nil && s.srq == obj
	}
	return false
}

// forgetAsync drops the queued events about handle of kind.
func (c *conn) forgetAsync(kind, handle uint32) {
	c.async.remove(func(e wireAsyncEvent) bool { return e.Kind == kind && e.Element == handle })
}

// asyncFD answers SR_OP_ASYNC_FD: the connection's async eventfd.
func (c *conn) asyncFD(b []byte) syscall.Errno {
	if len(b) != 0 {
		return syscall.EINVAL
	}
	fd, err := c.async.open()
	if err != nil {
		return c.errnoOf(err)
	}
	c.outFD = fd
	return 0
}

// getAsyncEvent answers SR_OP_GET_ASYNC_EVENT, counting the event as
// delivered on its object for the destroy answers.
func (c *conn) getAsyncEvent(b []byte) syscall.Errno {
	if len(b) != 0 {
		return syscall.EINVAL
	}
	ev, ok := c.async.pop()
	if !ok {
		return syscall.EAGAIN
	}
	switch ev.Kind {
	case elemQP:
		if q := c.qps[ev.Element]; q != nil {
			q.events++
		}
	case elemCQ:
		if cq := c.cqs[ev.Element]; cq != nil {
			cq.asyncEvents++
		}
	case elemSRQ:
		if s := c.srqs[ev.Element]; s != nil {
			s.events++
		}
	}
	c.w.put(ev)
	return 0
}

// connChan is a completion channel: the CQ handles whose notifications
// arrived, oldest first, and the goroutine that gathers them.
type connChan struct {
	ch     *verbsapi.CompChannel
	events eventQueue[uint32]
	stop   context.CancelFunc
}

// close stops the gathering goroutine and closes the eventfd; the channel
// itself is destroyed already.
func (cc *connChan) close() {
	cc.stop()
	cc.ch.Destroy()
	cc.events.close()
}

func (c *conn) createCompChannel(b []byte) syscall.Errno {
	if len(b) != 0 {
		return syscall.EINVAL
	}
	ch, err := c.ctx.CreateCompChannel()
	if err != nil {
		return c.errnoOf(err)
	}
	cc := &connChan{ch: ch, events: newEventQueue[uint32]()}
	fd, err := cc.events.open()
	if err != nil {
		ch.Destroy()
		return c.errnoOf(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	cc.stop = stop
	h := c.handle()
	c.chans[h] = cc
	c.d.wg.Add(1)
	go c.gatherCompEvents(ctx, h, cc)
	c.w.put(wireHandle{h})
	c.outFD = fd
	return 0
}

// gatherCompEvents moves the channel's notifications to its queue until
// the channel is destroyed.
func (c *conn) gatherCompEvents(ctx context.Context, h uint32, cc *connChan) {
	defer c.d.wg.Done()
	for {
		cq, err := cc.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		w, ok := c.owners.get(cq)
		if !ok || w.c != c {
			continue
		}
		c.mu.Lock()
		if c.chans[h] == cc && c.owns(elemCQ, w.handle, cq) {
			cc.events.push(w.handle)
		}
		c.mu.Unlock()
	}
}

func (c *conn) destroyCompChannel(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok {
		return syscall.EINVAL
	}
	cc := c.chans[h]
	if cc == nil {
		return syscall.EINVAL
	}
	if err := cc.ch.Destroy(); err != nil {
		return c.errnoOf(err)
	}
	cc.stop()
	cc.events.close()
	delete(c.chans, h)
	return 0
}

// getCQEvent answers SR_OP_GET_CQ_EVENT: the CQ of the channel's oldest
// notification.
func (c *conn) getCQEvent(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok {
		return syscall.EINVAL
	}
	cc := c.chans[h]
	if cc == nil {
		return syscall.EINVAL
	}
	cqh, ok := cc.events.pop()
	if !ok {
		return syscall.EAGAIN
	}
	if cq := c.cqs[cqh]; cq != nil {
		cq.compEvents++
	}
	c.w.put(wireHandle{cqh})
	return 0
}
