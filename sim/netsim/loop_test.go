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
	type sched struct {
		at  Time
		seq int
	}
	l := NewLoop()
	var got []int
	var want []sched
	h := l.Handle(recHandler{&got})
	x := uint64(1)
	rnd := func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
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
		want = append(want, sched{max(at, l.Now()), seq})
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
	// The reference: a stable sort by time of the scheduling order.
	order := make([]int, len(want))
	for i := range order {
		order[i] = i
	}
	sortStable(order, func(a, b int) bool { return want[a].at < want[b].at })
	ref := make([]int, len(order))
	for i, k := range order {
		ref[i] = want[k].seq
	}
	require.Equal(t, ref, got)
	assert.Equal(t, uint64(len(want)), l.Fired())
}

// sortStable is an insertion sort (stable), to keep the reference simple.
func sortStable(a []int, less func(x, y int) bool) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && less(a[j], a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
