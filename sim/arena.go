package sim

import "github.com/softroce/softroce/internal/bytepool"

// The bytes of a run's memory regions and reference models come from large
// chunks that go back to a shared pool when the run is over, for the next
// run to use (package bytepool says why). A region asked for zeroed is
// cleared as it is carved out of a reused chunk, so it starts as make would
// give it; the parts of a chunk no run asked for, and regions the caller
// overwrites, are never cleared (clearing whole chunks as they came back
// was 2.5% of the scale scenario). A region larger than a chunk gets bytes
// of its own, of a whole number of chunks, that go back to the pool the
// same way.
const (
	arenaChunk = 1 << 20 // bytes per chunk
	arenaAlign = 64      // regions start on a cache line
)

// arenaPool is the chunks runs gave back: 320 MiB at most, enough for the
// library's largest run (incast-dcqcn-pfc: about 200 MB, sixteen flows of
// four 1 MiB messages in flight, each with its remote region and model),
// and what a process running many seeds keeps beyond what its runs use.
var arenaPool = bytepool.Pool{Keep: 320 * arenaChunk}

// arena is one run's: it carves byte slices out of its chunks.
type arena struct {
	chunks [][]byte
	cur    []byte // what is left of the newest chunk
	dirty  bool   // cur came from the pool: it may hold an earlier run's bytes
}

// bytes returns n zeroed bytes that stay the run's until release.
func (a *arena) bytes(n int) []byte { return a.take(n, true) }

// overwritten returns n bytes as bytes does, except that they may hold what
// an earlier run left: for a caller that writes every one of them before
// anything reads them (a region filled with a pattern, a model copied from
// it), which saves clearing them.
func (a *arena) overwritten(n int) []byte { return a.take(n, false) }

func (a *arena) take(n int, zero bool) []byte {
	need := (n + arenaAlign - 1) &^ (arenaAlign - 1)
	var b []byte
	dirty := false
	if need > arenaChunk {
		size := (n + arenaChunk - 1) &^ (arenaChunk - 1)
		var c []byte
		c, dirty = arenaPool.Take(size)
		a.chunks = append(a.chunks, c)
		b = c[:n:n]
	} else {
		if len(a.cur) < need {
			a.cur, a.dirty = arenaPool.Take(arenaChunk)
			a.chunks = append(a.chunks, a.cur)
		}
		b, dirty = a.cur[:n:n], a.dirty
		a.cur = a.cur[need:]
	}
	if zero && dirty {
		clear(b)
	}
	return b
}

// release gives the run's chunks back. Nothing of the run may use its
// regions' bytes afterwards.
func (a *arena) release() {
	for _, c := range a.chunks {
		arenaPool.Put(c)
	}
	a.chunks, a.cur, a.dirty = nil, nil, false
}
