package verbsapi

import (
	"fmt"
	"sync/atomic"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
)

// MWType is enum ibv_mw_type.
type MWType = rxe.MWType

// Memory window types.
const (
	// MWType1 windows are bound with QP.BindMW (ibv_bind_mw) and usable by
	// every QP of their PD.
	MWType1 = rxe.MWType1
	// MWType2 windows (2B) are bound by BIND_MW work requests (MW.BindWR)
	// to the QP that posts them, which alone may use them; LOCAL_INV and
	// SEND_WITH_INV invalidate them.
	MWType2 = rxe.MWType2
)

// Memory window opcodes, statuses and access flags.
const (
	WRBindMW        = qp.WRBindMW        // IBV_WR_BIND_MW
	WCBindMW        = qp.WCBindMW        // IBV_WC_BIND_MW
	WCMWBindErr     = qp.WCMWBindErr     // IBV_WC_MW_BIND_ERR
	AccessMWBind    = qp.AccessMWBind    // IBV_ACCESS_MW_BIND: windows may be bound to the region
	AccessZeroBased = qp.AccessZeroBased // IBV_ACCESS_ZERO_BASED: window addresses start at 0
)

// BindMWInfo is the bind_mw part of a SendWR (SendWR.BindMW), with the
// window and the region named by key; MW.BindWR fills it from objects.
type BindMWInfo = qp.BindMW

// MW is a memory window (struct ibv_mw): a range of a memory region with
// its own rkey and access rights, bound and revoked without touching the
// region's keys.
type MW struct {
	pd *PD
	mw *rxe.MW
	// rkey is ibv_mw's rkey: the window's rkey as the caller knows it,
	// which QP.BindMW advances when it posts a bind (the device's key
	// changes when the bind runs).
	rkey atomic.Uint32
}

// AllocMW creates a memory window of type t in the PD (ibv_alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	c := pd.ctx
	c.mu.Lock()
	err := c.check("alloc mw")
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m, err := c.dev.AllocMW(pd.pd, t)
	if err != nil {
		return nil, err
	}
	w := &MW{pd: pd, mw: m}
	w.rkey.Store(m.RKey())
	c.mu.Lock()
	c.mws[w] = struct{}{}
	c.mu.Unlock()
	return w, nil
}

// RKey returns the window's rkey as ibv_mw's rkey field holds it: the key
// at allocation, then the one each QP.BindMW asked for. A type 2 window's
// key is the RKey of the BIND_MW work request that bound it (see IncRKey).
func (w *MW) RKey() uint32 { return w.rkey.Load() }

// Type returns the window's type.
func (w *MW) Type() MWType { return w.mw.Type() }

// Handle returns the window's handle.
func (w *MW) Handle() uint32 { return w.mw.Handle() }

// PD returns the window's protection domain.
func (w *MW) PD() *PD { return w.pd }

// Dealloc destroys the window (ibv_dealloc_mw), bound or not: its rkey
// stops working at once and its region may be deregistered.
func (w *MW) Dealloc() error {
	c := w.pd.ctx
	if err := c.dev.DeallocMW(w.mw); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.mws, w)
	c.mu.Unlock()
	return nil
}

// IncRKey returns rkey with its key byte (the low 8 bits) incremented
// (ibv_inc_rkey): the rkey a bind usually gives a window.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// MWBindInfo is struct ibv_mw_bind_info: the range of a region a window
// covers and the access it grants. A nil MR with a zero Addr and Length
// unbinds a type 1 window.
type MWBindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	// MWAccessFlags are the remote access flags the window grants (with
	// AccessLocalWrite, and AccessZeroBased for type 2 windows).
	MWAccessFlags Access
}

// MWBind is struct ibv_mw_bind: a type 1 bind request for QP.BindMW.
type MWBind struct {
	WRID      uint64
	SendFlags SendFlags
	BindInfo  MWBindInfo
}

// BindWR returns a BIND_MW work request that binds the window to info with
// the new rkey (usually IncRKey(w.RKey())), as ibv_wr_bind_mw or a
// struct ibv_send_wr with opcode IBV_WR_BIND_MW: type 2 windows are bound
// this way, with QP.PostSend. The bind runs in send-queue order and
// completes with WCBindMW, or WCMWBindErr when the device refuses it.
func (w *MW) BindWR(wrID uint64, flags SendFlags, rkey uint32, info MWBindInfo) SendWR {
	wr := SendWR{ID: wrID, Opcode: WRBindMW, Flags: flags, BindMW: BindMWInfo{
		MWRKey: w.RKey(), RKey: rkey,
		BindInfo: qp.MWBindInfo{Addr: info.Addr, Length: info.Length, MWAccessFlags: info.MWAccessFlags},
	}}
	if info.MR != nil {
		wr.BindMW.BindInfo.MRLKey = info.MR.LKey()
	}
	return wr
}

// BindMW binds a type 1 window (ibv_bind_mw): it posts a BIND_MW work
// request with the window's next rkey, IncRKey(mw.RKey()), and on success
// gives the window that rkey at once, as rdma-core does; the bind itself
// runs in send-queue order, and completes with WCBindMW (when signaled) or
// WCMWBindErr, in which case the caller should restore the old rkey. A
// zero-length bind with a nil MR unbinds the window.
func (q *QP) BindMW(mw *MW, bind *MWBind) error {
	info := &bind.BindInfo
	switch {
	case mw.Type() != MWType1:
		return fmt.Errorf("bind mw %#x on qp %d: %s window: %w", mw.RKey(), q.QPN(), mw.Type(), ErrInvalid)
	case info.MR == nil && (info.Addr != 0 || info.Length != 0):
		return fmt.Errorf("bind mw %#x on qp %d: a range without a region: %w", mw.RKey(), q.QPN(), ErrInvalid)
	case info.MR != nil && info.MR.pd != mw.pd:
		return fmt.Errorf("bind mw %#x on qp %d: region in another pd: %w", mw.RKey(), q.QPN(), ErrInvalid)
	case info.MWAccessFlags&AccessZeroBased != 0:
		return fmt.Errorf("bind mw %#x on qp %d: zero-based type 1 window: %w", mw.RKey(), q.QPN(), ErrInvalid)
	}
	rkey := IncRKey(mw.RKey())
	wr := mw.BindWR(bind.WRID, bind.SendFlags, rkey, *info)
	if err := q.qp.PostSend(&wr); err != nil {
		return err
	}
	mw.rkey.Store(rkey)
	return nil
}
