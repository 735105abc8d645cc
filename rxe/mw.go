package rxe

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// MW indexes follow the MR range, as rxe's pools: 2^19+1 .. 2^20, so the
// index of an rkey tells a window from a region (rxe's rkey_is_mw).
const (
	minMWIndex = maxMRIndex + 2
	maxMWIndex = 1 << 20
	// MaxMW is how many windows the device holds (rxe's max_mw).
	MaxMW = 1<<19 - 1
)

// MWType is a memory window type (enum ibv_mw_type).
type MWType uint8

// Memory window types: rxe implements type 1 and type 2B.
const (
	// MWType1 windows belong to a PD and are bound by ibv_bind_mw (a
	// BIND_MW work request the verbs layer posts for the caller).
	MWType1 MWType = 1
	// MWType2 windows (2B) are bound by BIND_MW work requests to one QP,
	// which alone may use them, and are invalidated by LOCAL_INV or
	// SEND_WITH_INV.
	MWType2 MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// mwState is rxe's rxe_mw_state: a type 2 window is free until bound and
// again once invalidated; a type 1 window is valid from allocation (its
// zero length makes it unusable until bound).
type mwState uint8

const (
	mwInvalid mwState = iota // deallocated
	mwFree
	mwValid
)

// mwAccessMask is the access a window may grant (rxe's
// RXE_ACCESS_SUPPORTED_MW): the region's flags plus zero-based addressing.
const mwAccessMask = mrAccessMask | qp.AccessMWBind | qp.AccessZeroBased | accessOptional

// mwSlot is an entry of the MW table, as mrSlot.
type mwSlot struct {
	mw      *MW
	lastKey int16
}

// MW is a memory window: a range of a memory region, with its own rkey and
// access rights, that a remote peer may be given without the region's key.
type MW struct {
	d      *Device
	pd     *PD
	typ    MWType
	index  uint32
	handle uint32

	// Under d.mu.
	rkey   uint32
	state  mwState
	mr     *MR // bound region, nil when the length is 0
	qp     *QP // type 2: the QP it is bound to
	addr   uint64
	length uint64
	access qp.Access
}

// RKey returns the window's current rkey: what the responder accepts.
func (w *MW) RKey() uint32 {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.rkey
}

// Type returns the window's type.
func (w *MW) Type() MWType { return w.typ }

// PD returns the window's protection domain.
func (w *MW) PD() *PD { return w.pd }

// Handle returns the MW's handle, unique among the device's objects.
func (w *MW) Handle() uint32 { return w.handle }

// MWBinding describes what a window is bound to.
type MWBinding struct {
	MR     *MR // nil when unbound
	QPN    uint32
	Addr   uint64
	Length uint64
	Access qp.Access
}

// Binding returns what the window is bound to (the zero MWBinding when it
// is not), for listings and tests.
func (w *MW) Binding() MWBinding {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.state != mwValid || w.length == 0 {
		return MWBinding{}
	}
	b := MWBinding{MR: w.mr, Addr: w.addr, Length: w.length, Access: w.access}
	if w.qp != nil {
		b.QPN = w.qp.qpn
	}
	return b
}

// AllocMW creates a memory window in pd (ibv_alloc_mw). Its rkey is
// (index << 8) | a random key byte, as a region's keys.
func (d *Device) AllocMW(pd *PD, typ MWType) (*MW, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("alloc mw in pd %d: %s: %w", pd.handle, typ, ErrInvalid)
	}
	if d.mwCount >= MaxMW {
		return nil, fmt.Errorf("alloc %s mw in pd %d: %w", typ, pd.handle, ErrLimit)
	}
	index := d.allocMWIndex()
	w := &MW{d: d, pd: pd, typ: typ, index: index, handle: d.nextHandle(), state: mwFree}
	if typ == MWType1 {
		w.state = mwValid
	}
	slot := d.mwSlot(index)
	w.rkey = index<<8 | uint32(d.drawKey(&slot.lastKey))
	slot.mw = w
	d.mwCount++
	pd.users++
	return w, nil
}

// mwSlot returns the table entry of a window index, growing the table.
// Called with mu held.
func (d *Device) mwSlot(index uint32) *mwSlot {
	i := int(index - minMWIndex)
	for i >= len(d.mws) {
		d.mws = append(d.mws, mwSlot{lastKey: -1})
	}
	return &d.mws[i]
}

// allocMWIndex finds a free MW index, cyclically as allocMRIndex. Called
// with mu held and fewer than MaxMW windows allocated.
func (d *Device) allocMWIndex() uint32 {
	if d.mwNext < minMWIndex {
		d.mwNext = minMWIndex
	}
	for {
		i := d.mwNext
		d.mwNext++
		if d.mwNext > maxMWIndex {
			d.mwNext = minMWIndex
		}
		if d.mwSlot(i).mw == nil {
			return i
		}
	}
}

// DeallocMW destroys a window (ibv_dealloc_mw), bound or not: its rkey stops
// working at once and its region is released.
func (d *Device) DeallocMW(w *MW) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case w == nil:
		return fmt.Errorf("dealloc mw: nil: %w", ErrInvalid)
	case w.d != d:
		return fmt.Errorf("dealloc mw %#x: %w", w.rkey, ErrWrongDevice)
	case w.state == mwInvalid:
		return fmt.Errorf("dealloc mw %#x: %w", w.rkey, ErrDestroyed)
	}
	w.unbind()
	w.state = mwInvalid
	d.mwSlot(w.index).mw = nil
	d.mwCount--
	w.pd.users--
	return nil
}

// unbind releases the window's region and QP. Called with mu held.
func (w *MW) unbind() {
	if w.mr != nil {
		w.mr.numMW--
		w.mr = nil
	}
	w.qp = nil
	w.addr, w.length, w.access = 0, 0, 0
}

// isMWKey reports whether key's index is in the window range.
func isMWKey(key uint32) bool { return key>>8 >= minMWIndex }

// window returns the live window whose rkey is key, or nil. Called with mu
// held.
func (d *Device) window(key uint32) *MW {
	i := int(key>>8) - minMWIndex
	if i < 0 || i >= len(d.mws) {
		return nil
	}
	w := d.mws[i].mw
	if w == nil || w.rkey != key {
		return nil
	}
	return w
}

// BindMW executes a BIND_MW work request for the QP this memory belongs to,
// with rxe's checks (rxe_check_bind_mw, citing IBTA): the window, the QP and
// the region share the PD; a type 1 window is not zero-based; a type 2
// window must be free (o10-37.2.30) and bound with a region and a non-zero
// length (o10-37.2.40); the region allows binding (C10-73), local write when
// the window grants remote write or atomic access (C10-74), and contains the
// window (C10-75; a zero-based window too: its Addr is where it starts in
// the region, where rxe checks only its length). The new rkey keeps the window's index and takes the key
// byte of b.RKey.
func (m *memory) BindMW(b *qp.BindMW) error {
	w := m.d.window(b.MWRKey)
	if w == nil || w.pd != m.pd {
		return fmt.Errorf("bind mw %#x: %w", b.MWRKey, qp.ErrBadKey)
	}
	info := &b.BindInfo
	access := info.MWAccessFlags
	if access&^mwAccessMask != 0 {
		return fmt.Errorf("bind mw %#x: access %#x: %w", b.MWRKey, uint32(access), qp.ErrAccess)
	}
	var mr *MR
	if info.Length > 0 {
		mr = m.lookup(info.MRLKey, false)
		if mr == nil {
			return fmt.Errorf("bind mw %#x to mr %#x: %w", b.MWRKey, info.MRLKey, qp.ErrBadKey)
		}
	}
	switch w.typ {
	case MWType1:
		if w.state != mwValid || access&qp.AccessZeroBased != 0 {
			return fmt.Errorf("bind type 1 mw %#x: %w", b.MWRKey, qp.ErrAccess)
		}
	case MWType2:
		if w.state != mwFree || mr == nil || m.qp == nil {
			return fmt.Errorf("bind type 2 mw %#x: not free, or no region or qp: %w", b.MWRKey, qp.ErrAccess)
		}
	}
	if mr != nil {
		if err := mr.checkBind(info); err != nil {
			return fmt.Errorf("bind mw %#x to mr %#x: %w", b.MWRKey, info.MRLKey, err)
		}
	}
	w.unbind()
	w.rkey = w.index<<8 | b.RKey&0xff
	w.slotKey(uint8(b.RKey))
	w.state = mwValid
	w.access = access
	w.addr, w.length = info.Addr, info.Length
	if mr != nil {
		w.mr = mr
		mr.numMW++
	}
	if w.typ == MWType2 {
		w.qp = m.qp
	}
	return nil
}

// slotKey records the key byte a bind gave the window, so that a window
// later allocated at the index draws a different one.
func (w *MW) slotKey(b uint8) { w.d.mwSlot(w.index).lastKey = int16(b) }

// checkBind checks that a window described by info may be bound to r.
func (r *MR) checkBind(info *qp.MWBindInfo) error {
	access := info.MWAccessFlags
	if r.access&qp.AccessMWBind == 0 {
		return fmt.Errorf("region without bind access: %w", qp.ErrAccess)
	}
	if access&(qp.AccessRemoteWrite|qp.AccessRemoteAtomic) != 0 && r.access&qp.AccessLocalWrite == 0 {
		return fmt.Errorf("writable window on a region without local write: %w", qp.ErrAccess)
	}
	n := uint64(len(r.buf))
	if info.Addr < r.va || info.Addr-r.va > n || info.Length > n-(info.Addr-r.va) {
		return fmt.Errorf("window [%#x,+%d) outside the region: %w", info.Addr, info.Length, qp.ErrBounds)
	}
	return nil
}

// remoteMW resolves a remote access through a window, as rxe's
// rxe_lookup_mw: the window is valid, in this PD, bound (with a non-zero
// length, to this QP for type 2) and grants the access; its region is still
// valid. Unlike rxe, which checks the range against the whole region, the
// range must lie inside the window (IBTA 10.6.7.2). A zero-based window's
// addresses are offsets from its start (rxe adds the window's address).
func (m *memory) remoteMW(rkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	w := m.d.window(rkey)
	if w == nil || w.pd != m.pd || w.state != mwValid || w.length == 0 || w.mr == nil || !w.mr.valid ||
		w.typ == MWType2 && w.qp != m.qp {
		return nil, qp.ErrBadKey
	}
	if access&^w.access != 0 {
		return nil, qp.ErrAccess
	}
	off := va
	if w.access&qp.AccessZeroBased == 0 {
		if va < w.addr {
			return nil, qp.ErrBounds
		}
		off = va - w.addr
	}
	if off > w.length || uint64(length) > w.length-off {
		return nil, qp.ErrBounds
	}
	// Bind checked that the window lies in the region.
	r := w.mr
	start := w.addr - r.va + off
	return r.buf[start : start+uint64(length) : start+uint64(length)], nil
}

// invalidateMW invalidates a type 2 window (LOCAL_INV, SEND_WITH_INV), as
// rxe's rxe_invalidate_mw: type 1 windows cannot be invalidated
// (o10-37.2.26); the window returns to the free state, its region released.
// Invalidating a free window fails (rxe assumes it has a region).
func (m *memory) invalidateMW(key uint32) error {
	w := m.d.window(key)
	if w == nil || w.pd != m.pd || w.typ != MWType2 || w.state != mwValid {
		return qp.ErrBadKey
	}
	w.unbind()
	w.state = mwFree
	return nil
}
