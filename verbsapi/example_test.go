package verbsapi_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softroce/softroce/verbsapi"
)

// host is one side of the examples' connection: a device with a PD, a CQ,
// an RC QP and a registered buffer.
type host struct {
	ctx *verbsapi.Context
	pd  *verbsapi.PD
	cq  *verbsapi.CQ
	qp  *verbsapi.QP
	mr  *verbsapi.MR
}

// connectedPair starts two devices on the ends of an in-memory link with
// the real-time runtime, and connects an RC QP on each to the other. Each
// side registers a 4 KiB buffer with every access right.
func connectedPair() (a, b *host, stop func()) {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{
		Kind: verbsapi.LinkMem, Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	check(err)
	devs := [2]*verbsapi.Device{da, db}
	var hosts [2]*host
	for i, d := range devs {
		ctx, err := d.Open()
		check(err)
		hosts[i] = newHost(ctx, verbsapi.RC)
	}
	connect(hosts[0].qp, hosts[1].qp)
	return hosts[0], hosts[1], func() {
		for _, d := range devs {
			check(d.Close()) // closes the contexts too
		}
	}
}

// newHost creates a PD, a CQ, a QP of type t and a registered 4 KiB buffer.
func newHost(ctx *verbsapi.Context, t verbsapi.QPType) *host {
	h := &host{ctx: ctx}
	var err error
	h.pd, err = h.ctx.AllocPD()
	check(err)
	h.cq, err = h.ctx.CreateCQ(64, nil)
	check(err)
	h.qp, err = h.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq, QPType: t,
		Cap: verbsapi.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err)
	h.mr, err = h.pd.RegMR(make([]byte, 4096), verbsapi.AccessAll)
	check(err)
	return h
}

// connect is the out-of-band exchange and the three ibv_modify_qp calls:
// each side learns the other's QPN, PSN and GID (index 1, the IPv4 address).
func connect(a, b *verbsapi.QP) {
	epA, err := a.Endpoint(1, 100)
	check(err)
	epB, err := b.Endpoint(1, 200)
	check(err)
	check(a.Connect(epA.PSN, epB, nil))
	check(b.Connect(epB.PSN, epA, nil))
}

// wait returns the next completion of h's CQ.
func (h *host) wait() verbsapi.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbsapi.WC, 1)
	_, err := h.cq.PollWait(ctx, wc)
	check(err)
	return wc[0]
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// An RDMA WRITE puts bytes straight into the peer's registered memory,
// without the peer posting anything; only the writer sees a completion.
func Example_write() {
	a, b, stop := connectedPair()
	defer stop()

	copy(a.mr.Bytes(), "written by RDMA")
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWrite, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(0, 15)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}))
	wc := a.wait()
	fmt.Println(wc.Opcode, wc.Status, wc.ID)
	fmt.Printf("%q\n", b.mr.Bytes()[100:115])
	// Output:
	// RDMA_WRITE SUCCESS 1
	// "written by RDMA"
}

// An RDMA READ fetches bytes from the peer's memory into a local buffer.
func Example_read() {
	a, b, stop := connectedPair()
	defer stop()

	copy(b.mr.Bytes()[2000:], "read back from the peer")
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 2, Opcode: verbsapi.WRRead, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(0, 23)},
		RemoteAddr: b.mr.Addr() + 2000, RKey: b.mr.RKey()}))
	wc := a.wait()
	fmt.Println(wc.Opcode, wc.Status, wc.ByteLen)
	fmt.Printf("%q\n", a.mr.Bytes()[:23])
	// Output:
	// RDMA_READ SUCCESS 23
	// "read back from the peer"
}

// A SEND consumes a receive the peer posted; both sides get a completion.
// This one carries immediate data and spans three 1024-byte packets.
func Example_send() {
	a, b, stop := connectedPair()
	defer stop()

	check(b.qp.PostRecv(&verbsapi.RecvWR{ID: 7, SGL: []verbsapi.SGE{b.mr.SGE(0, 4096)}}))
	msg := a.mr.Bytes()[:3000]
	for i := range msg {
		msg[i] = byte(i)
	}
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 3, Opcode: verbsapi.WRSendImm, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, len(msg))}, Imm: 0x12345678}))
	sent, recv := a.wait(), b.wait()
	fmt.Println(sent.Opcode, sent.Status)
	fmt.Println(recv.Opcode, recv.Status, recv.ID, recv.ByteLen, recv.Flags&verbsapi.WCWithImm != 0)
	fmt.Printf("imm %#x, same bytes: %v\n", recv.Imm, string(b.mr.Bytes()[:3000]) == string(msg))
	// Output:
	// SEND SUCCESS
	// RECV SUCCESS 7 3000 true
	// imm 0x12345678, same bytes: true
}

// Atomics operate on 8-byte words of the peer's memory and return the value
// before the operation into a local 8-byte buffer.
func Example_atomic() {
	a, b, stop := connectedPair()
	defer stop()

	word := b.mr.Bytes()[64:72]
	binary.LittleEndian.PutUint64(word, 40)
	// Values travel in host order of the responder's memory; softroce's
	// memory is little-endian like the machines rxe runs on.
	check(a.qp.PostSend(&verbsapi.SendWR{ID: 4, Opcode: verbsapi.WRFetchAdd, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 2}))
	wc := a.wait()
	fmt.Println(wc.Opcode, wc.Status, "old", binary.LittleEndian.Uint64(a.mr.Bytes()), "new", binary.LittleEndian.Uint64(word))

	check(a.qp.PostSend(&verbsapi.SendWR{ID: 5, Opcode: verbsapi.WRCmpSwap, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(8, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 7}))
	wc = a.wait()
	fmt.Println(wc.Opcode, wc.Status, "old", binary.LittleEndian.Uint64(a.mr.Bytes()[8:]), "new", binary.LittleEndian.Uint64(word))
	// Output:
	// FETCH_ADD SUCCESS old 40 new 42
	// COMP_SWAP SUCCESS old 42 new 7
}
