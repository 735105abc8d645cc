package qp

import "fmt"

// fakeMemory is a Memory for package-internal tests: regions named by one
// key (lkey == rkey) over caller-owned byte slices, with access flags and
// invalidation. Reading is always allowed; writes and remote access need
// the matching flag.
type fakeMemory struct {
	regions map[uint32]*fakeMR
	// Invalidated lists the keys Invalidate was called with, in order.
	Invalidated []uint32
	// Bound lists the BIND_MW requests BindMW executed, in order.
	Bound []BindMW
}

type fakeMR struct {
	va      uint64
	buf     []byte
	access  Access
	invalid bool
}

func newFakeMemory() *fakeMemory { return &fakeMemory{regions: map[uint32]*fakeMR{}} }

// Register makes buf the region named key, at virtual address 0.
func (m *fakeMemory) Register(key uint32, buf []byte, access Access) {
	m.RegisterAt(key, 0, buf, access)
}

// RegisterAt makes buf the region named key, starting at virtual address va.
func (m *fakeMemory) RegisterAt(key uint32, va uint64, buf []byte, access Access) {
	m.regions[key] = &fakeMR{va: va, buf: buf, access: access}
}

func (m *fakeMemory) lookup(key uint32, va uint64, length uint32, need Access) ([]byte, error) {
	r, ok := m.regions[key]
	if !ok || r.invalid {
		return nil, fmt.Errorf("key %#x: %w", key, ErrBadKey)
	}
	if va < r.va || va-r.va > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-(va-r.va) {
		return nil, fmt.Errorf("key %#x [%#x,+%d): %w", key, va, length, ErrBounds)
	}
	if r.access&need != need {
		return nil, fmt.Errorf("key %#x needs %#x: %w", key, need, ErrAccess)
	}
	off := va - r.va
	return r.buf[off : off+uint64(length) : off+uint64(length)], nil
}

func (m *fakeMemory) Local(lkey uint32, va uint64, length uint32, access Access) ([]byte, error) {
	return m.lookup(lkey, va, length, access)
}

func (m *fakeMemory) Remote(rkey uint32, va uint64, length uint32, access Access) ([]byte, error) {
	return m.lookup(rkey, va, length, access)
}

func (m *fakeMemory) Invalidate(key uint32, remote bool) error {
	r, ok := m.regions[key]
	if !ok || r.invalid {
		return fmt.Errorf("invalidate key %#x: %w", key, ErrBadKey)
	}
	r.invalid = true
	m.Invalidated = append(m.Invalidated, key)
	return nil
}

// BindMW records the bind; a window key of 0 names no window and fails.
func (m *fakeMemory) BindMW(b *BindMW) error {
	if b.MWRKey == 0 {
		return fmt.Errorf("bind mw: %w", ErrBadKey)
	}
	m.Bound = append(m.Bound, *b)
	return nil
}
