package rxe

import (
	"container/heap"
	"math/rand/v2"
	"testing"

	"github.com/softroce/softroce/qp"
)

// refHeap is the timer queue as it was, on container/heap.
type refHeap []*QP

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].dlAt < h[j].dlAt }
func (h refHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dlIdx, h[j].dlIdx = i, j
}
func (h *refHeap) Push(v any) {
	x := v.(*QP)
	x.dlIdx = len(*h)
	*h = append(*h, x)
}
func (h *refHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	x.dlIdx = -1
	return x
}

// The written-out heap makes container/heap's moves: under random pushes,
// re-keyings, removals and pops (deadlines from a small range, so that
// many tie), both hold the same QPs at the same places throughout, and
// QPs due at the same instant so come out in the same order, which the
// simulator's replays rely on.
func TestDeadlineHeapMatchesContainerHeap(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		const n = 64
		ours, theirs := make([]*QP, n), make([]*QP, n)
		for i := range n {
			ours[i], theirs[i] = &QP{qpn: uint32(i), dlIdx: -1}, &QP{qpn: uint32(i), dlIdx: -1}
		}
		var h deadlineHeap
		var r refHeap
		for step := range 2000 {
			i := rng.IntN(n)
			a, b := ours[i], theirs[i]
			at := qp.Time(rng.IntN(20))
			switch k := rng.IntN(10); {
			case k < 4 && a.dlIdx < 0:
				a.dlAt, b.dlAt = at, at
				h.push(a)
				heap.Push(&r, b)
			case k < 7 && a.dlIdx >= 0:
				a.dlAt, b.dlAt = at, at
				h.fix(a.dlIdx)
				heap.Fix(&r, b.dlIdx)
			case k < 8 && a.dlIdx >= 0:
				h.remove(a.dlIdx)
				heap.Remove(&r, b.dlIdx)
			case len(h) > 0:
				x, y := h.pop(), heap.Pop(&r).(*QP)
				if x.qpn != y.qpn {
					t.Fatalf("seed %d step %d: popped QP %d, container/heap %d", seed, step, x.qpn, y.qpn)
				}
			}
			if len(h) != len(r) {
				t.Fatalf("seed %d step %d: %d QPs, container/heap %d", seed, step, len(h), len(r))
			}
			for j := range h {
				if h[j].qpn != r[j].qpn || h[j].dlIdx != j || r[j].dlIdx != j {
					t.Fatalf("seed %d step %d: place %d holds QP %d, container/heap QP %d", seed, step, j, h[j].qpn, r[j].qpn)
				}
			}
		}
	}
}
