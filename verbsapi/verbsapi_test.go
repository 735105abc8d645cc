package verbsapi

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/rxe"
)

// Notifications of several CQs arrive on their shared completion channel,
// naming the CQ; each needs a fresh ReqNotify.
func TestCompChannel(t *testing.T) {
	ca, cb := startPair(t)
	ch, err := cb.CreateCompChannel()
	require.NoError(t, err)
	a := newHost(t, ca, hostOpts{})
	b := &testHost{ctx: cb}
	b.pd, err = cb.AllocPD()
	require.NoError(t, err)
	b.scq, err = cb.CreateCQ(8, ch)
	require.NoError(t, err)
	b.rcq, err = cb.CreateCQ(8, ch)
	require.NoError(t, err)
	assert.Same(t, ch, b.rcq.Channel())
	b.qp, err = b.pd.CreateQP(QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: RC,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	b.mr, err = b.pd.RegMR(make([]byte, 128), AccessAll)
	require.NoError(t, err)
	connectHosts(t, a, b, nil)

	_, err = b.rcq.PollWait(context.Background(), make([]WC, 1))
	assert.ErrorIs(t, err, ErrHasChannel)

	require.NoError(t, b.rcq.ReqNotify(false))
	require.NoError(t, b.qp.PostRecv(&RecvWR{ID: 11, SGL: []SGE{b.mr.SGE(0, 128)}}))
	require.NoError(t, a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 5)}}))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	got, err := ch.GetEvent(ctx)
	require.NoError(t, err)
	assert.Same(t, b.rcq, got)
	ch.AckEvents(got, 1)
	wc := make([]WC, 2)
	n, err := got.Poll(wc)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, uint64(11), wc[0].ID)
	assert.Equal(t, uint32(5), wc[0].ByteLen)

	// Not re-armed: the next completion raises no event.
	require.NoError(t, b.qp.PostRecv(&RecvWR{ID: 12, SGL: []SGE{b.mr.SGE(0, 128)}}))
	require.NoError(t, a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 5)}}))
	eventually(t, "second completion", func() bool { return b.rcq.cq.Len() == 1 })
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	_, err = ch.GetEvent(short)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// A UD QP sends to an address handle; the receiver sees the sender's QPN
// and the 40-byte GRH space before the payload.
func TestUDSendWithAH(t *testing.T) {
	ca, cb := startPair(t)
	var qps [2]*QP
	var cqs [2]*CQ
	var mrs [2]*MR
	var pds [2]*PD
	for i, c := range []*Context{ca, cb} {
		pd, err := c.AllocPD()
		require.NoError(t, err)
		cq, err := c.CreateCQ(8, nil)
		require.NoError(t, err)
		q, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: UD,
			Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q.Connect(0, Endpoint{}, nil))
		assert.Equal(t, QPSRTS, q.State())
		mr, err := pd.RegMR(make([]byte, 256), AccessLocalWrite)
		require.NoError(t, err)
		qps[i], cqs[i], mrs[i], pds[i] = q, cq, mr, pd
	}
	dgid, err := cb.QueryGID(1, 1)
	require.NoError(t, err)
	ah, err := pds[0].CreateAH(AHAttr{DGID: dgid, SGIDIndex: 1})
	require.NoError(t, err)
	assert.Equal(t, uint8(64), ah.AV().HopLimit)
	_, err = pds[0].CreateAH(AHAttr{DGID: dgid, SGIDIndex: 1, PortNum: 2})
	assert.ErrorIs(t, err, ErrInvalid)

	require.NoError(t, qps[1].PostRecv(&RecvWR{ID: 1, SGL: []SGE{mrs[1].SGE(0, 256)}}))
	copy(mrs[0].Bytes(), "datagram")
	require.NoError(t, qps[0].PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled,
		SGL: []SGE{mrs[0].SGE(0, 8)}, AH: ah.AV(), RemoteQPN: qps[1].QPN(), RemoteQKey: DefaultQKey}))
	assert.Equal(t, WCSuccess, next(t, cqs[0]).Status)
	wc := next(t, cqs[1])
	require.Equal(t, WCSuccess, wc.Status)
	assert.Equal(t, qps[0].QPN(), wc.SrcQP)
	assert.Equal(t, uint32(40+8), wc.ByteLen)
	assert.Equal(t, "datagram", string(mrs[1].Bytes()[40:48]))
	assert.ErrorIs(t, pds[0].Dealloc(), ErrBusy, "pd with an AH")
	require.NoError(t, ah.Destroy())
}

// The SRQ limit event fires once the posted WQEs fall below the limit.
func TestSRQLimitEvent(t *testing.T) {
	ca, cb := startPair(t)
	srq, raise := armSRQLimit(t, ca, cb)
	assert.Equal(t, SRQInitAttr{MaxWR: 8, MaxSGE: 1, Limit: 3}, srq.Query())
	raise()
	e := nextEvent(t, cb)
	assert.Equal(t, EventSRQLimitReached, e.Type)
	assert.Same(t, srq, e.SRQ)
	assert.Contains(t, e.String(), "SRQ limit reached")
	eventually(t, "two receives consumed", func() bool { return srq.Len() == 2 })
}

// Close destroys what the caller left, and the context refuses new work.
func TestContextClose(t *testing.T) {
	a, b := connectedHosts(t, hostOpts{}, hostOpts{})
	_, err := a.ctx.CreateCompChannel()
	require.NoError(t, err)
	srq, err := a.pd.CreateSRQ(SRQInitAttr{MaxWR: 2, MaxSGE: 1})
	require.NoError(t, err)
	_ = srq
	require.NoError(t, a.ctx.Close())
	assert.Equal(t, rxe.Resources{}, a.ctx.Device().Resources())
	_, err = a.ctx.AllocPD()
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, a.ctx.Close(), ErrClosed)
	assert.ErrorIs(t, a.qp.PostSend(&SendWR{Opcode: WRSend}), ErrDestroyed)
	assert.NotZero(t, b.ctx.Device().Resources().QPs, "the peer is untouched")
}

// Device queries: ibv_devinfo's fields.
func TestQueries(t *testing.T) {
	ca, _ := startPair(t)
	attr := ca.QueryDevice()
	assert.Equal(t, uint32(0xFFFFFF), attr.VendorID)
	assert.Equal(t, 1, attr.PhysPortCnt)
	port, err := ca.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, rxe.PortActive, port.State)
	assert.Equal(t, MTU(1024), port.ActiveMTU)
	_, err = ca.QueryPort(2)
	assert.Error(t, err)
	table, err := ca.QueryGIDTable(1)
	require.NoError(t, err)
	require.Len(t, table, 2)
	assert.True(t, table[0].GID.IsLinkLocalUnicast())
	assert.Equal(t, netip.MustParseAddr("::ffff:10.9.0.1"), table[1].GID)
	assert.Equal(t, GIDTypeRoCEv2, table[1].Type)
	g, err := ca.QueryGID(1, 1)
	require.NoError(t, err)
	assert.Equal(t, table[1].GID, g)
	_, err = ca.QueryGID(1, 5)
	assert.ErrorIs(t, err, ErrNoGID)
	i, err := ca.GIDIndex(netip.MustParseAddr("10.9.0.1"))
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	i, err = ca.sourceGID(netip.MustParseAddr("::ffff:10.9.0.2"))
	require.NoError(t, err)
	assert.Equal(t, 1, i)
	_, err = ca.sourceGID(netip.MustParseAddr("fd00::1"))
	assert.ErrorIs(t, err, ErrNoGID, "no global IPv6 GID")
}

// Registered devices can be listed and opened by name.
func TestRegistry(t *testing.T) {
	d, err := rxe.New(rxe.Config{Name: "regtest0", IPv4: netip.MustParseAddr("10.1.1.1")})
	require.NoError(t, err)
	unreg, err := Register(d)
	require.NoError(t, err)
	_, err = Register(d)
	assert.ErrorIs(t, err, ErrInvalid)
	found := false
	for _, x := range Devices() {
		found = found || x == d
	}
	assert.True(t, found)
	c, err := Open("regtest0")
	require.NoError(t, err)
	assert.Equal(t, "regtest0", c.Name())
	unreg()
	_, err = Open("regtest0")
	assert.ErrorIs(t, err, ErrInvalid)
}
