package verbsapi_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softroce/softroce/verbsapi"
)

// Two devices on kernel UDP sockets, as two processes on two hosts would
// run them (here both in one process, on loopback addresses): each binds
// its address's port 4791, and RoCE v2 goes over UDP. No root needed.
func Example_udpLink() {
	var hosts [2]*host
	for i, addr := range []string{"127.0.83.1", "127.0.83.2"} {
		d, err := verbsapi.NewDevice(fmt.Sprintf("rxe%d", i), verbsapi.LinkConfig{
			Kind: verbsapi.LinkUDP, Addr: netip.AddrPortFrom(netip.MustParseAddr(addr), 0)})
		check(err)
		defer d.Close()
		ctx, err := d.Open()
		check(err)
		hosts[i] = newHost(ctx, verbsapi.RC)
	}
	a, b := hosts[0], hosts[1]
	connect(a.qp, b.qp)

	copy(a.mr.Bytes(), "over a kernel UDP socket")
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWrite, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, 24)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	wc := a.wait()
	fmt.Println(wc.Opcode, wc.Status)
	// The target gets no completion for a WRITE: it reads its memory
	// under the device lock (Load, or WaitByte to wait for a byte).
	got := make([]byte, 24)
	check(b.mr.Load(got, 0))
	fmt.Printf("%q\n", got)
	// Output:
	// RDMA_WRITE SUCCESS
	// "over a kernel UDP socket"
}

// UC: writes and sends without acknowledgements or retransmission; a
// lost packet loses its message. The sender's completion means "sent".
func Example_uc() {
	a, b, stop := pairOf(verbsapi.UC)
	defer stop()
	copy(a.mr.Bytes(), "unreliable")
	// WRITE with immediate consumes a receive, and UC drops a message that
	// finds none (no RNR, no retry): post it first.
	check(b.qp.PostRecv(&verbsapi.RecvWR{ID: 2}))
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWriteImm, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, 10)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey(), Imm: 7}))
	sent, recv := a.wait(), b.wait()
	fmt.Println(sent.Opcode, sent.Status)
	fmt.Println(recv.Opcode, recv.Status, recv.Imm)
	fmt.Printf("%q\n", b.mr.Bytes()[100:110])
	// Output:
	// RDMA_WRITE SUCCESS
	// RECV_RDMA_WITH_IMM SUCCESS 7
	// "unreliable"
}

// UD: datagrams to an address handle and a remote QPN and Q_Key; the
// receiver finds the 40-byte GRH space before the payload and learns the
// sender's QPN from the completion.
func Example_ud() {
	a, b, stop := pairOf(verbsapi.UD)
	defer stop()
	dgid, err := b.ctx.QueryGID(1, 1)
	check(err)
	ah, err := a.pd.CreateAH(verbsapi.AHAttr{DGID: dgid, SGIDIndex: 1})
	check(err)
	check(b.qp.PostRecv(&verbsapi.RecvWR{ID: 9, SGL: []verbsapi.SGE{b.mr.SGE(0, 40+64)}}))
	copy(a.mr.Bytes(), "datagram")
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, 8)}, AH: ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: verbsapi.DefaultQKey}))
	sent, recv := a.wait(), b.wait()
	fmt.Println(sent.Opcode, sent.Status)
	fmt.Println(recv.Opcode, recv.Status, recv.ByteLen, recv.SrcQP == a.qp.QPN())
	fmt.Printf("%q\n", b.mr.Bytes()[40:48])
	// Output:
	// SEND SUCCESS
	// RECV SUCCESS 48 true
	// "datagram"
}

// A shared receive queue feeds several QPs from one pool of receives, and
// raises an asynchronous event, to the context that created it, when the
// pool falls below its limit.
func Example_srqAndEvents() {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{
		Kind: verbsapi.LinkMem, Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	check(err)
	defer da.Close()
	defer db.Close()
	ca, err := da.Open()
	check(err)
	cb, err := db.Open()
	check(err)
	a := newHost(ca, verbsapi.RC)

	pd, err := cb.AllocPD()
	check(err)
	cq, err := cb.CreateCQ(16, nil)
	check(err)
	srq, err := pd.CreateSRQ(verbsapi.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	check(err)
	mr, err := pd.RegMR(make([]byte, 1024), verbsapi.AccessLocalWrite)
	check(err)
	q, err := pd.CreateQP(verbsapi.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbsapi.RC,
		Cap: verbsapi.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	check(err)
	connect(a.qp, q)
	for i := range 4 {
		check(srq.PostRecv(&verbsapi.RecvWR{ID: uint64(i), SGL: []verbsapi.SGE{mr.SGE(i*100, 100)}}))
	}
	check(srq.ModifyLimit(3)) // tell me when fewer than 3 remain
	for range 2 {
		check(a.qp.PostSend(&verbsapi.SendWR{Opcode: verbsapi.WRSend, SGL: []verbsapi.SGE{a.mr.SGE(0, 10)}}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := cb.GetAsyncEvent(ctx)
	check(err)
	fmt.Println(verbsapi.EventName(e.Type), e.SRQ == srq)
	// Output:
	// SRQ limit reached true
}

// pairOf is connectedPair for a QP type other than RC.
func pairOf(t verbsapi.QPType) (a, b *host, stop func()) {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{
		Kind: verbsapi.LinkMem, Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	check(err)
	ca, err := da.Open()
	check(err)
	cb, err := db.Open()
	check(err)
	a, b = newHost(ca, t), newHost(cb, t)
	if t == verbsapi.UD {
		check(a.qp.Connect(0, verbsapi.Endpoint{}, nil))
		check(b.qp.Connect(0, verbsapi.Endpoint{}, nil))
	} else {
		connect(a.qp, b.qp)
	}
	return a, b, func() {
		check(da.Close())
		check(db.Close())
	}
}
