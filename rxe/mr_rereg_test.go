package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// ReregMR keeps the keys, moves the region between PDs and memory, changes
// its access (and with it whether the rkey works), and leaves the region as
// it was when it fails.
func TestReregMR(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd1, err := d.AllocPD()
	require.NoError(t, err)
	pd2, err := d.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 64)
	m, err := d.RegMR(pd1, buf, qp.AccessLocalWrite)
	require.NoError(t, err)
	lkey := m.LKey()
	assert.Zero(t, m.RKey(), "no remote access, no rkey")

	require.NoError(t, d.ReregMR(m, pd1, nil, 0, qp.AccessLocalWrite|qp.AccessRemoteWrite))
	assert.Equal(t, lkey, m.LKey())
	assert.Equal(t, lkey, m.RKey(), "remote write granted under the same key")
	_, err = pd1.mem.Remote(lkey, m.Addr(), 8, qp.AccessRemoteWrite)
	require.NoError(t, err)

	other := make([]byte, 128)
	require.NoError(t, d.ReregMR(m, pd2, other, 0x1000, qp.AccessLocalWrite|qp.AccessRemoteRead))
	assert.Equal(t, lkey, m.LKey())
	assert.Same(t, pd2, m.PD())
	assert.Equal(t, uint64(0x1000), m.Addr())
	assert.Equal(t, 128, m.Len())
	_, err = pd2.mem.Remote(lkey, 0x1000, 128, qp.AccessRemoteRead)
	require.NoError(t, err)
	_, err = pd2.mem.Remote(lkey, 0x1000, 8, qp.AccessRemoteWrite)
	require.Error(t, err, "write access was taken away")
	_, err = pd1.mem.Remote(lkey, 0x1000, 8, qp.AccessRemoteRead)
	require.Error(t, err, "the region left pd1")
	require.ErrorIs(t, d.DeallocPD(pd2), ErrBusy)
	require.NoError(t, d.DeallocPD(pd1))

	for name, access := range map[string]qp.Access{
		"remote write without local write": qp.AccessRemoteWrite,
		"unknown flag":                     qp.Access(1 << 12),
	} {
		require.ErrorIs(t, d.ReregMR(m, pd2, nil, 0, access), ErrInvalid, name)
	}
	require.ErrorIs(t, d.ReregMR(m, pd2, []byte{}, 0, qp.AccessLocalWrite), ErrInvalid, "empty buffer")
	assert.Equal(t, qp.AccessLocalWrite|qp.AccessRemoteRead, m.Access(), "failures leave it as it was")
	assert.Equal(t, 128, m.Len())

	require.NoError(t, d.DeregMR(m))
	require.ErrorIs(t, d.ReregMR(m, pd2, nil, 0, qp.AccessLocalWrite), ErrDestroyed)
}
