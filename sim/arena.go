package sim

import "sync"

// The bytes of a run's memory regions and reference models come from large
// chunks that go back to a shared free list when the run is over, for the
// next run to use. A scenario of a thousand QPs registers some 13 MB of
// regions and models, and a search or a sweep runs thousands of seeds one
// after another in one process: allocated afresh, those bytes would set the
// garbage collector's pace (a cycle per run), though none of them holds a
// pointer. Recycled, a run allocates only its objects. Chunks are cleared
// before reuse, so a region starts zeroed as make would give it.
const (
	arenaChunk = 1 << 20 // bytes per chunk
	arenaAlign = 64      // regions start on a cache line
	arenaKeep  = 64      // chunks kept between runs: 64 MiB
)

// arenaFree is the chunks runs gave back.
var arenaFree struct {
	sync.Mutex
	chunks [][]byte
}

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
		a.cur = a.chunk()
	}
	b := a.cur[:n:n]
	a.cur = a.cur[need:]
	return b
}

// chunk takes a chunk from the free list (clearing it), or makes one.
func (a *arena) chunk() []byte {
	var c []byte
	arenaFree.Lock()
	if k := len(arenaFree.chunks); k > 0 {
		c = arenaFree.chunks[k-1]
		arenaFree.chunks[k-1] = nil
		arenaFree.chunks = arenaFree.chunks[:k-1]
	}
	arenaFree.Unlock()
	if c == nil {
		c = make([]byte, arenaChunk)
	} else {
		clear(c)
	}
	a.chunks = append(a.chunks, c)
	return c
}

// release gives the run's chunks back. Nothing of the run may use its
// regions' bytes afterwards.
func (a *arena) release() {
	arenaFree.Lock()
	for _, c := range a.chunks {
		if len(arenaFree.chunks) < arenaKeep {
			arenaFree.chunks = append(arenaFree.chunks, c)
		}
	}
	arenaFree.Unlock()
	a.chunks, a.cur = nil, nil
}
