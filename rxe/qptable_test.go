package rxe

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQPTableMatchesMap puts, removes and looks up QPNs at random, among
// them ones no QP holds and wire values past the last QPN, and holds the
// table to a map doing the same.
func TestQPTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab qpTable
	ref := map[uint32]*QP{}
	qpn := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return uint32(rng.IntN(1 << 24)) // anything the wire may carry
		case 1:
			return lastQPN - uint32(rng.IntN(4))
		default:
			return firstQPN + uint32(rng.IntN(3000))
		}
	}
	for step := range 20000 {
		n := qpn()
		switch rng.IntN(3) {
		case 0:
			if ref[n] == nil && n <= lastQPN {
				x := &QP{qpn: n}
				tab.put(n, x)
				ref[n] = x
			}
		case 1:
			if ref[n] != nil {
				tab.remove(n)
				delete(ref, n)
			}
		}
		require.Same(t, ref[n], tab.get(n), "step %d: qpn %#x", step, n)
		require.Equal(t, len(ref), tab.len(), "step %d", step)
	}
	for n, x := range ref {
		require.Same(t, x, tab.get(n))
	}
}
