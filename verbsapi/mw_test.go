package verbsapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/rxe"
)

// bindHost gives b a region that remote peers reach only through windows,
// and a window of type t over it.
func bindHost(t *testing.T, b *testHost, typ MWType) (*MR, *MW) {
	t.Helper()
	mr, err := b.pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessMWBind)
	require.NoError(t, err)
	mw, err := b.pd.AllocMW(typ)
	require.NoError(t, err)
	assert.Equal(t, typ, mw.Type())
	assert.Equal(t, b.pd, mw.PD())
	return mr, mw
}

// TestMWBindAndAccess: a type 1 window bound with QP.BindMW and a type 2
// window bound with a BIND_MW work request let the peer write inside the
// window under the window's new rkey; outside it the write fails with a
// remote access error.
func TestMWBindAndAccess(t *testing.T) {
	const off, length = 512, 1024
	cases := []struct {
		name string
		typ  MWType
		bind func(t *testing.T, b *testHost, mw *MW, info MWBindInfo) uint32
	}{
		{"type 1 ibv_bind_mw", MWType1, func(t *testing.T, b *testHost, mw *MW, info MWBindInfo) uint32 {
			old := mw.RKey()
			require.NoError(t, b.qp.BindMW(mw, &MWBind{WRID: 7, SendFlags: SendSignaled, BindInfo: info}))
			assert.Equal(t, IncRKey(old), mw.RKey(), "the window's rkey advances at post time")
			return mw.RKey()
		}},
		{"type 2 BIND_MW work request", MWType2, func(t *testing.T, b *testHost, mw *MW, info MWBindInfo) uint32 {
			rkey := IncRKey(mw.RKey())
			wr := mw.BindWR(7, SendSignaled, rkey, info)
			require.NoError(t, b.qp.PostSend(&wr))
			return rkey
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := connectedHosts(t, hostOpts{}, hostOpts{})
			mr, mw := bindHost(t, b, c.typ)
			rkey := c.bind(t, b, mw, MWBindInfo{MR: mr, Addr: mr.Addr() + off, Length: length,
				MWAccessFlags: AccessLocalWrite | AccessRemoteWrite})
			wc := next(t, b.scq)
			require.Equal(t, WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, WCBindMW, wc.Opcode)
			assert.Equal(t, uint64(7), wc.ID)

			src := a.mr.Bytes()[:length]
			for i := range src {
				src[i] = byte(i * 7)
			}
			write := func(id uint64, va uint64, n int) WC {
				require.NoError(t, a.qp.PostSend(&SendWR{ID: id, Opcode: WRWrite, Flags: SendSignaled,
					SGL: []SGE{a.mr.SGE(0, n)}, RemoteAddr: va, RKey: rkey}))
				return next(t, a.scq)
			}
			wc = write(1, mr.Addr()+off, length)
			require.Equal(t, WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, src, mr.Bytes()[off:off+length])
			wc = write(2, mr.Addr()+off+length-8, 16)
			assert.Equal(t, WCRemAccessErr, wc.Status, wc.Status.String())
		})
	}
}

// TestBindMWChecks: QP.BindMW refuses what ibv_bind_mw and rdma-core's rxe
// provider refuse before posting anything.
func TestBindMWChecks(t *testing.T) {
	ca, _ := startPair(t)
	h := newHost(t, ca, hostOpts{})
	mr, w1 := bindHost(t, h, MWType1)
	w2, err := h.pd.AllocMW(MWType2)
	require.NoError(t, err)
	pd2, err := ca.AllocPD()
	require.NoError(t, err)
	otherMR, err := pd2.RegMR(make([]byte, 64), AccessLocalWrite|AccessMWBind)
	require.NoError(t, err)
	cases := []struct {
		name string
		mw   *MW
		info MWBindInfo
	}{
		{"type 2 window", w2, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8}},
		{"range without a region", w1, MWBindInfo{Length: 8}},
		{"region in another pd", w1, MWBindInfo{MR: otherMR, Addr: otherMR.Addr(), Length: 8}},
		{"zero-based", w1, MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 8, MWAccessFlags: AccessZeroBased}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := c.mw.RKey()
			err := h.qp.BindMW(c.mw, &MWBind{BindInfo: c.info})
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, old, c.mw.RKey())
		})
	}
	assert.Equal(t, uint32(0x1234500), IncRKey(0x12345ff))
	assert.Equal(t, uint32(0x1234501), IncRKey(0x1234500))
	_, err = h.pd.AllocMW(3)
	assert.ErrorIs(t, err, ErrInvalid)

	a := ca.QueryDevice()
	assert.Positive(t, a.MaxMW)
	caps := uint32(rxe.DevCapMemWindow | rxe.DevCapMemWindowType2B)
	assert.Equal(t, caps, a.DeviceCapFlags&caps)
}

// TestMWDeallocAndClose: a region with a bound window cannot be
// deregistered until the window is deallocated, and Context.Close
// deallocates windows before the regions they hold.
func TestMWDeallocAndClose(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	mr, mw := bindHost(t, b, MWType2)
	wr := mw.BindWR(1, SendSignaled, IncRKey(mw.RKey()), MWBindInfo{MR: mr, Addr: mr.Addr(), Length: 64,
		MWAccessFlags: AccessRemoteRead})
	require.NoError(t, b.qp.PostSend(&wr))
	wc := next(t, b.scq)
	require.Equal(t, WCSuccess, wc.Status, wc.Status.String())
	assert.ErrorIs(t, mr.Dereg(), ErrBusy)

	mw2, err := b.pd.AllocMW(MWType1)
	require.NoError(t, err)
	require.NoError(t, mw2.Dealloc())
	assert.ErrorIs(t, mw2.Dealloc(), ErrDestroyed)

	require.NoError(t, b.ctx.Close())
	assert.Equal(t, rxe.Resources{}, b.ctx.Device().Resources())
	_, err = b.pd.AllocMW(MWType1)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NotZero(t, a.ctx.Device().Resources().QPs, "the peer is untouched")
}
