package verbsapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// MR.SGE refuses a length its 32-bit field cannot hold instead of
// truncating it.
func TestSGELengthChecked(t *testing.T) {
	ca, _ := startPair(t)
	pd, err := ca.AllocPD()
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 64), AccessLocalWrite)
	require.NoError(t, err)
	assert.EqualValues(t, 64, mr.SGE(0, 64).Length)
	assert.EqualValues(t, 1<<32-1, mr.SGE(0, 1<<32-1).Length, "beyond the region: the device checks at post time")
	for _, bad := range [][2]int{{0, 1 << 32}, {0, 1<<32 + 5}, {-1, 8}, {0, -1}} {
		assert.Panics(t, func() { mr.SGE(bad[0], bad[1]) }, "SGE(%d, %d)", bad[0], bad[1])
	}
}

// WaitByte returns once a peer's RDMA WRITE (no completion at the target)
// has landed, and reports a deadline otherwise.
func TestWaitByte(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	copy(a.mr.Bytes(), "ping!")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- b.mr.WaitByte(ctx, 104, '!')
	}()
	require.NoError(t, a.qp.PostSend(&SendWR{Opcode: WRWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 5)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}))
	require.NoError(t, <-done)
	got := make([]byte, 5)
	require.NoError(t, b.mr.Load(got, 100))
	assert.Equal(t, "ping!", string(got))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, b.mr.WaitByte(ctx, 0, 0xFF), context.Canceled)
	assert.ErrorIs(t, b.mr.Load(got, b.mr.Len()-2), ErrInvalid)
}

// Flush returns once the device has handed the link everything it had to
// send: 32 WRITEs posted, flushed, and nothing left.
func TestFlush(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	for i := range 32 {
		require.NoError(t, a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRWrite, SGL: []SGE{a.mr.SGE(0, 4096)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, a.ctx.Flush(ctx))
	assert.False(t, a.ctx.Device().HasOutput())
	assert.GreaterOrEqual(t, a.ctx.Counters().SentPkts, uint64(32*4))
}
