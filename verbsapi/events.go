package verbsapi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/rxe"
)

// Asynchronous events belong to contexts, as in the kernel, where each
// ibv_context is a uverbs file with its own objects and its own event
// queue: an event about a QP, CQ or SRQ reaches only the context that
// created the object, and a device-wide event (port active or down, device
// fatal) reaches every context open on the device.
//
// The device raises events into one bounded channel (rxe.Device.Events).
// There is no router goroutine: whichever context reads that channel, in
// GetAsyncEvent or PollAsyncEvent, hands each event to the context that owns
// it (its own queue or another's) and keeps reading. So events wait in the
// device's channel until some context asks, as they wait in uverbs until
// the program reads, and closing contexts needs no shutdown.

// eventQueueLen bounds each context's queue of events delivered but not
// yet read; beyond it events are dropped and counted (EventsDropped).
const eventQueueLen = 64

// openContexts lists the open contexts of each device, for routing.
var openContexts struct {
	sync.Mutex
	m map[*rxe.Device][]*Context
}

func attachContext(c *Context) {
	openContexts.Lock()
	defer openContexts.Unlock()
	if openContexts.m == nil {
		openContexts.m = map[*rxe.Device][]*Context{}
	}
	openContexts.m[c.dev] = append(openContexts.m[c.dev], c)
}

func detachContext(c *Context) {
	openContexts.Lock()
	defer openContexts.Unlock()
	cs := openContexts.m[c.dev]
	for i, o := range cs {
		if o == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(openContexts.m, c.dev)
	} else {
		openContexts.m[c.dev] = cs
	}
}

func contextsOf(d *rxe.Device) []*Context {
	openContexts.Lock()
	defer openContexts.Unlock()
	return append([]*Context(nil), openContexts.m[d]...)
}

// eventQueue is a context's share of the device's events.
type eventQueue struct {
	ch      chan AsyncEvent
	done    chan struct{} // closed by Context.Close
	dropped atomic.Uint64
}

func newEventQueue() eventQueue {
	return eventQueue{ch: make(chan AsyncEvent, eventQueueLen), done: make(chan struct{})}
}

func (q *eventQueue) push(e AsyncEvent) {
	select {
	case q.ch <- e:
	default:
		q.dropped.Add(1)
	}
}

// route hands e to the context that owns its object, or to every open
// context for a device-wide event. An event whose object no open context
// owns (destroyed meanwhile) is dropped: nobody is left to be told.
func route(d *rxe.Device, e rxe.AsyncEvent) {
	cs := contextsOf(d)
	if e.QP == nil && e.CQ == nil && e.SRQ == nil {
		for _, c := range cs {
			c.events.push(AsyncEvent{Type: e.Type})
		}
		return
	}
	for _, c := range cs {
		if out, ok := c.own(e); ok {
			c.events.push(out)
			return
		}
	}
}

// own translates e into this context's objects, if they are its own.
func (c *Context) own(e rxe.AsyncEvent) (AsyncEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := AsyncEvent{Type: e.Type}
	switch {
	case e.QP != nil:
		out.QP = c.qps[e.QP]
		return out, out.QP != nil
	case e.CQ != nil:
		out.CQ = c.cqs[e.CQ]
		return out, out.CQ != nil
	default:
		out.SRQ = c.srqs[e.SRQ]
		return out, out.SRQ != nil
	}
}

// AsyncEvent is an asynchronous event (struct ibv_async_event): which of
// QP, CQ and SRQ is set depends on Type; none is for a device-wide event.
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
}

func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%s on qp %d", EventName(e.Type), e.QP.QPN())
	case e.CQ != nil:
		return fmt.Sprintf("%s on cq %d", EventName(e.Type), e.CQ.Handle())
	case e.SRQ != nil:
		return fmt.Sprintf("%s on srq %d", EventName(e.Type), e.SRQ.Handle())
	}
	return EventName(e.Type)
}

// GetAsyncEvent waits until ctx is done for the context's next
// asynchronous event (ibv_get_async_event): one about an object this
// context created, or a device-wide one. Events need no acknowledgement
// (ibv_ack_async_event has no counterpart): objects are garbage collected.
// On a closed context it fails with ErrClosed.
func (c *Context) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	for {
		select {
		case e := <-c.events.ch:
			return e, nil
		case <-c.events.done:
			return AsyncEvent{}, fmt.Errorf("get async event on %s: %w", c.dev.Name(), ErrClosed)
		default:
		}
		select {
		case e := <-c.events.ch:
			return e, nil
		case e := <-c.dev.Events():
			route(c.dev, e)
		case <-c.events.done:
			return AsyncEvent{}, fmt.Errorf("get async event on %s: %w", c.dev.Name(), ErrClosed)
		case <-ctx.Done():
			return AsyncEvent{}, fmt.Errorf("get async event on %s: %w", c.dev.Name(), ctx.Err())
		}
	}
}

// PollAsyncEvent returns the context's next asynchronous event if one is
// waiting.
func (c *Context) PollAsyncEvent() (AsyncEvent, bool) {
	for {
		select {
		case e := <-c.events.ch:
			return e, true
		default:
		}
		select {
		case e := <-c.dev.Events():
			route(c.dev, e)
		default:
			return AsyncEvent{}, false
		}
	}
}

// EventsDropped counts the events meant for this context that found its
// queue full (eventQueueLen unread events) and were dropped. The device
// counts, in Counters().EventsDropped, those its own channel had no room
// for.
func (c *Context) EventsDropped() uint64 { return c.events.dropped.Load() }
