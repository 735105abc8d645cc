package qp_test

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// fakeRegion is one registered buffer; its key serves as lkey and rkey.
type fakeRegion struct {
	va     uint64
	buf    []byte
	access qp.Access
	valid  bool
}

// fakeMem is a protection domain of fake memory regions, the qp.Memory a
// test endpoint hands its QP.
type fakeMem struct {
	regions map[uint32]*fakeRegion
}

func newFakeMem() *fakeMem { return &fakeMem{regions: map[uint32]*fakeRegion{}} }

// Register makes buf reachable as [va, va+len(buf)) under key.
func (m *fakeMem) Register(key uint32, va uint64, buf []byte, access qp.Access) {
	m.regions[key] = &fakeRegion{va: va, buf: buf, access: access, valid: true}
}

func (m *fakeMem) lookup(key uint32, va uint64, length uint32) ([]byte, *fakeRegion, error) {
	r, ok := m.regions[key]
	if !ok || !r.valid {
		return nil, nil, fmt.Errorf("key %#x: %w", key, qp.ErrBadKey)
	}
	if va < r.va || va-r.va > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-(va-r.va) {
		return nil, nil, fmt.Errorf("key %#x [%#x,+%d): %w", key, va, length, qp.ErrBounds)
	}
	off := va - r.va
	return r.buf[off : off+uint64(length)], r, nil
}

func (m *fakeMem) Local(lkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	b, r, err := m.lookup(lkey, va, length)
	if err != nil {
		return nil, err
	}
	if r.access&access != access {
		return nil, fmt.Errorf("lkey %#x: %w", lkey, qp.ErrAccess)
	}
	return b, nil
}

func (m *fakeMem) Remote(rkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	b, r, err := m.lookup(rkey, va, length)
	if err != nil {
		return nil, err
	}
	if r.access&access != access {
		return nil, fmt.Errorf("rkey %#x: %w", rkey, qp.ErrAccess)
	}
	return b, nil
}

func (m *fakeMem) Invalidate(key uint32, remote bool) error {
	r, ok := m.regions[key]
	if !ok || !r.valid {
		return fmt.Errorf("invalidate %#x: %w", key, qp.ErrBadKey)
	}
	r.valid = false
	return nil
}

// BindMW fails: the harness's memory has no windows (package rxe tests
// them end to end).
func (m *fakeMem) BindMW(b *qp.BindMW) error {
	return fmt.Errorf("bind mw %#x: %w", b.MWRKey, qp.ErrBadKey)
}

// ---------------------------------------------------------------------------
// Endpoints

// Memory layout every endpoint registers: one local buffer (lkey localKey)
// and one remotely accessible buffer (rkey remoteKey), both large enough for
// the randomized workloads.
const (
	localKey   uint32 = 0x100
	remoteKey  uint32 = 0x200
	roKey      uint32 = 0x300 // remote read only
	localVA    uint64 = 0x10_0000
	remoteVA   uint64 = 0x80_0000
	roVA       uint64 = 0xC0_0000
	bufSize           = 1 << 18
	allRemote         = qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
	defaultCQN        = 1 << 14
)
