package rxe

import (
	"fmt"
	"unsafe"

	"github.com/softroce/softroce/qp"
)

// MR indexes, as rxe's pool: 1 .. 2^19-1 (the MW range follows it in rxe).
const (
	minMRIndex = 1
	maxMRIndex = MaxMR
)

// Access bits RegMR understands. Optional bits (IBV_ACCESS_OPTIONAL_RANGE,
// bit 20 and up, such as RELAXED_ORDERING) are accepted and ignored, as
// providers may.
const (
	mrAccessMask   = qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic | qp.AccessMWBind
	accessOptional = qp.Access(0x3ff << 20)
)

// mrSlot is an entry of the MR table: the region at that index, if any, and
// the key byte the index was last registered with (-1: never).
type mrSlot struct {
	mr      *MR
	lastKey int16
}

// MR is a memory region: a Go byte slice registered for local and remote
// access. Its address is the address of the slice's first byte, so that the
// addresses applications exchange look like a real NIC's; the slice keeps
// the memory alive and in place (Go's heap does not move objects).
type MR struct {
	d      *Device
	pd     *PD
	buf    []byte
	va     uint64
	index  uint32
	lkey   uint32
	rkey   uint32 // 0 without remote access, as rxe
	access qp.Access
	valid  bool // false after invalidation
	dead   bool
	handle uint32
	numMW  int // windows bound to the region
}

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key, 0 when the region allows no remote access.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the region's virtual address: the address of its first byte.
func (m *MR) Addr() uint64 { return m.va }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Access returns the access flags the region was registered with.
func (m *MR) Access() qp.Access { return m.access }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// PD returns the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// Handle returns the MR's handle, unique among the device's objects.
func (m *MR) Handle() uint32 { return m.handle }

// Valid reports whether the region is usable (registered and not
// invalidated).
func (m *MR) Valid() bool {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	return m.valid && !m.dead
}

// RegMR registers buf in pd (ibv_reg_mr). Remote write and remote atomic
// access require local write, as verbs does. The keys are
// (index << 8) | a random key byte that differs from the index's previous
// key, so a stale key does not reach a new registration.
func (d *Device) RegMR(pd *PD, buf []byte, access qp.Access) (*MR, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	access, err := checkMR(buf, access)
	if err != nil {
		return nil, fmt.Errorf("reg mr in pd %d: %w", pd.handle, err)
	}
	index, err := d.allocMRIndex()
	if err != nil {
		return nil, fmt.Errorf("reg mr in pd %d: %w", pd.handle, err)
	}
	m := &MR{
		d: d, pd: pd, buf: buf, va: uint64(uintptr(unsafe.Pointer(&buf[0]))),
		index: index, access: access, valid: true, handle: d.nextHandle(),
	}
	m.lkey = index<<8 | uint32(d.keyByte(index))
	m.rkey = remoteKey(m.lkey, access)
	d.mrs[index].mr = m
	d.mrCount++
	pd.users++
	return m, nil
}

// checkMR checks a registration's buffer and access flags and returns the
// access the region keeps (optional flags dropped, as a provider may).
func checkMR(buf []byte, access qp.Access) (qp.Access, error) {
	if len(buf) == 0 {
		return 0, fmt.Errorf("empty buffer: %w", ErrInvalid)
	}
	if bad := access &^ (mrAccessMask | accessOptional); bad != 0 {
		return 0, fmt.Errorf("unsupported access flags %#x: %w", uint32(bad), ErrInvalid)
	}
	access &= mrAccessMask
	if access&(qp.AccessRemoteWrite|qp.AccessRemoteAtomic) != 0 && access&qp.AccessLocalWrite == 0 {
		return 0, fmt.Errorf("remote write or atomic access needs local write: %w", ErrInvalid)
	}
	return access, nil
}

// remoteKey is the rkey a region with access has: its lkey with any remote
// access, else 0 (rxe hands out the lkey either way; the device refuses it).
func remoteKey(lkey uint32, access qp.Access) uint32 {
	if access&(qp.AccessRemoteWrite|qp.AccessRemoteRead|qp.AccessRemoteAtomic) != 0 {
		return lkey
	}
	return 0
}

// keyByte draws a random key byte different from the last one used at index.
func (d *Device) keyByte(index uint32) uint8 { return d.drawKey(&d.mrs[index].lastKey) }

// drawKey draws a random key byte different from *last (-1: none) and
// records it there.
func (d *Device) drawKey(last *int16) uint8 {
	for {
		b := uint8(d.keys.Uint64())
		if int16(b) != *last {
			*last = int16(b)
			return b
		}
	}
}

// allocMRIndex finds a free MR index, cyclically from the last one given out,
// as rxe's pool allocates. Called with mu held.
func (d *Device) allocMRIndex() (uint32, error) {
	if d.mrCount >= maxMRIndex-minMRIndex+1 {
		return 0, ErrLimit
	}
	for {
		i := d.mrNext
		d.mrNext++
		if d.mrNext > maxMRIndex {
			d.mrNext = minMRIndex
		}
		for int(i) >= len(d.mrs) {
			d.mrs = append(d.mrs, mrSlot{lastKey: -1})
		}
		if d.mrs[i].mr == nil {
			return i, nil
		}
	}
}

// DeregMR deregisters a memory region (ibv_dereg_mr). Its keys stop working
// at once; packets already built from it are unaffected. It fails with
// ErrBusy while memory windows are bound to the region.
func (d *Device) DeregMR(m *MR) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case m == nil:
		return fmt.Errorf("dereg mr: nil: %w", ErrInvalid)
	case m.d != d:
		return fmt.Errorf("dereg mr %#x: %w", m.lkey, ErrWrongDevice)
	case m.dead:
		return fmt.Errorf("dereg mr %#x: %w", m.lkey, ErrDestroyed)
	case m.numMW > 0:
		// IBTA 10.6.7.2.6; rxe refuses with EINVAL.
		return fmt.Errorf("dereg mr %#x: %d memory windows bound to it: %w", m.lkey, m.numMW, ErrBusy)
	}
	m.dead, m.valid = true, false
	d.mrs[m.index].mr = nil
	d.mrCount--
	m.pd.users--
	return nil
}

// memory implements qp.Memory for one protection domain, as one QP sees it,
// over the device's MR and MW tables. Its methods run with mu held (the
// engine is only called under it) and do not allocate.
type memory struct {
	d  *Device
	pd *PD
	qp *QP // nil for the PD's own view (no type 2 window is bound to it)
}

var _ qp.Memory = (*memory)(nil)

// lookup returns the valid region in this PD whose key is key, checking the
// key byte against the local or remote key, or nil.
func (m *memory) lookup(key uint32, remote bool) *MR {
	i := key >> 8
	if i == 0 || int(i) >= len(m.d.mrs) {
		return nil
	}
	r := m.d.mrs[i].mr
	if r == nil || r.pd != m.pd || !r.valid {
		return nil
	}
	if remote {
		if r.rkey == 0 || r.rkey != key {
			return nil
		}
	} else if r.lkey != key {
		return nil
	}
	return r
}

// slice checks access and bounds and returns the bytes. The bounds test
// cannot overflow: off <= len, then length <= len - off.
func (r *MR) slice(va uint64, length uint32, access qp.Access) ([]byte, error) {
	if access&^r.access != 0 {
		return nil, qp.ErrAccess
	}
	n := uint64(len(r.buf))
	if va < r.va {
		return nil, qp.ErrBounds
	}
	off := va - r.va
	if off > n || uint64(length) > n-off {
		return nil, qp.ErrBounds
	}
	return r.buf[off : off+uint64(length) : off+uint64(length)], nil
}

// Local resolves an lkey for a local access (0 to read, AccessLocalWrite to
// write).
func (m *memory) Local(lkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	r := m.lookup(lkey, false)
	if r == nil {
		return nil, qp.ErrBadKey
	}
	return r.slice(va, length, access)
}

// Remote resolves an rkey, a region's or a window's, for a remote access.
func (m *memory) Remote(rkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	if isMWKey(rkey) {
		return m.remoteMW(rkey, va, length, access)
	}
	r := m.lookup(rkey, true)
	if r == nil {
		return nil, qp.ErrBadKey
	}
	return r.slice(va, length, access)
}

// Invalidate invalidates the region key names: its rkey for SEND_WITH_INV
// (remote), its lkey or rkey for LOCAL_INV. Any region of the PD may be
// invalidated (rxe allows only fast-registration MRs; softroce has none, so
// it lets user regions be invalidated instead). An invalidated region stays
// registered but refuses every key until it is deregistered. Invalidating an
// already invalid region succeeds, as in rxe; invalidating one with windows
// bound fails, as in rxe. A window key invalidates a type 2 window.
func (m *memory) Invalidate(key uint32, remote bool) error {
	if isMWKey(key) {
		return m.invalidateMW(key)
	}
	i := key >> 8
	if i == 0 || int(i) >= len(m.d.mrs) {
		return qp.ErrBadKey
	}
	r := m.d.mrs[i].mr
	if r == nil || r.pd != m.pd {
		return qp.ErrBadKey
	}
	if remote && (r.rkey == 0 || r.rkey != key) || !remote && r.lkey != key && (r.rkey == 0 || r.rkey != key) {
		return qp.ErrBadKey
	}
	if r.numMW > 0 {
		return qp.ErrAccess
	}
	r.valid = false
	return nil
}

// Load copies len(dst) bytes of the region from offset off under the
// device lock, which the data path holds while it writes memory: the copy
// sees every remote WRITE, atomic and received SEND the device finished
// before the call, and none half done. It is how a program waits for a
// peer's WRITE without a completion (perftest's latency loops spin on the
// last byte) without racing with the device.
func (m *MR) Load(dst []byte, off int) error {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	if off < 0 || off > len(m.buf) || len(dst) > len(m.buf)-off {
		return fmt.Errorf("load %d bytes at offset %d of mr %#x (%d bytes): %w", len(dst), off, m.lkey, len(m.buf), ErrInvalid)
	}
	copy(dst, m.buf[off:])
	return nil
}
