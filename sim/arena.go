package sim

import "github.com/softroce/softroce/internal/bytepool"

// The bytes of a run's memory regions and reference models come from large
// chunks that go back to a shared pool when the run is over, for the next
// run to use (package bytepool says why). Chunks come back cleared, so a
// region starts zeroed as make would give it.
const (
	arenaChunk = 1 << 20 // bytes per chunk
	arenaAlign = 64      // regions start on a cache line
)

// arenaPool is the chunks runs gave back: 64 of them at most.
var arenaPool = bytepool.Pool{Keep: 64 * arenaChunk}

// arena is one run's: it carves byte slices out of its chunks.
type arena struct {
	chunks [][]byte
	cur    []byte // what is left of the newest chunk
}

// bytes returns n zeroed bytes that stay the run's until release.
func (a *arena) bytes(n int) []byte {
	need := (n + arenaAlign - 1) &^ (arenaAlign - 1)
	if need > arenaChunk {
		return make([]byte, n)
	}
	if len(a.cur) < need {
		a.cur = arenaPool.Get(arenaChunk)
		a.chunks = append(a.chunks, a.cur)
	}
	b := a.cur[:n:n]
	a.cur = a.cur[need:]
	return b
}

// release gives the run's chunks back. Nothing of the run may use its
// regions' bytes afterwards.
func (a *arena) release() {
	for _, c := range a.chunks {
		arenaPool.Put(c)
	}
	a.chunks, a.cur = nil, nil
}
