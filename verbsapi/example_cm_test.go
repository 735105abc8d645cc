package verbsapi_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softroce/softroce/verbsapi"
)

// Connecting with the RDMA connection manager instead of an out-of-band
// exchange: the server listens on an rdma_cm port (rping's 7174), the client
// dials the server's address with its QP; both QPs come out in RTS,
// programmed from the REQ and REP as the kernel's rdma_cm programs them.
// Either side could be kernel rxe, or librdmacm on a real RNIC.
func Example_connectionManager() {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{
		Kind: verbsapi.LinkMem, Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	check(err)
	defer da.Close()
	defer db.Close()
	ca, err := da.Open()
	check(err)
	cb, err := db.Open()
	check(err)
	client, server := newHost(ca, verbsapi.RC), newHost(cb, verbsapi.RC)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := cb.ListenCM(7174)
	check(err)
	defer l.Close()
	accepted := make(chan *verbsapi.CMConn)
	go func() {
		req, err := l.Accept(ctx)
		check(err)
		fmt.Printf("request from %s: %q\n", req.Peer.Addr(), req.PrivateData[:5])
		// Post receives before accepting: the client may send at once.
		check(server.qp.ModifyToInit(nil))
		check(server.qp.PostRecv(&verbsapi.RecvWR{ID: 1, SGL: []verbsapi.SGE{server.mr.SGE(0, 64)}}))
		conn, err := req.Accept(ctx, server.qp, &verbsapi.CMParam{PrivateData: []byte("welcome")})
		check(err)
		accepted <- conn
	}()

	conn, err := ca.DialCM(ctx, client.qp, netip.MustParseAddrPort("10.0.0.2:7174"),
		&verbsapi.CMParam{PrivateData: []byte("hello")})
	check(err)
	fmt.Printf("connected, %v; the server says %q\n", client.qp.State(), conn.PrivateData[:7])
	sconn := <-accepted

	copy(client.mr.Bytes()[64:], "ping")
	check(client.qp.PostSend(&verbsapi.SendWR{ID: 2, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{client.mr.SGE(64, 4)}}))
	client.wait()
	server.wait()
	fmt.Printf("server received %q\n", server.mr.Bytes()[:4])

	// The client disconnects; the server hears it and answers.
	done := make(chan error)
	go func() { done <- conn.Disconnect(ctx) }()
	<-sconn.Done()
	check(sconn.Disconnect(ctx))
	check(<-done)
	fmt.Println("disconnected")
	// Output:
	// request from 10.0.0.1: "hello"
	// connected, RTS; the server says "welcome"
	// server received "ping"
	// disconnected
}
