package netsim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoopOrdersByTimeThenScheduling(t *testing.T) {
	l := NewLoop()
	var got []string
	rec := func(s string) func() { return func() { got = append(got, s) } }
	l.At(30, rec("c"))
	l.At(10, rec("a1"))
	l.At(20, rec("b"))
	l.At(10, rec("a2"))
	l.At(10, func() {
		got = append(got, "a3")
		l.At(10, rec("a4"))  // same time, scheduled later: runs after a3's peers
		l.At(5, rec("past")) // in the past: runs now, after a4
	})
	l.RunUntil(Never)
	assert.Equal(t, []string{"a1", "a2", "a3", "a4", "past", "b", "c"}, got)
	assert.Equal(t, Time(30), l.Now())
	assert.Equal(t, uint64(7), l.Fired())
}

func TestLoopRunUntilAdvancesClock(t *testing.T) {
	l := NewLoop()
	n := 0
	l.At(100, func() { n++ })
	l.At(200, func() { n++ })
	l.RunUntil(150)
	require.Equal(t, 1, n)
	assert.Equal(t, Time(150), l.Now())
	assert.Equal(t, Time(200), l.Next())
	l.After(10, func() { n += 10 })
	l.RunUntil(Never)
	assert.Equal(t, 12, n)
	assert.Equal(t, Time(200), l.Now())
	assert.Equal(t, Never, l.Next())
	assert.False(t, l.Step())
}

func TestLoopHeapManyEvents(t *testing.T) {
	l := NewLoop()
	// Times from a fixed permutation; ties broken by scheduling order.
	var got []Time
	var seqs []int
	for i := 0; i < 1000; i++ {
		at := Time((i * 7919) % 101)
		k := i
		l.At(at, func() { got = append(got, l.Now()); seqs = append(seqs, k) })
	}
	l.RunUntil(Never)
	require.Len(t, got, 1000)
	for i := 1; i < len(got); i++ {
		require.LessOrEqual(t, got[i-1], got[i])
		if got[i-1] == got[i] {
			require.Less(t, seqs[i-1], seqs[i])
		}
	}
}

func TestTimeString(t *testing.T) {
	assert.Equal(t, "1.000000500s", (Second + 500).String())
	assert.Equal(t, "never", Never.String())
}

// recHandler records its calls.
type recHandler struct{ got *[]int }

func (r recHandler) Fire(arg uint64) { *r.got = append(*r.got, int(arg)) }

// TestLoopMatchesReferenceOrder schedules a seeded mix of closures and
// handler calls, at the current instant and later, many of them from
// running events, and requires them to run in exactly (time, scheduling)
// order, as one sorted list would.
func TestLoopMatchesReferenceOrder(t *testing.T) {
	l := NewLoop()
	var got []int
	var want []scheduled
	h := l.Handle(recHandler{&got})
	rnd := xorshift(1)
	n := 0
	var schedule func()
	schedule = func() {
		if n >= 5000 {
			return
		}
		seq := n
		n++
		var at Time
		switch rnd(3) {
		case 0:
			at = l.Now() // the current instant
		case 1:
			at = l.Now() - Time(rnd(3)) // the past: runs now
		default:
			at = l.Now() + Time(rnd(50))
		}
		want = append(want, scheduled{max(at, l.Now()), seq})
		if rnd(2) == 0 {
			l.Call(at, h, uint64(seq))
			return
		}
		l.At(at, func() {
			got = append(got, seq)
			for k := rnd(3); k > 0; k-- {
				schedule()
			}
		})
	}
	for i := 0; i < 50; i++ {
		schedule()
	}
	for l.Len() > 0 || n < 5000 {
		if l.Len() == 0 {
			schedule()
		}
		l.Step()
	}
	require.Equal(t, referenceOrder(want), got)
	assert.Equal(t, uint64(len(want)), l.Fired())
}

// scheduled is an event as a test scheduled it: its time and its tag.
type scheduled struct {
	at  Time
	tag int
}

// referenceOrder is the order events must run in: a stable sort by time of
// the order they were scheduled in. It returns their tags.
func referenceOrder(want []scheduled) []int {
	order := make([]int, len(want))
	for i := range order {
		order[i] = i
	}
	sortStable(order, func(a, b int) bool { return want[a].at < want[b].at })
	ref := make([]int, len(order))
	for i, k := range order {
		ref[i] = want[k].tag
	}
	return ref
}

// xorshift returns a seeded generator of numbers below n.
func xorshift(seed uint64) func(n int) int {
	x := seed
	return func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
}

// sortStable is an insertion sort (stable), to keep the reference simple.
func sortStable(a []int, less func(x, y int) bool) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && less(a[j], a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// fifoHandler keeps events the way a lane does (lane.go): reserved in
// order, with times that never decrease, and only the head in the heap.
type fifoHandler struct {
	l   *Loop
	id  HandlerID
	q   []event
	got *[]int
}

func (f *fifoHandler) add(at Time, tag int) {
	e := event{at: max(at, f.l.Now()), seq: f.l.reserve(), arg: uint64(tag)}
	f.q = append(f.q, e)
	if len(f.q) == 1 {
		f.l.callSeq(e.at, e.seq, f.id, 0)
	}
}

func (f *fifoHandler) Fire(uint64) {
	e := f.q[0]
	f.q = f.q[1:]
	if len(f.q) > 0 {
		f.l.callSeq(f.q[0].at, f.q[0].seq, f.id, 0)
	}
	*f.got = append(*f.got, int(e.arg))
}

// TestLoopReservedSequence: events kept in FIFOs with only their heads in
// the heap (reserve, callSeq) run exactly where they would have had each
// been scheduled with Call when it was reserved, among events that were.
func TestLoopReservedSequence(t *testing.T) {
	l := NewLoop()
	var got []int
	plain := l.Handle(recHandler{&got})
	fifos := make([]*fifoHandler, 3)
	last := make([]Time, len(fifos))
	for i := range fifos {
		fifos[i] = &fifoHandler{l: l, got: &got}
		fifos[i].id = l.Handle(fifos[i])
	}
	var want []scheduled
	rnd := xorshift(7)
	for tag := 0; tag < 20000; tag++ {
		if rnd(4) == 0 {
			l.Step()
		}
		at := l.Now() + Time(rnd(20))
		if k := rnd(len(fifos) + 1); k < len(fifos) {
			at = max(at, last[k]) // a FIFO's times never decrease
			last[k] = at
			fifos[k].add(at, tag)
		} else {
			l.Call(at, plain, uint64(tag))
		}
		want = append(want, scheduled{max(at, l.Now()), tag})
	}
	for l.Step() {
	}
	require.Equal(t, referenceOrder(want), got)
}

// TestLoopInspectDuringEvent checks Len and Next from a running event, while
// the loop still holds that event's heap slot (Loop.stale), before and after
// the event schedules others.
func TestLoopInspectDuringEvent(t *testing.T) {
	l := NewLoop()
	l.At(20, func() {})
	l.At(30, func() {})
	l.At(10, func() {
		assert.Equal(t, 3, l.Len())
		assert.Equal(t, Time(20), l.Next())
		l.At(15, func() {})
		assert.Equal(t, 4, l.Len())
		assert.Equal(t, Time(15), l.Next())
		l.At(10, func() {})
		assert.Equal(t, 5, l.Len())
		assert.Equal(t, Time(10), l.Next())
	})
	l.At(40, func() {
		assert.Equal(t, 0, l.Len())
		assert.Equal(t, Never, l.Next())
	})
	l.RunUntil(Never)
	assert.Equal(t, uint64(6), l.Fired())
}
