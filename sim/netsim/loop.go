package netsim

import (
	"fmt"
	"math/bits"
)

// Time is virtual time in nanoseconds since the start of a simulation. It has
// the same meaning as qp.Time: the simulator passes it to devices unchanged.
type Time int64

// Units of virtual time.
const (
	Nanosecond  Time = 1
	Microsecond Time = 1000
	Millisecond Time = 1000 * Microsecond
	Second      Time = 1000 * Millisecond
)

// Never is a time no event reaches.
const Never Time = 1<<63 - 1

func (t Time) String() string {
	if t == Never {
		return "never"
	}
	return fmt.Sprintf("%d.%09ds", int64(t)/int64(Second), int64(t)%int64(Second))
}

// Handler receives the events scheduled with Loop.Call. The simulation's
// per-frame events (deliveries, host service, timers) are Calls to handlers
// registered once: scheduling one allocates nothing, where a closure
// capturing its state costs an allocation per event.
type Handler interface {
	Fire(arg uint64)
}

// HandlerID names a Handler registered with Loop.Handle.
type HandlerID uint32

// funcs is handler 0: the closures scheduled with At, kept in slots reused
// through a free list; the event's argument is the slot.
const funcs HandlerID = 0

// event is one scheduled callback: handler id with argument arg. seq is the
// order in which events were scheduled: it breaks ties between events at the
// same time, so that the order of execution depends only on the order of
// scheduling, never on goroutines or map iteration. Events hold no pointers,
// so moving them about the heap costs no GC write barriers.
type event struct {
	at  Time
	seq uint64
	arg uint64
	id  HandlerID
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// Loop is a single-threaded discrete-event loop over a virtual clock. Events
// run in (time, scheduling order); the clock jumps to each event's time as it
// runs. Nothing in a Loop reads the wall clock or starts a goroutine.
//
// Events scheduled for the current instant (a host kicked by a frame that
// just arrived, say) skip the heap: they go to a FIFO, cur, whose events all
// run at the current time in scheduling order, after the heap's events of
// the same time scheduled before them. Step takes whichever of the two
// heads comes first in (time, sequence) order, so the order of execution
// is exactly that of a single heap.
type Loop struct {
	now      Time
	seq      uint64
	heap     []event // 4-ary min-heap by (at, seq)
	cur      []event // events at now, in seq order; cur[head:] are pending
	head     int
	fired    uint64
	handlers []Handler
	fns      []func() // closures scheduled with At, by slot
	freeFns  []uint64 // free slots of fns
	// stale says heap[0] is the event running now, not yet removed: the
	// first event the handler puts in the heap takes its place (one sift
	// down instead of a removal's and an insertion's), and Step removes
	// it if none did. Every event scheduled sorts after the running one
	// (its time is not earlier, its sequence number later), so the stale
	// root never misorders the heap meanwhile.
	stale bool
}

// NewLoop returns a loop whose clock reads 0.
func NewLoop() *Loop { return &Loop{handlers: []Handler{funcs: nil}} }

// Now returns the current virtual time.
func (l *Loop) Now() Time { return l.now }

// Fired returns how many events have run.
func (l *Loop) Fired() uint64 { return l.fired }

// Len returns how many events are scheduled.
func (l *Loop) Len() int {
	n := len(l.heap) + len(l.cur) - l.head
	if l.stale {
		n--
	}
	return n
}

// Next returns the time of the earliest scheduled event, or Never.
func (l *Loop) Next() Time {
	if l.head < len(l.cur) {
		return l.now
	}
	if l.stale {
		// The running event is still the root: the earliest other is
		// among its children.
		t := Never
		for c := 1; c <= 4 && c < len(l.heap); c++ {
			t = min(t, l.heap[c].at)
		}
		return t
	}
	if len(l.heap) == 0 {
		return Never
	}
	return l.heap[0].at
}

// Handle registers h, for scheduling with Call.
func (l *Loop) Handle(h Handler) HandlerID {
	l.handlers = append(l.handlers, h)
	return HandlerID(len(l.handlers) - 1)
}

// At schedules fn to run at time t (or now, if t is in the past).
func (l *Loop) At(t Time, fn func()) {
	var slot uint64
	if k := len(l.freeFns); k > 0 {
		slot = l.freeFns[k-1]
		l.freeFns = l.freeFns[:k-1]
		l.fns[slot] = fn
	} else {
		slot = uint64(len(l.fns))
		l.fns = append(l.fns, fn)
	}
	l.Call(t, funcs, slot)
}

// Call schedules the Fire(arg) of the handler id names at time t (or now,
// if t is in the past). It is At without a closure: events run in the same
// (time, scheduling) order whichever way they were scheduled.
func (l *Loop) Call(t Time, id HandlerID, arg uint64) {
	l.seq++
	if t <= l.now {
		l.cur = append(l.cur, event{at: l.now, seq: l.seq, arg: arg, id: id})
		return
	}
	l.push(event{at: t, seq: l.seq, arg: arg, id: id})
}

// push puts ev in the heap, in the running event's place if that is still
// there (see stale).
func (l *Loop) push(ev event) {
	if l.stale {
		l.stale = false
		l.heap[0] = ev
		l.down(0)
		return
	}
	l.heap = append(l.heap, ev)
	l.up(len(l.heap) - 1)
}

// reserve takes the next sequence number, for an event that callSeq puts
// in the heap later: it then runs where it would have, had Call scheduled
// it now.
func (l *Loop) reserve() uint64 {
	l.seq++
	return l.seq
}

// callSeq schedules the Fire(arg) of handler id at time t (not before now)
// under sequence number seq, which reserve gave. It goes to the heap even
// when t is now: seq may be older than the events of cur.
func (l *Loop) callSeq(t Time, seq uint64, id HandlerID, arg uint64) {
	l.push(event{at: t, seq: seq, arg: arg, id: id})
}

// After schedules fn to run d after now.
func (l *Loop) After(d Time, fn func()) { l.At(l.now+d, fn) }

// Step runs the earliest event and reports whether there was one.
func (l *Loop) Step() bool {
	var ev event
	switch {
	case l.head < len(l.cur) && (len(l.heap) == 0 || !l.heap[0].before(&l.cur[l.head])):
		ev = l.cur[l.head]
		l.head++
		if l.head == len(l.cur) {
			l.cur, l.head = l.cur[:0], 0
		}
	case len(l.heap) > 0:
		ev = l.heap[0]
		l.stale = true
	default:
		return false
	}
	l.now = ev.at
	l.fired++
	if ev.id == funcs {
		fn := l.fns[ev.arg]
		l.fns[ev.arg] = nil
		l.freeFns = append(l.freeFns, ev.arg)
		fn()
	} else {
		l.handlers[ev.id].Fire(ev.arg)
	}
	if l.stale {
		l.stale = false
		last := len(l.heap) - 1
		l.heap[0] = l.heap[last]
		l.heap = l.heap[:last]
		if last > 0 {
			l.down(0)
		}
	}
	return true
}

// RunUntil runs every event scheduled at or before t, then sets the clock to
// t (if t is not Never). Events that running events schedule at or before t
// run too.
func (l *Loop) RunUntil(t Time) {
	for l.Next() <= t && l.Step() {
	}
	if t != Never && t > l.now {
		l.now = t
	}
}

// AdvanceTo moves the clock to t, which no scheduled event may precede: the
// end of a window of a sharded network (shard.go), where every shard's
// clock then reads the same.
func (l *Loop) AdvanceTo(t Time) {
	if l.Next() < t {
		panic(fmt.Sprintf("netsim: AdvanceTo(%v) with an event due at %v", t, l.Next()))
	}
	if t > l.now {
		l.now = t
	}
}

// RunWhile runs events while cond returns true and events remain, checking
// cond before each event. It returns false if it stopped because no events
// were left.
func (l *Loop) RunWhile(cond func() bool) bool {
	for cond() {
		if !l.Step() {
			return false
		}
	}
	return true
}

// The heap is 4-ary: half the depth of a binary heap, and a node's children
// share a cache line or two, which makes taking the earliest event cheaper.

// earlier returns i or j, whichever of their events runs first, without a
// branch: a sift's comparisons go either way at random, and as branches
// half of them were mispredicted.
func earlier(h []event, i, j int) int {
	// h[j] before h[i]: (at, seq) compared as one 128-bit subtraction,
	// whose borrow says it (times are never negative).
	_, b := bits.Sub64(h[j].seq, h[i].seq, 0)
	_, b = bits.Sub64(uint64(h[j].at), uint64(h[i].at), b)
	return i ^ (i^j)&-int(b)
}

func (l *Loop) up(i int) {
	h := l.heap
	ev := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !ev.before(&h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = ev
}

func (l *Loop) down(i int) {
	h := l.heap
	n := len(h)
	ev := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		var m int
		if c+3 < n {
			m = earlier(h, earlier(h, c, c+1), earlier(h, c+2, c+3))
		} else {
			m = c
			for k := c + 1; k < n; k++ {
				m = earlier(h, m, k)
			}
		}
		if !h[m].before(&ev) {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = ev
}
