package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// mwRig is a connected RC pair whose side b owns a region (local write and
// bind access only: remote peers reach it through windows) and a window.
type mwRig struct {
	n    *net
	a, b *side
	am   *MR
	abuf []byte
	bm   *MR
	bbuf []byte
	mw   *MW
}

const mwBufLen = 4096

func newMWRig(t *testing.T, typ MWType) *mwRig {
	t.Helper()
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := connect(t, da, db, qp.RC, 16, 1024)
	r := &mwRig{n: newNet(da, db), a: a, b: b, abuf: make([]byte, mwBufLen), bbuf: make([]byte, mwBufLen)}
	var err error
	r.am, err = da.RegMR(a.pd, r.abuf, rwAll)
	require.NoError(t, err)
	r.bm, err = db.RegMR(b.pd, r.bbuf, qp.AccessLocalWrite|qp.AccessMWBind)
	require.NoError(t, err)
	assert.Zero(t, r.bm.RKey(), "the region itself grants no remote access")
	r.mw, err = db.AllocMW(b.pd, typ)
	require.NoError(t, err)
	return r
}

// bind binds the window to [off, off+length) of b's region through a
// BIND_MW work request on b's QP, as ibv_bind_mw and ibv_post_send do, and
// returns the completion and the rkey the WR asked for.
func (r *mwRig) bind(t *testing.T, off, length uint64, access qp.Access) (qp.WC, uint32) {
	t.Helper()
	old := r.mw.RKey()
	rkey := old&^0xff | (old+1)&0xff
	require.NoError(t, r.b.qp.PostSend(&qp.SendWR{ID: 77, Opcode: qp.WRBindMW, Flags: qp.SendSignaled,
		BindMW: qp.BindMW{MWRKey: old, RKey: rkey, BindInfo: qp.MWBindInfo{
			MRLKey: r.bm.LKey(), Addr: r.bm.Addr() + off, Length: length, MWAccessFlags: access}}}))
	return r.n.poll(t, r.b.scq, 1)[0], rkey
}

// access runs an RDMA WRITE or READ of length bytes from a at va under
// rkey and returns its completion status.
func (r *mwRig) access(t *testing.T, op qp.WROpcode, rkey uint32, va uint64, length uint32) qp.WCStatus {
	t.Helper()
	require.NoError(t, r.a.qp.PostSend(&qp.SendWR{ID: 5, Opcode: op, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: r.am.Addr(), Length: length, LKey: r.am.LKey()}},
		RemoteAddr: va, RKey: rkey}))
	return r.n.poll(t, r.a.scq, 1)[0].Status
}

// TestMWRemoteAccess: a bound window lets the peer WRITE and READ the
// range it covers with the access it grants, and nothing else: outside the
// window (though inside the region), without the access, or under the
// window's previous rkey, the request fails with a remote access error.
func TestMWRemoteAccess(t *testing.T) {
	const off, length = 1024, 512
	rw := qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead
	cases := []struct {
		name   string
		typ    MWType
		access qp.Access
		op     qp.WROpcode
		at     int64 // offset of the access from the window's start
		n      uint32
		oldKey bool
		want   qp.WCStatus
	}{
		{"type 1 write inside", MWType1, rw, qp.WRWrite, 0, length, false, qp.WCSuccess},
		{"type 1 read inside", MWType1, rw, qp.WRRead, 100, 200, false, qp.WCSuccess},
		{"type 1 write past the end", MWType1, rw, qp.WRWrite, 1, length, false, qp.WCRemAccessErr},
		{"type 1 write before the start", MWType1, rw, qp.WRWrite, -8, 16, false, qp.WCRemAccessErr},
		{"type 1 read without read access", MWType1, qp.AccessLocalWrite | qp.AccessRemoteWrite, qp.WRRead, 0, 8, false, qp.WCRemAccessErr},
		{"type 1 old rkey", MWType1, rw, qp.WRWrite, 0, 8, true, qp.WCRemAccessErr},
		{"type 2 write inside", MWType2, rw, qp.WRWrite, 8, length - 8, false, qp.WCSuccess},
		{"type 2 read inside", MWType2, rw, qp.WRRead, 0, length, false, qp.WCSuccess},
		{"type 2 write past the end", MWType2, rw, qp.WRWrite, length - 4, 8, false, qp.WCRemAccessErr},
		{"type 2 write without write access", MWType2, qp.AccessRemoteRead, qp.WRWrite, 0, 8, false, qp.WCRemAccessErr},
		{"type 2 zero-based write", MWType2, rw | qp.AccessZeroBased, qp.WRWrite, 0, 64, false, qp.WCSuccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newMWRig(t, c.typ)
			old := r.mw.RKey()
			wc, rkey := r.bind(t, off, length, c.access)
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, qp.WCBindMW, wc.Opcode)
			assert.Equal(t, uint64(77), wc.ID)
			assert.Equal(t, rkey, r.mw.RKey(), "the window takes the WR's key byte")
			assert.Equal(t, MWBinding{MR: r.bm, QPN: map[MWType]uint32{MWType2: r.b.qp.QPN()}[c.typ],
				Addr: r.bm.Addr() + off, Length: length, Access: c.access}, r.mw.Binding())
			base := r.bm.Addr() + off
			if c.access&qp.AccessZeroBased != 0 {
				base = 0
			}
			if c.oldKey {
				rkey = old
			}
			pattern(r.abuf, 1)
			pattern(r.bbuf, 2)
			status := r.access(t, c.op, rkey, uint64(int64(base)+c.at), c.n)
			require.Equal(t, c.want, status, status.String())
			if status != qp.WCSuccess {
				return
			}
			at := off + int(c.at)
			if c.op == qp.WRWrite {
				assert.Equal(t, r.abuf[:c.n], r.bbuf[at:at+int(c.n)], "written bytes")
			} else {
				assert.Equal(t, r.bbuf[at:at+int(c.n)], r.abuf[:c.n], "read bytes")
			}
		})
	}
}

// TestMWInvalidate: a type 2 window is invalidated by LOCAL_INV on its QP or
// by a SEND_WITH_INV from the peer, a type 1 window by binding it with a
// zero length; the window's rkey then fails. LOCAL_INV of a type 1 window
// fails (o10-37.2.26).
func TestMWInvalidate(t *testing.T) {
	rw := qp.AccessLocalWrite | qp.AccessRemoteWrite
	cases := []struct {
		name       string
		typ        MWType
		invalidate func(t *testing.T, r *mwRig, rkey uint32)
	}{
		{"type 2 LOCAL_INV", MWType2, func(t *testing.T, r *mwRig, rkey uint32) {
			require.NoError(t, r.b.qp.PostSend(&qp.SendWR{ID: 8, Opcode: qp.WRLocalInv, Flags: qp.SendSignaled, InvRKey: rkey}))
			wc := r.n.poll(t, r.b.scq, 1)[0]
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, qp.WCLocalInv, wc.Opcode)
		}},
		{"type 2 SEND_WITH_INV", MWType2, func(t *testing.T, r *mwRig, rkey uint32) {
			require.NoError(t, r.b.qp.PostRecv(&qp.RecvWR{ID: 9, SGL: []qp.SGE{{Addr: r.bm.Addr(), Length: 64, LKey: r.bm.LKey()}}}))
			require.NoError(t, r.a.qp.PostSend(&qp.SendWR{ID: 9, Opcode: qp.WRSendInv, Flags: qp.SendSignaled, InvRKey: rkey,
				SGL: []qp.SGE{{Addr: r.am.Addr(), Length: 16, LKey: r.am.LKey()}}}))
			wc := r.n.poll(t, r.a.scq, 1)[0]
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			rwc := r.n.poll(t, r.b.rcq, 1)[0]
			require.Equal(t, qp.WCSuccess, rwc.Status, rwc.Status.String())
			assert.NotZero(t, rwc.Flags&qp.WCWithInv)
			assert.Equal(t, rkey, rwc.Imm, "the invalidated rkey")
		}},
		{"type 1 zero-length bind", MWType1, func(t *testing.T, r *mwRig, _ uint32) {
			wc, _ := r.bind(t, 0, 0, 0)
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newMWRig(t, c.typ)
			wc, rkey := r.bind(t, 0, 256, rw)
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			require.Equal(t, qp.WCSuccess, r.access(t, qp.WRWrite, r.mw.RKey(), r.bm.Addr(), 16))
			c.invalidate(t, r, rkey)
			assert.Equal(t, MWBinding{}, r.mw.Binding())
			require.NoError(t, r.b.d.DeregMR(r.bm), "an unbound window holds no region")
			status := r.access(t, qp.WRWrite, r.mw.RKey(), r.bm.Addr(), 16)
			assert.Equal(t, qp.WCRemAccessErr, status, status.String())
		})
	}
	t.Run("type 1 LOCAL_INV fails", func(t *testing.T) {
		r := newMWRig(t, MWType1)
		_, rkey := r.bind(t, 0, 256, rw)
		require.NoError(t, r.b.qp.PostSend(&qp.SendWR{ID: 8, Opcode: qp.WRLocalInv, InvRKey: rkey}))
		wc := r.n.poll(t, r.b.scq, 1)[0]
		assert.Equal(t, qp.WCLocQPOpErr, wc.Status, wc.Status.String())
		assert.Equal(t, uint64(256), r.mw.Binding().Length, "still bound")
	})
}

// TestMWDealloc: deallocating a bound window revokes its rkey and releases
// its region; a region with windows bound cannot be deregistered (or
// invalidated) meanwhile, and the PD cannot be deallocated while windows
// remain in it.
func TestMWDealloc(t *testing.T) {
	r := newMWRig(t, MWType2)
	db := r.b.d
	wc, rkey := r.bind(t, 0, 128, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, 1, db.Resources().MWs)

	assert.ErrorIs(t, db.DeregMR(r.bm), ErrBusy)
	assert.ErrorIs(t, r.b.qp.mem.Invalidate(r.bm.LKey(), false), qp.ErrAccess, "rxe refuses to invalidate a region with windows")
	assert.True(t, r.bm.Valid())
	assert.ErrorIs(t, db.DeallocPD(r.b.pd), ErrBusy)

	require.NoError(t, db.DeallocMW(r.mw))
	assert.ErrorIs(t, db.DeallocMW(r.mw), ErrDestroyed)
	assert.Zero(t, db.Resources().MWs)
	status := r.access(t, qp.WRWrite, rkey, r.bm.Addr(), 16)
	assert.Equal(t, qp.WCRemAccessErr, status, status.String())
	require.NoError(t, db.DeregMR(r.bm))
}

// TestMWBindChecks: the checks of rxe_check_bind_mw, each failing a
// BIND_MW with MW_BIND_ERR. They run against the QP's view of memory
// directly; one case goes through the send queue to see the completion.
func TestMWBindChecks(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	s := newSide(t, d, qp.RC, 8)
	other := newSide(t, d, qp.RC, 8)
	buf := make([]byte, 1024)
	mr, err := d.RegMR(s.pd, buf, qp.AccessLocalWrite|qp.AccessMWBind)
	require.NoError(t, err)
	roMR, err := d.RegMR(s.pd, make([]byte, 64), qp.AccessMWBind)
	require.NoError(t, err)
	noBind, err := d.RegMR(s.pd, make([]byte, 64), qp.AccessLocalWrite)
	require.NoError(t, err)
	otherMW, err := d.AllocMW(other.pd, MWType1)
	require.NoError(t, err)
	w1, err := d.AllocMW(s.pd, MWType1)
	require.NoError(t, err)
	w2, err := d.AllocMW(s.pd, MWType2)
	require.NoError(t, err)
	bound, err := d.AllocMW(s.pd, MWType2)
	require.NoError(t, err)
	write := qp.AccessRemoteWrite
	info := func(m *MR, off, n uint64, a qp.Access) qp.MWBindInfo {
		return qp.MWBindInfo{MRLKey: m.LKey(), Addr: m.Addr() + off, Length: n, MWAccessFlags: a}
	}
	ok := qp.BindMW{MWRKey: bound.rkey, RKey: 1, BindInfo: info(mr, 0, 64, write)}
	d.mu.Lock()
	require.NoError(t, s.qp.mem.BindMW(&ok))
	d.mu.Unlock()

	cases := []struct {
		name string
		mw   *MW
		info qp.MWBindInfo
		want error
	}{
		{"unknown window", nil, info(mr, 0, 64, write), qp.ErrBadKey},
		{"window of another pd", otherMW, info(mr, 0, 64, write), qp.ErrBadKey},
		{"unknown region", w1, qp.MWBindInfo{MRLKey: mr.LKey() ^ 0x80, Addr: mr.Addr(), Length: 8}, qp.ErrBadKey},
		{"unsupported access", w1, info(mr, 0, 64, 1<<12), qp.ErrAccess},
		{"type 1 zero-based", w1, info(mr, 0, 64, write|qp.AccessZeroBased), qp.ErrAccess},
		{"type 2 zero length", w2, info(mr, 0, 0, write), qp.ErrAccess},
		{"type 2 already bound", bound, info(mr, 0, 64, write), qp.ErrAccess},
		{"region without bind access", w1, info(noBind, 0, 8, write), qp.ErrAccess},
		{"writable window on a read-only region", w2, info(roMR, 0, 8, write), qp.ErrAccess},
		{"past the region", w1, info(mr, 1000, 25, write), qp.ErrBounds},
		{"before the region", w1, qp.MWBindInfo{MRLKey: mr.LKey(), Addr: mr.Addr() - 1, Length: 8}, qp.ErrBounds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := qp.BindMW{MWRKey: 0xffff00, RKey: 2, BindInfo: c.info}
			if c.mw != nil {
				b.MWRKey = c.mw.rkey
			}
			d.mu.Lock()
			err := s.qp.mem.BindMW(&b)
			d.mu.Unlock()
			assert.ErrorIs(t, err, c.want)
		})
	}
	assert.Equal(t, MWBinding{}, w1.Binding(), "failed binds change nothing")
	assert.Equal(t, MWBinding{}, w2.Binding())
	assert.Equal(t, uint32(64), uint32(bound.Binding().Length))

	t.Run("completion", func(t *testing.T) {
		peer := newSide(t, newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500), qp.RC, 8)
		connectSides(t, s, peer, 1024)
		n := newNet(d, peer.d)
		require.NoError(t, s.qp.PostSend(&qp.SendWR{ID: 3, Opcode: qp.WRBindMW,
			BindMW: qp.BindMW{MWRKey: w2.RKey(), RKey: 9, BindInfo: info(mr, 0, 0, write)}}))
		wc := n.poll(t, s.scq, 1)[0]
		assert.Equal(t, qp.WC{ID: 3, Status: qp.WCMWBindErr, QPN: s.qp.QPN()}, wc)
		assert.Equal(t, qp.Err, s.qp.State())
	})
}

// TestMWType2OnlyItsQP: a type 2 window answers only the QP it is bound to;
// a type 1 window answers any QP of its PD.
func TestMWType2OnlyItsQP(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	s := newSide(t, d, qp.RC, 8)
	cq, err := d.CreateCQ(4)
	require.NoError(t, err)
	sibling, err := d.CreateQP(s.pd, QPInit{Type: qp.RC, SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	mr, err := d.RegMR(s.pd, make([]byte, 256), qp.AccessLocalWrite|qp.AccessMWBind)
	require.NoError(t, err)
	for _, typ := range []MWType{MWType1, MWType2} {
		w, err := d.AllocMW(s.pd, typ)
		require.NoError(t, err)
		b := qp.BindMW{MWRKey: w.RKey(), RKey: 5, BindInfo: qp.MWBindInfo{MRLKey: mr.LKey(), Addr: mr.Addr(),
			Length: 256, MWAccessFlags: qp.AccessRemoteRead}}
		d.mu.Lock()
		require.NoError(t, s.qp.mem.BindMW(&b))
		_, errOwn := s.qp.mem.Remote(w.rkey, mr.Addr(), 8, qp.AccessRemoteRead)
		_, errSibling := sibling.mem.Remote(w.rkey, mr.Addr(), 8, qp.AccessRemoteRead)
		_, errPD := s.pd.mem.Remote(w.rkey, mr.Addr(), 8, qp.AccessRemoteRead)
		d.mu.Unlock()
		assert.NoError(t, errOwn, "%s", typ)
		allocs := testing.AllocsPerRun(100, func() {
			_, _ = s.qp.mem.Remote(w.rkey, mr.Addr(), 8, qp.AccessRemoteRead)
		})
		assert.Zero(t, allocs, "the window path of the responder does not allocate")
		if typ == MWType2 {
			assert.ErrorIs(t, errSibling, qp.ErrBadKey)
			assert.ErrorIs(t, errPD, qp.ErrBadKey)
		} else {
			assert.NoError(t, errSibling)
			assert.NoError(t, errPD)
		}
	}
}

// TestAllocMW: keys in the window index range with a random key byte, the
// type checked, and the device reporting windows as rxe does.
func TestAllocMW(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	for _, typ := range []MWType{MWType1, MWType2} {
		w, err := d.AllocMW(pd, typ)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, w.RKey()>>8, uint32(minMWIndex))
		assert.LessOrEqual(t, w.RKey()>>8, uint32(maxMWIndex))
		assert.Equal(t, typ, w.Type())
		assert.Equal(t, pd, w.PD())
	}
	for _, typ := range []MWType{0, 3} {
		_, err := d.AllocMW(pd, typ)
		assert.ErrorIs(t, err, ErrInvalid, "%s", typ)
	}
	a := d.QueryDevice()
	assert.Equal(t, MaxMW, a.MaxMW)
	assert.Equal(t, uint32(DevCapMemWindow|DevCapMemWindowType2B), a.DeviceCapFlags&(DevCapMemWindow|DevCapMemWindowType2B))
	assert.Zero(t, a.DeviceCapFlags&DevCapMemMgtExtensions)
	assert.Equal(t, 2, d.Resources().MWs)
}
