package dropin

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// The ring takes completions until the program's consumer count leaves no
// room; whatever the program writes there, the daemon neither panics nor
// writes outside the ring: nonsense only overflows the program's own CQ.
// The program cannot resize the memfd under the daemon's mapping.
func TestCQRingUntrusted(t *testing.T) {
	r, fd, err := newCQRing(4)
	require.NoError(t, err)
	defer r.unmap()
	defer unix.Close(fd)
	assert.Error(t, unix.Ftruncate(fd, 0), "the ring's memfd is sealed against shrinking")
	assert.Error(t, unix.Ftruncate(fd, 1<<20), "and growing")
	prog := &testRing{mem: r.mem, n: 4}

	for i := range 4 {
		require.True(t, r.Put(verbsapi.WC{ID: uint64(i)}), "entry %d", i)
	}
	assert.False(t, r.Put(verbsapi.WC{ID: 4}), "a full ring")
	assert.EqualValues(t, cqRingOverflow, atomic.LoadUint32(r.word(cqRingFlags)))
	assert.Equal(t, 4, r.Len())
	var ids []uint64
	prog.take(16, func(wc wireWC) { ids = append(ids, wc.WRID) })
	assert.Equal(t, []uint64{0, 1, 2, 3}, ids)
	assert.Equal(t, 0, r.Len())

	for _, cons := range []uint32{r.prod + 1, r.prod + 1000, r.prod - 5, 0xffffffff} {
		atomic.StoreUint32(r.word(cqRingCons), cons)
		assert.LessOrEqual(t, r.Len(), 4, "cons %#x", cons)
		for range 8 {
			r.Put(verbsapi.WC{ID: 9}) // refused or written in place: never outside
		}
	}
	atomic.StoreUint32(r.word(cqRingCons), r.prod)
	assert.True(t, r.Put(verbsapi.WC{ID: 10}), "room again once the count is sane")
}
