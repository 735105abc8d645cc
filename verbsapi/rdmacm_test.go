package verbsapi

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

// TestCMConnect connects two devices with rdma_cm as rdma_server and
// rdma_client do: listen, dial with private data, accept with private
// data, a SEND each way, then disconnect from the active side.
func TestCMConnect(t *testing.T) {
	ca, cb := startPair(t)
	a, b := newHost(t, ca, hostOpts{}), newHost(t, cb, hostOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	l, err := cb.ListenCM(7471)
	require.NoError(t, err)
	defer l.Close()
	_, err = cb.ListenCM(7471)
	require.ErrorIs(t, err, ErrPortInUse)

	type accepted struct {
		conn *CMConn
		req  *ConnRequest
		err  error
	}
	done := make(chan accepted, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			done <- accepted{err: err}
			return
		}
		// Receive before the peer can send: post first, as rdma_server.
		if err := b.qp.ModifyToInit(nil); err != nil {
			done <- accepted{err: err}
			return
		}
		if err := b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			done <- accepted{err: err}
			return
		}
		conn, err := req.Accept(ctx, b.qp, &CMParam{PrivateData: []byte("welcome")})
		done <- accepted{conn, req, err}
	}()

	require.NoError(t, a.qp.ModifyToInit(nil))
	require.NoError(t, a.qp.PostRecv(&RecvWR{ID: 2, SGL: []SGE{a.mr.SGE(0, 64)}}))
	to := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.2"), 7471)
	conn, err := ca.DialCM(ctx, a.qp, to, &CMParam{PrivateData: []byte("hello")})
	require.NoError(t, err)
	require.Equal(t, QPSRTS, a.qp.State())
	require.Equal(t, []byte("welcome"), conn.PrivateData[:7])
	acc := <-done
	require.NoError(t, acc.err)
	require.Equal(t, QPSRTS, b.qp.State())
	require.Equal(t, []byte("hello"), acc.req.PrivateData[:5])
	require.Len(t, acc.req.PrivateData, 56)
	require.Equal(t, conn.LocalAddr(), acc.req.Peer, "the REQ's rdma_cm header names the dialer's address")
	require.Equal(t, a.qp.QPN(), acc.req.RemoteQPN)

	// The QPs were programmed from the REQ and REP: data flows both ways.
	copy(a.mr.Bytes()[1024:], "ping")
	require.NoError(t, a.qp.PostSend(&SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(1024, 4)}}))
	require.Equal(t, WCSuccess, next(t, a.scq).Status)
	wc := next(t, b.rcq)
	require.Equal(t, WCSuccess, wc.Status)
	require.Equal(t, "ping", string(b.mr.Bytes()[:4]))
	copy(b.mr.Bytes()[1024:], "pong")
	require.NoError(t, b.qp.PostSend(&SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{b.mr.SGE(1024, 4)}}))
	require.Equal(t, WCSuccess, next(t, b.scq).Status)
	require.Equal(t, WCSuccess, next(t, a.rcq).Status)
	require.Equal(t, "pong", string(a.mr.Bytes()[:4]))

	// The active side disconnects; the passive side hears it and answers.
	errc := make(chan error, 1)
	go func() { errc <- conn.Disconnect(ctx) }()
	select {
	case <-acc.conn.Done():
	case <-ctx.Done():
		t.Fatal("the passive side never heard the disconnect")
	}
	require.NoError(t, acc.conn.Disconnect(ctx))
	require.NoError(t, <-errc)
	require.Equal(t, QPSErr, a.qp.State())
	require.Equal(t, QPSErr, b.qp.State())
}

// TestCMRefusals: nobody listening is "invalid service ID"; a program that
// rejects is "consumer defined", with its private data.
func TestCMRefusals(t *testing.T) {
	ca, cb := startPair(t)
	a := newHost(t, ca, hostOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	to := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.2"), 7174)
	_, err := ca.DialCM(ctx, a.qp, to, nil)
	var rej *RejectError
	require.ErrorAs(t, err, &rej)
	require.ErrorIs(t, err, ErrRejected)
	require.Equal(t, packet.RejInvalidServiceID, rej.Reason)
	require.Contains(t, err.Error(), "nothing listens")

	l, err := cb.ListenCM(7174)
	require.NoError(t, err)
	defer l.Close()
	go func() {
		req, err := l.Accept(ctx)
		if err == nil {
			_ = req.Reject([]byte("go away"))
		}
	}()
	_, err = ca.DialCM(ctx, a.qp, to, nil)
	require.True(t, errors.As(err, &rej))
	require.Equal(t, packet.RejConsumerDefined, rej.Reason)
	require.Equal(t, []byte("go away"), rej.PrivateData[:7])

	_, err = ca.DialCM(ctx, a.qp, to, &CMParam{PrivateData: make([]byte, 57)})
	require.ErrorIs(t, err, ErrInvalid)
}

// TestCMUD resolves a UD QP through SIDR and sends it a datagram with what
// it learned, as udaddy does.
func TestCMUD(t *testing.T) {
	ca, cb := startPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	mk := func(c *Context) *testHost {
		h := &testHost{ctx: c}
		var err error
		h.pd, err = c.AllocPD()
		require.NoError(t, err)
		h.scq, err = c.CreateCQ(8, nil)
		require.NoError(t, err)
		h.qp, err = h.pd.CreateQP(QPInitAttr{SendCQ: h.scq, RecvCQ: h.scq, QPType: UD,
			Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		h.mr, err = h.pd.RegMR(make([]byte, 4096), AccessAll)
		require.NoError(t, err)
		require.NoError(t, h.qp.Connect(0, Endpoint{}, &ConnOptions{QKey: UDQKey}))
		return h
	}
	a, b := mk(ca), mk(cb)
	to := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.2"), 7174)
	_, err := ca.ResolveUD(ctx, to, nil)
	require.ErrorIs(t, err, ErrRejected, "nobody listens yet")

	l, err := cb.ListenUD(7174)
	require.NoError(t, err)
	defer l.Close()
	go func() {
		req, err := l.Accept(ctx)
		if err == nil {
			_ = req.Reply(b.qp, []byte("udp"))
		}
	}()
	peer, err := ca.ResolveUD(ctx, to, []byte("who"))
	require.NoError(t, err)
	require.Equal(t, b.qp.QPN(), peer.QPN)
	require.Equal(t, uint32(UDQKey), peer.QKey)
	require.Equal(t, []byte("udp"), peer.PrivateData[:3])

	require.NoError(t, b.qp.PostRecv(&RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 40+16)}}))
	ah, err := a.pd.CreateAH(AHAttr{DGID: netip.MustParseAddr("::ffff:10.9.0.2"), SGIDIndex: 1, HopLimit: 64})
	require.NoError(t, err)
	copy(a.mr.Bytes()[100:], "datagram")
	require.NoError(t, a.qp.PostSend(&SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(100, 8)},
		AH: ah.AV(), RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}))
	require.Equal(t, WCSuccess, next(t, a.scq).Status)
	require.Equal(t, WCSuccess, next(t, b.scq).Status)
	require.Equal(t, "datagram", string(b.mr.Bytes()[40:48]))
}

// BenchmarkCMConnect is one rdma_cm connection's life between two devices
// on the mem link: dial, accept (QPs to RTS on both sides), and a
// disconnect from the active side with the passive side's answer.
func BenchmarkCMConnect(b *testing.B) {
	ca, cb := startPairTB(b)
	ctx := context.Background()
	l, err := cb.ListenCM(7471)
	require.NoError(b, err)
	defer l.Close()
	to := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.2"), 7471)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		a, s := newHostTB(b, ca, hostOpts{}), newHostTB(b, cb, hostOpts{})
		b.StartTimer()
		acc := make(chan *CMConn, 1)
		go func() {
			req, err := l.Accept(ctx)
			if err != nil {
				acc <- nil
				return
			}
			conn, err := req.Accept(ctx, s.qp, nil)
			if err != nil {
				conn = nil
			}
			acc <- conn
		}()
		conn, err := ca.DialCM(ctx, a.qp, to, nil)
		require.NoError(b, err)
		sc := <-acc
		require.NotNil(b, sc)
		done := make(chan error, 1)
		go func() { done <- conn.Disconnect(ctx) }()
		<-sc.Done()
		require.NoError(b, sc.Disconnect(ctx))
		require.NoError(b, <-done)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
}
