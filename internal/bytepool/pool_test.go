package bytepool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What is put back is taken by the next Get of its length, cleared; other
// lengths get new bytes; past Keep, Put drops.
func TestPool(t *testing.T) {
	p := Pool{Keep: 3000}
	a := p.Get(1000)
	require.Len(t, a, 1000)
	for i := range a {
		a[i] = 0xA5
	}
	p.Put(a)
	b := p.Get(1000)
	assert.Same(t, &a[0], &b[0], "the slice put back is taken again")
	for i, v := range b {
		if v != 0 {
			t.Fatalf("byte %d is %#x, not zero", i, v)
		}
	}
	p.Put(b)
	c := p.Get(2000)
	assert.NotSame(t, &a[0], &c[0], "another length gets new bytes")

	p.Put(c)                // 3000 kept
	p.Put(make([]byte, 10)) // past Keep: dropped
	assert.Equal(t, 3000, p.bytes)
	var zero Pool
	zero.Put(make([]byte, 10))
	assert.Zero(t, zero.bytes, "the zero Pool keeps nothing")
}

// Take hands back what was put back as it was: the cost of clearing is
// saved for callers that overwrite everything.
func TestPoolTake(t *testing.T) {
	p := Pool{Keep: 1 << 20}
	a, reused := p.Take(64)
	require.Len(t, a, 64)
	assert.False(t, reused, "the pool is empty: new bytes")
	assert.Equal(t, make([]byte, 64), a, "new bytes are zero")
	a[0], a[63] = 1, 2
	p.Put(a)
	b, reused := p.Take(64)
	assert.True(t, reused)
	assert.Same(t, &a[0], &b[0])
	assert.Equal(t, []byte{1, 2}, []byte{b[0], b[63]}, "Take does not clear")
	p.Put(b)
	c := p.Get(64)
	assert.Equal(t, make([]byte, 64), c, "Get does")
}

func TestPoolDrain(t *testing.T) {
	p := Pool{Keep: 1 << 20}
	a := p.Get(64)
	p.Put(a)
	p.Drain()
	assert.Zero(t, p.bytes)
	b := p.Get(64)
	assert.NotSame(t, &a[0], &b[0], "drained: new bytes")
}

// Each visits every slice held, whatever its length, and what it writes
// is what Take hands out.
func TestPoolEach(t *testing.T) {
	p := Pool{Keep: 1 << 20}
	p.Put(make([]byte, 64))
	p.Put(make([]byte, 64))
	p.Put(make([]byte, 100))
	n := 0
	p.Each(func(b []byte) {
		n += len(b)
		b[0] = 7
	})
	assert.Equal(t, 228, n)
	for _, size := range []int{64, 64, 100} {
		b, reused := p.Take(size)
		assert.True(t, reused)
		assert.Equal(t, byte(7), b[0])
	}
}
