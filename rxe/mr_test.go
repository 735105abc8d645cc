package rxe

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

const rwAll = qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic

func TestRegMRKeys(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 4096)
	seen := map[uint32]bool{}
	keyBytes := map[uint8]int{}
	var mrs []*MR
	for i := 0; i < 512; i++ {
		m, err := d.RegMR(pd, buf, rwAll)
		require.NoError(t, err)
		assert.Equal(t, m.LKey(), m.RKey(), "rkey = lkey with remote access")
		assert.Equal(t, uint32(i+1), m.LKey()>>8, "indexes from 1, in order")
		assert.False(t, seen[m.LKey()], "key %#x reused", m.LKey())
		seen[m.LKey()] = true
		keyBytes[uint8(m.LKey())]++
		assert.Equal(t, uint64(uintptr(unsafe.Pointer(&buf[0]))), m.Addr())
		assert.Equal(t, 4096, m.Len())
		mrs = append(mrs, m)
	}
	// 512 draws of a random byte hit well over 100 distinct values; a
	// counter or constant would not.
	assert.Greater(t, len(keyBytes), 100, "key bytes look random")

	// A region without remote access has rkey 0.
	m, err := d.RegMR(pd, buf, qp.AccessLocalWrite)
	require.NoError(t, err)
	assert.Zero(t, m.RKey())
	assert.NotZero(t, m.LKey())

	// Deregistered indexes are reused only after the cycle wraps; a fresh
	// registration gets a new index.
	require.NoError(t, d.DeregMR(mrs[0]))
	m2, err := d.RegMR(pd, buf, rwAll)
	require.NoError(t, err)
	assert.Equal(t, uint32(514), m2.LKey()>>8)

	// Same seed, same keys; different seed, different keys.
	keys := func(seed uint64) []uint32 {
		d, err := New(Config{IPv4: ipA, Seed: seed})
		require.NoError(t, err)
		pd, _ := d.AllocPD()
		var k []uint32
		for i := 0; i < 16; i++ {
			m, err := d.RegMR(pd, buf, 0)
			require.NoError(t, err)
			k = append(k, m.LKey())
		}
		return k
	}
	assert.Equal(t, keys(42), keys(42))
	assert.NotEqual(t, keys(42), keys(43))
	assert.NotEqual(t, keys(0), keys(0), "seed 0 draws from crypto/rand")
}

func TestRegMRKeyByteChangesOnReuse(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	buf := make([]byte, 64)
	// Force reuse of index 1 by wrapping the cycle.
	m, err := d.RegMR(pd, buf, 0)
	require.NoError(t, err)
	first := m.LKey()
	for i := 0; i < 300; i++ {
		require.NoError(t, d.DeregMR(m))
		d.mrNext = 1
		m, err = d.RegMR(pd, buf, 0)
		require.NoError(t, err)
		require.Equal(t, uint32(1), m.LKey()>>8)
		require.NotEqual(t, first, m.LKey(), "a re-registered index never repeats its last key")
		first = m.LKey()
	}
}

func TestRegMRValidates(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	buf := make([]byte, 64)
	tests := []struct {
		name   string
		pd     *PD
		buf    []byte
		access qp.Access
	}{
		{"empty", pd, nil, 0},
		{"remote write without local write", pd, buf, qp.AccessRemoteWrite},
		{"remote atomic without local write", pd, buf, qp.AccessRemoteAtomic | qp.AccessRemoteRead},
		{"unknown access bit", pd, buf, 1 << 9},
		{"nil pd", nil, buf, 0},
	}
	for _, tt := range tests {
		_, err := d.RegMR(tt.pd, tt.buf, tt.access)
		assert.ErrorIs(t, err, ErrInvalid, tt.name)
	}
	// Remote read alone is fine; optional flags are ignored.
	m, err := d.RegMR(pd, buf, qp.AccessRemoteRead|1<<20)
	require.NoError(t, err)
	assert.Equal(t, qp.AccessRemoteRead, m.Access())

	other := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	opd, _ := other.AllocPD()
	_, err = d.RegMR(opd, buf, 0)
	assert.ErrorIs(t, err, ErrWrongDevice)
	require.NoError(t, other.DeallocPD(opd))
	_, err = other.RegMR(opd, buf, 0)
	assert.ErrorIs(t, err, ErrDestroyed)
}

func TestMemoryChecks(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	pd2, _ := d.AllocPD()
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = byte(i)
	}
	rw, err := d.RegMR(pd, buf, rwAll)
	require.NoError(t, err)
	ro, err := d.RegMR(pd, buf[128:], qp.AccessRemoteRead)
	require.NoError(t, err)
	loc, err := d.RegMR(pd, buf[:64], 0)
	require.NoError(t, err)
	other, err := d.RegMR(pd2, buf, rwAll)
	require.NoError(t, err)
	mem := &pd.mem
	va := rw.Addr()

	type call struct {
		name   string
		remote bool
		key    uint32
		va     uint64
		length uint32
		access qp.Access
		err    error
		first  byte
	}
	calls := []call{
		{"local read", false, rw.LKey(), va, 256, 0, nil, 0},
		{"local write", false, rw.LKey(), va + 10, 5, qp.AccessLocalWrite, nil, 10},
		{"remote write", true, rw.RKey(), va + 100, 156, qp.AccessRemoteWrite, nil, 100},
		{"remote atomic", true, rw.RKey(), va + 8, 8, qp.AccessRemoteAtomic, nil, 8},
		{"zero length at end", true, rw.RKey(), va + 256, 0, qp.AccessRemoteRead, nil, 0},
		{"read-only region read", true, ro.RKey(), ro.Addr(), 128, qp.AccessRemoteRead, nil, 128},
		{"local read of local-only region", false, loc.LKey(), loc.Addr(), 64, 0, nil, 0},

		{"bad key byte", false, rw.LKey() ^ 1, va, 1, 0, qp.ErrBadKey, 0},
		{"bad index", false, 0x7000 << 8, va, 1, 0, qp.ErrBadKey, 0},
		{"key 0", true, 0, va, 1, qp.AccessRemoteRead, qp.ErrBadKey, 0},
		{"rkey of region without remote access", true, loc.LKey(), loc.Addr(), 1, qp.AccessRemoteRead, qp.ErrBadKey, 0},
		{"other PD's key", true, other.RKey(), other.Addr(), 1, qp.AccessRemoteRead, qp.ErrBadKey, 0},
		{"other PD's lkey", false, other.LKey(), other.Addr(), 1, 0, qp.ErrBadKey, 0},

		{"remote write to read-only", true, ro.RKey(), ro.Addr(), 8, qp.AccessRemoteWrite, qp.ErrAccess, 0},
		{"remote atomic to read-only", true, ro.RKey(), ro.Addr(), 8, qp.AccessRemoteAtomic, qp.ErrAccess, 0},
		{"local write to local read-only", false, loc.LKey(), loc.Addr(), 8, qp.AccessLocalWrite, qp.ErrAccess, 0},

		{"below start", true, rw.RKey(), va - 1, 1, qp.AccessRemoteRead, qp.ErrBounds, 0},
		{"past end", true, rw.RKey(), va + 200, 57, qp.AccessRemoteRead, qp.ErrBounds, 0},
		{"start past end", true, rw.RKey(), va + 257, 0, qp.AccessRemoteRead, qp.ErrBounds, 0},
		{"length wraps", true, rw.RKey(), va + 1, 0xFFFFFFFF, qp.AccessRemoteRead, qp.ErrBounds, 0},
		{"va wraps", true, rw.RKey(), ^uint64(0), 2, qp.AccessRemoteRead, qp.ErrBounds, 0},
		{"va zero", true, rw.RKey(), 0, 1, qp.AccessRemoteRead, qp.ErrBounds, 0},
	}
	for _, c := range calls {
		var b []byte
		var err error
		if c.remote {
			b, err = mem.Remote(c.key, c.va, c.length, c.access)
		} else {
			b, err = mem.Local(c.key, c.va, c.length, c.access)
		}
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, c.name)
			assert.Nil(t, b, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Len(t, b, int(c.length), c.name)
		assert.Equal(t, int(c.length), cap(b), "%s: capacity is clipped", c.name)
		if c.length > 0 {
			assert.Equal(t, c.first, b[0], c.name)
		}
	}
	// The slice is the registered memory itself.
	b, err := mem.Remote(rw.RKey(), va+3, 1, qp.AccessRemoteWrite)
	require.NoError(t, err)
	b[0] = 0xEE
	assert.Equal(t, byte(0xEE), buf[3])

	allocs := testing.AllocsPerRun(100, func() {
		_, _ = mem.Remote(rw.RKey(), va, 64, qp.AccessRemoteRead)
		_, _ = mem.Remote(rw.RKey()^1, va, 64, qp.AccessRemoteRead)
		_, _ = mem.Local(rw.LKey(), va+300, 64, 0)
	})
	assert.Zero(t, allocs, "memory lookups do not allocate")
}

func TestDeregAndInvalidate(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	pd2, _ := d.AllocPD()
	buf := make([]byte, 64)
	m, err := d.RegMR(pd, buf, rwAll)
	require.NoError(t, err)
	mem := &pd.mem

	// PD with a region cannot go.
	assert.ErrorIs(t, d.DeallocPD(pd), ErrBusy)

	// Invalidation: wrong key byte, other PD, then the real key.
	assert.ErrorIs(t, mem.Invalidate(m.RKey()^0x80, true), qp.ErrBadKey)
	assert.ErrorIs(t, pd2.mem.Invalidate(m.RKey(), true), qp.ErrBadKey)
	assert.ErrorIs(t, mem.Invalidate(0, false), qp.ErrBadKey)
	require.NoError(t, mem.Invalidate(m.RKey(), true))
	assert.False(t, m.Valid())
	_, err = mem.Remote(m.RKey(), m.Addr(), 1, qp.AccessRemoteRead)
	assert.ErrorIs(t, err, qp.ErrBadKey, "invalidated region refuses its rkey")
	_, err = mem.Local(m.LKey(), m.Addr(), 1, 0)
	assert.ErrorIs(t, err, qp.ErrBadKey, "and its lkey")
	require.NoError(t, mem.Invalidate(m.LKey(), false), "invalidating twice succeeds, as rxe")

	// A region without remote access can be invalidated only locally.
	l, err := d.RegMR(pd, buf, qp.AccessLocalWrite)
	require.NoError(t, err)
	assert.ErrorIs(t, mem.Invalidate(l.LKey(), true), qp.ErrBadKey)
	require.NoError(t, mem.Invalidate(l.LKey(), false))

	// Deregistration.
	require.NoError(t, d.DeregMR(m))
	assert.ErrorIs(t, d.DeregMR(m), ErrDestroyed)
	assert.ErrorIs(t, mem.Invalidate(m.RKey(), true), qp.ErrBadKey)
	require.NoError(t, d.DeregMR(l))
	k, err := d.RegMR(pd, buf, rwAll)
	require.NoError(t, err)
	_, err = mem.Remote(m.RKey(), m.Addr(), 1, qp.AccessRemoteRead)
	assert.ErrorIs(t, err, qp.ErrBadKey, "deregistered key stays dead")
	_, err = mem.Remote(k.RKey(), k.Addr(), 1, qp.AccessRemoteRead)
	require.NoError(t, err)
	require.NoError(t, d.DeregMR(k))
	require.NoError(t, d.DeallocPD(pd))
	assert.ErrorIs(t, d.DeallocPD(pd), ErrDestroyed)
}

func TestRegMRIOVA(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	buf := make([]byte, 100)
	buf[10] = 42
	m, err := d.RegMRIOVA(pd, buf, 0x10000, rwAll)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x10000), m.Addr())
	b, err := pd.mem.Remote(m.RKey(), 0x10000+10, 1, qp.AccessRemoteRead)
	require.NoError(t, err)
	assert.Equal(t, byte(42), b[0])
	_, err = pd.mem.Remote(m.RKey(), 0x10000+100, 1, qp.AccessRemoteRead)
	assert.ErrorIs(t, err, qp.ErrBounds)
	_, err = pd.mem.Remote(m.RKey(), 0xFFFF, 1, qp.AccessRemoteRead)
	assert.ErrorIs(t, err, qp.ErrBounds)
	_, err = d.RegMRIOVA(pd, buf, ^uint64(0)-10, 0)
	assert.ErrorIs(t, err, ErrInvalid, "region would wrap the address space")
}
