package netsim

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// holdHandler reschedules itself at a random delay each time it fires: the
// "hold" model of priority-queue benchmarks, with a fixed number of events
// pending, as the simulator's pipes, lanes and host timers keep it.
type holdHandler struct {
	l     *Loop
	id    HandlerID
	rng   *rand.Rand
	delay []Time
	i     int
}

func (h *holdHandler) Fire(uint64) {
	h.i++
	h.l.Call(h.l.Now()+h.delay[h.i&(len(h.delay)-1)], h.id, 0)
}

// BenchmarkLoopHold: one event run and one scheduled per operation, with
// 4 to 256 pending (the library's scenarios average about 50).
func BenchmarkLoopHold(b *testing.B) {
	for _, pending := range []int{4, 50, 256} {
		b.Run(strconv.Itoa(pending), func(b *testing.B) {
			l := NewLoop()
			h := &holdHandler{l: l, rng: rand.New(rand.NewPCG(1, 2)), delay: make([]Time, 1024)}
			for i := range h.delay {
				// Serialization times and propagation delays: 0.1-10 us.
				h.delay[i] = Time(100 + h.rng.IntN(10000))
			}
			h.id = l.Handle(h)
			for i := range pending {
				l.Call(h.delay[i], h.id, 0)
			}
			b.ResetTimer()
			for range b.N {
				l.Step()
			}
		})
	}
}

// earlier agrees with before on any pair: times from 0 to Never, equal
// times told apart by sequence number, in either order.
func TestEarlierMatchesBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	times := []Time{0, 1, 2, 1000, 1 << 32, 1<<62 + 3, Never - 1, Never}
	for range 100000 {
		h := []event{
			{at: times[rng.IntN(len(times))], seq: rng.Uint64N(4)},
			{at: times[rng.IntN(len(times))], seq: rng.Uint64N(4)},
		}
		if rng.IntN(2) == 0 {
			h[0].at, h[1].at = Time(rng.Int64()), Time(rng.Int64())
			h[0].seq, h[1].seq = rng.Uint64(), rng.Uint64()
		}
		want := 0
		if h[1].before(&h[0]) {
			want = 1
		}
		if got := earlier(h, 0, 1); got != want {
			t.Fatalf("earlier(%+v, %+v) = %d, before says %d", h[0], h[1], got, want)
		}
	}
}
