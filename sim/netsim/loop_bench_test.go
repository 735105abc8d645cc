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
