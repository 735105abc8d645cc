package netsim

import "fmt"

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

// event is one scheduled callback. seq is the order in which events were
// scheduled: it breaks ties between events at the same time, so that the
// order of execution depends only on the order of scheduling, never on
// goroutines or map iteration.
type event struct {
	at  Time
	seq uint64
	fn  func()
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
type Loop struct {
	now   Time
	seq   uint64
	heap  []event
	fired uint64
}

// NewLoop returns a loop whose clock reads 0.
func NewLoop() *Loop { return &Loop{} }

// Now returns the current virtual time.
func (l *Loop) Now() Time { return l.now }

// Fired returns how many events have run.
func (l *Loop) Fired() uint64 { return l.fired }

// Len returns how many events are scheduled.
func (l *Loop) Len() int { return len(l.heap) }

// Next returns the time of the earliest scheduled event, or Never.
func (l *Loop) Next() Time {
	if len(l.heap) == 0 {
		return Never
	}
	return l.heap[0].at
}

// At schedules fn to run at time t (or now, if t is in the past).
func (l *Loop) At(t Time, fn func()) {
	if t < l.now {
		t = l.now
	}
	l.seq++
	l.heap = append(l.heap, event{at: t, seq: l.seq, fn: fn})
	l.up(len(l.heap) - 1)
}

// After schedules fn to run d after now.
func (l *Loop) After(d Time, fn func()) { l.At(l.now+d, fn) }

// Step runs the earliest event and reports whether there was one.
func (l *Loop) Step() bool {
	if len(l.heap) == 0 {
		return false
	}
	ev := l.heap[0]
	last := len(l.heap) - 1
	l.heap[0] = l.heap[last]
	l.heap[last] = event{}
	l.heap = l.heap[:last]
	if last > 0 {
		l.down(0)
	}
	l.now = ev.at
	l.fired++
	ev.fn()
	return true
}

// RunUntil runs every event scheduled at or before t, then sets the clock to
// t (if t is not Never). Events that running events schedule at or before t
// run too.
func (l *Loop) RunUntil(t Time) {
	for len(l.heap) > 0 && l.heap[0].at <= t {
		l.Step()
	}
	if t != Never && t > l.now {
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

func (l *Loop) up(i int) {
	h := l.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (l *Loop) down(i int) {
	h := l.heap
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h[r].before(&h[c]) {
			c = r
		}
		if !h[c].before(&h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
