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
