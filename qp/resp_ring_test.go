package qp

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRespRingsGrowLikeFullOnes drives a responder whose rings grow as they
// fill and one whose rings are made at full size (rxe's) through the same
// random operations: the resources must sit at the same indexes, the queued
// responses come out in the same order, and the queue refuse the same
// pushes. Anything else would let growth change what a peer sees.
func TestRespRingsGrowLikeFullOnes(t *testing.T) {
	for _, n := range []uint8{1, 2, 3, 4, 8, 16} {
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		var grown, full responder
		grown.allocResources(n)
		grown.sizeResources()
		k := roundPow2(int(n))
		full = responder{resN: n, resCap: k, res: make([]respRes, k), outCap: 2*k + 8, out: make([]respOut, 2*k+8)}
		var id uint32
		for step := range 4000 {
			id++
			switch op := rng.IntN(10); {
			case op < 3:
				*grown.nextRes() = respRes{kind: resRead, firstPSN: id}
				*full.nextRes() = respRes{kind: resRead, firstPSN: id}
			case op < 6:
				a, b := grown.push(), full.push()
				require.Equal(t, a == nil, b == nil, "n=%d step %d: push refused by one only", n, step)
				if a != nil {
					*a, *b = respOut{psn: id}, respOut{psn: id} // as every caller does
				}
			case op < 7:
				grown.pushReadFront(id, 0, 0, 0, true)
				full.pushReadFront(id, 0, 0, 0, true)
			case op < 9:
				if grown.outN > 0 {
					grown.pop()
					full.pop()
				}
			default:
				if rng.IntN(50) == 0 {
					grown.reset(id)
					full.reset(id)
				}
			}
			require.Equal(t, full.outN, grown.outN)
			for i := range full.outN {
				require.Equal(t, full.out[(full.outHead+i)%len(full.out)], grown.out[(grown.outHead+i)%len(grown.out)], "n=%d step %d: response %d", n, step, i)
			}
			for i := range full.res {
				want := full.res[i]
				if i >= len(grown.res) {
					require.Zero(t, want, "n=%d step %d: resource %d beyond the grown ring", n, step, i)
					continue
				}
				require.Equal(t, want, grown.res[i], "n=%d step %d: resource %d", n, step, i)
			}
		}
		require.Len(t, grown.res, k, "n=%d: the ring reached its full size", n)
		require.Len(t, grown.out, 2*k+8, "n=%d: the queue reached its full size", n)
	}
}
