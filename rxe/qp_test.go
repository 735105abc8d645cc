package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

func TestQPNAllocation(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	create := func() *QP {
		x, err := d.CreateQP(pd, QPInit{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		require.NoError(t, err)
		return x
	}
	a, b, c := create(), create(), create()
	assert.Equal(t, []uint32{17, 18, 19}, []uint32{a.QPN(), b.QPN(), c.QPN()}, "rxe starts at 17")
	require.NoError(t, d.DestroyQP(b))
	assert.Equal(t, uint32(20), create().QPN(), "cyclic: a freed QPN is not reused at once")
	assert.ErrorIs(t, d.DestroyQP(b), ErrDestroyed)

	// Wrap: past 2^20 allocation restarts at 17, skipping QPNs in use.
	d.qpNext = lastQPN
	assert.Equal(t, uint32(lastQPN), create().QPN())
	assert.Equal(t, uint32(18), create().QPN(), "17 is in use, 18 was freed")
	assert.Equal(t, uint32(21), create().QPN(), "19 and 20 in use")
	assert.Equal(t, createSrcPort(a.QPN()), a.SrcPort(), "creation source port")
}

func TestCreateQPValidates(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	pd2, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	srq2, err := d.CreateSRQ(pd2, SRQInit{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	ok := QPInit{Type: qp.RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	tests := []struct {
		name string
		mod  func(*QPInit)
		err  error
	}{
		{"type", func(i *QPInit) { i.Type = 9 }, ErrInvalid},
		{"no send cq", func(i *QPInit) { i.SendCQ = nil }, ErrInvalid},
		{"no recv cq", func(i *QPInit) { i.RecvCQ = nil }, ErrInvalid},
		{"send wr", func(i *QPInit) { i.Cap.MaxSendWR = MaxQPWR + 1 }, ErrInvalid},
		{"recv wr", func(i *QPInit) { i.Cap.MaxRecvWR = -1 }, ErrInvalid},
		{"send sge", func(i *QPInit) { i.Cap.MaxSendSGE = 33 }, ErrInvalid},
		{"recv sge", func(i *QPInit) { i.Cap.MaxRecvSGE = 33 }, ErrInvalid},
		{"inline", func(i *QPInit) { i.Cap.MaxInline = 513 }, ErrInvalid},
		{"srq of another pd", func(i *QPInit) { i.SRQ = srq2 }, ErrInvalid},
	}
	for _, tt := range tests {
		init := ok
		tt.mod(&init)
		_, err := d.CreateQP(pd, init)
		assert.ErrorIs(t, err, tt.err, tt.name)
	}
	init := ok
	init.Cap = QPCap{MaxSendWR: MaxQPWR / 1024, MaxRecvWR: 8, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInline: 512}
	_, err = d.CreateQP(pd, init)
	assert.NoError(t, err, "the limits themselves are allowed")
}

func TestDestroyBusy(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(16)
	rcq, _ := d.CreateCQ(16)
	srq, err := d.CreateSRQ(pd, SRQInit{MaxWR: 8, MaxSGE: 2})
	require.NoError(t, err)
	av := qp.AddressVector{DGID: ipB, SGIDIndex: 1}
	ah, err := d.CreateAH(pd, av)
	require.NoError(t, err)
	x, err := d.CreateQP(pd, QPInit{Type: qp.UD, SendCQ: scq, RecvCQ: rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4}})
	require.NoError(t, err)

	assert.ErrorIs(t, d.DestroyCQ(scq), ErrBusy, "send CQ in use")
	assert.ErrorIs(t, d.DestroyCQ(rcq), ErrBusy, "recv CQ in use")
	assert.ErrorIs(t, d.DestroySRQ(srq), ErrBusy, "SRQ in use")
	assert.ErrorIs(t, d.DeallocPD(pd), ErrBusy, "PD in use")

	require.NoError(t, d.DestroyQP(x))
	require.NoError(t, d.DestroyCQ(scq))
	require.NoError(t, d.DestroyCQ(rcq))
	assert.ErrorIs(t, d.DestroyCQ(rcq), ErrDestroyed)
	require.NoError(t, d.DestroySRQ(srq))
	assert.ErrorIs(t, d.DeallocPD(pd), ErrBusy, "AH still in the PD")
	require.NoError(t, d.DestroyAH(ah))
	assert.ErrorIs(t, d.DestroyAH(ah), ErrDestroyed)
	require.NoError(t, d.DeallocPD(pd))

	_, err = d.CreateQP(pd, QPInit{Type: qp.RC, SendCQ: scq, RecvCQ: rcq})
	assert.ErrorIs(t, err, ErrDestroyed)
	_, err = d.CreateCQ(0)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = d.CreateCQ(MaxCQE + 1)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestAddressVectorChecks(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, ip6A, 1500)
	pd, _ := d.AllocPD()
	tests := []struct {
		name string
		av   qp.AddressVector
		err  error
	}{
		{"v4", qp.AddressVector{DGID: ipB, SGIDIndex: 1}, nil},
		{"v4-mapped", qp.AddressVector{DGID: netip.AddrFrom16(ipB.As16()), SGIDIndex: 1}, nil},
		{"v6 global", qp.AddressVector{DGID: ip6B, SGIDIndex: 2}, nil},
		{"v6 link-local from GID 0", qp.AddressVector{DGID: netip.MustParseAddr("fe80::1"), SGIDIndex: 0}, nil},
		{"no dgid", qp.AddressVector{SGIDIndex: 1}, ErrInvalid},
		{"unspecified dgid", qp.AddressVector{DGID: netip.IPv6Unspecified(), SGIDIndex: 1}, ErrInvalid},
		{"multicast", qp.AddressVector{DGID: netip.MustParseAddr("239.1.1.1"), SGIDIndex: 1}, ErrInvalid},
		{"sgid index", qp.AddressVector{DGID: ipB, SGIDIndex: 3}, ErrNoGID},
		{"family", qp.AddressVector{DGID: ipB, SGIDIndex: 2}, ErrInvalid},
		{"flow label", qp.AddressVector{DGID: ip6B, SGIDIndex: 2, FlowLabel: 1 << 20}, ErrInvalid},
	}
	for _, tt := range tests {
		ah, err := d.CreateAH(pd, tt.av)
		if tt.err != nil {
			assert.ErrorIs(t, err, tt.err, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.av.DGID.Unmap(), ah.AV().DGID, tt.name)
	}
}

func TestModifySetsSourcePortAndChecksAV(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := newSide(t, da, qp.RC, 8), newSide(t, db, qp.RC, 8)
	toInit(t, a.qp)
	bad := qp.Attr{State: qp.RTR, PathMTU: 1024, DestQPN: b.qp.QPN(), MaxDestRdAtomic: 1,
		AV: qp.AddressVector{DGID: ipB, SGIDIndex: 5}}
	mask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	assert.ErrorIs(t, a.qp.Modify(&bad, mask), ErrNoGID)
	assert.Equal(t, qp.Init, a.qp.State(), "a refused modify changes nothing")
	assert.Equal(t, createSrcPort(a.qp.QPN()), a.qp.SrcPort())

	toInit(t, b.qp)
	toRTS(t, a, b, 1024)
	assert.Equal(t, qp.RTS, a.qp.State())
	assert.Equal(t, UDPSourcePort(0, a.qp.QPN(), b.qp.QPN()), a.qp.SrcPort())

	// A flow label in the AV feeds the port.
	c := newSide(t, da, qp.UC, 8)
	toInit(t, c.qp)
	fl := qp.Attr{State: qp.RTR, PathMTU: 1024, DestQPN: 99,
		AV: qp.AddressVector{DGID: ipB, SGIDIndex: 1, FlowLabel: 0x12345}}
	require.NoError(t, c.qp.Modify(&fl, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN))
	assert.Equal(t, UDPSourcePort(0x12345, 0, 0), c.qp.SrcPort())

	// UD QPs keep the creation port.
	u := newSide(t, da, qp.UD, 8)
	toInit(t, u.qp)
	toRTS(t, u, nil, 0)
	assert.Equal(t, createSrcPort(u.qp.QPN()), u.qp.SrcPort())

	assert.Error(t, a.qp.Modify(&qp.Attr{Port: 2}, qp.AttrPort))
	require.NoError(t, da.DestroyQP(a.qp))
	assert.ErrorIs(t, a.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState), ErrDestroyed)
	assert.ErrorIs(t, a.qp.PostSend(&qp.SendWR{}), ErrDestroyed)
	assert.ErrorIs(t, a.qp.PostRecv(&qp.RecvWR{}), ErrDestroyed)
}

func TestResourcesAndQPList(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	u := newSide(t, da, qp.UD, 4)
	_, err := da.RegMR(a.pd, make([]byte, 8), 0)
	require.NoError(t, err)
	assert.Equal(t, Resources{PDs: 2, MRs: 1, CQs: 4, QPs: 2}, da.Resources())
	l := da.QPs()
	require.Len(t, l, 2)
	assert.Equal(t, QPInfo{QPN: a.qp.QPN(), Type: qp.RC, State: qp.RTS, PD: a.pd.Handle(),
		SrcPort: UDPSourcePort(0, a.qp.QPN(), b.qp.QPN()), DestQPN: b.qp.QPN(), Remote: ipB, PathMTU: 1024}, l[0])
	assert.Equal(t, u.qp.QPN(), l[1].QPN)
	assert.Equal(t, qp.Reset, l[1].State)
}
