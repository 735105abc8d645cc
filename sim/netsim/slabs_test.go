package netsim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A released network's frame buffers serve the next network, cleared; the
// released one holds none (a use after Release fails at once rather than
// sharing bytes with another run).
func TestReleaseRecyclesSlabs(t *testing.T) {
	a := NewNetwork(NewLoop())
	_, buf := a.shard.getBuf(1000)
	for i := range buf[:cap(buf)] {
		buf[:cap(buf)][i] = 0xEE
	}
	first := &a.shard.chunks[0][0].data[0]
	a.Release()
	assert.Nil(t, a.shard.chunks[0], "the released network keeps no slab")

	b := NewNetwork(NewLoop())
	i, got := b.shard.getBuf(1000)
	require.Len(t, got, 1000)
	s := b.shard.slabOf(i)
	assert.Same(t, first, &s.data[0], "the slab of the same class is reused")
	for k, v := range s.data {
		if v != 0 {
			t.Fatalf("byte %d of the reused slab is %#x", k, v)
		}
	}
	b.Release()
}
