package qp

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUCSendAndWriteNoAcks(t *testing.T) {
	r := newRespRig(t, UC)
	r.post(1, 0, 4096)
	data := rspFill(300, 2)
	r.recv(rspPkt(packet.UCSendFirst, rspPSN, data[:256], rspAckReq))
	r.recv(rspPkt(packet.UCSendLastImm, rspPSN+1, data[256:], func(p *packet.Packet) { p.Imm = 7; p.BTH.AckReq = true }))
	r.recv(rspPkt(packet.UCWriteOnly, rspPSN+2, data[:20], rspReth(rspRemoteVA, rspRemoteKey, 20)))
	assert.Empty(t, r.drain(), "UC never answers")
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 1, Opcode: WCRecv, ByteLen: 300, Imm: 7, Flags: WCWithImm, QPN: rspQPN}, wcs[0])
	assert.Equal(t, data, r.recvBuf()[:300])
	assert.Equal(t, data[:20], r.remote(0, 20))
}

func TestUCGapDropsUntilFirst(t *testing.T) {
	r := newRespRig(t, UC)
	r.post(1, 0, 4096)
	r.post(2, 4096, 4096)
	msg := rspFill(600, 5)
	r.recv(rspPkt(packet.UCSendFirst, rspPSN, msg[:256], nil))
	// rspPSN+1 is lost.
	r.recv(rspPkt(packet.UCSendLast, rspPSN+2, msg[512:], nil))
	r.recv(rspPkt(packet.UCSendMiddle, rspPSN+3, msg[:256], nil))
	assert.Equal(t, uint64(2), r.q.counters.DropUCGap)
	assert.Zero(t, r.rcq.Len())
	// A new message starts at a FIRST after the gap and reuses the
	// abandoned message's WQE from its start.
	next := rspFill(300, 9)
	r.recv(rspPkt(packet.UCSendFirst, rspPSN+10, next[:256], nil))
	r.recv(rspPkt(packet.UCSendLast, rspPSN+11, next[256:], nil))
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, uint64(1), wcs[0].ID)
	assert.Equal(t, uint32(300), wcs[0].ByteLen)
	assert.Equal(t, next, r.recvBuf()[:300])
	assert.Equal(t, RTR, r.q.State())
	// An ONLY after a gap is accepted too.
	r.recv(rspPkt(packet.UCSendOnly, rspPSN+20, next[:10], nil))
	wcs = r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, uint64(2), wcs[0].ID)
}

func TestUCDrops(t *testing.T) {
	cases := []struct {
		name    string
		opts    []rspOpt
		p       packet.Packet
		counter func(*Counters) uint64
	}{
		{"write without REMOTE_WRITE", []rspOpt{rspWithAccess(AccessLocalWrite)},
			rspPkt(packet.UCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, rspRemoteKey, 8)),
			func(c *Counters) uint64 { return c.DropAccess }},
		{"write bad rkey", nil,
			rspPkt(packet.UCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, 0x99, 8)),
			func(c *Counters) uint64 { return c.DropAccess }},
		{"write length mismatch", nil,
			rspPkt(packet.UCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, rspRemoteKey, 9)),
			func(c *Counters) uint64 { return c.DropBadLength }},
		{"send only over mtu", nil,
			rspPkt(packet.UCSendOnly, rspPSN, rspFill(rspMTU+1, 0), nil),
			func(c *Counters) uint64 { return c.DropBadLength }},
		{"middle without first", nil,
			rspPkt(packet.UCSendMiddle, rspPSN, rspFill(rspMTU, 0), nil),
			func(c *Counters) uint64 { return c.DropBadOpcode }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, UC, c.opts...)
			r.post(1, 0, 4096)
			r.recv(c.p)
			assert.Equal(t, uint64(1), c.counter(r.q.counters))
			assert.Empty(t, r.drain())
			assert.Equal(t, RTR, r.q.State(), "UC errors never stop the QP")
			assert.Equal(t, make([]byte, 8), r.remote(0, 8))
			// The WQE is still there for the next message.
			r.recv(rspPkt(packet.UCSendOnly, rspPSN+1, rspFill(4, 0), nil))
			wcs := r.wcs()
			require.Len(t, wcs, 1)
			assert.Equal(t, WCSuccess, wcs[0].Status)
		})
	}
}

func TestUCNoWQEDropsMessage(t *testing.T) {
	r := newRespRig(t, UC)
	r.recv(rspPkt(packet.UCSendFirst, rspPSN, rspFill(rspMTU, 0), nil))
	r.post(1, 0, 4096)
	r.recv(rspPkt(packet.UCSendLast, rspPSN+1, rspFill(4, 0), nil))
	assert.Equal(t, uint64(1), r.q.counters.DropNoWQE)
	assert.Equal(t, uint64(1), r.q.counters.DropUCGap)
	assert.Zero(t, r.rcq.Len())
}

func TestUCRecvOverflowCompletesLocLenErr(t *testing.T) {
	r := newRespRig(t, UC)
	r.post(1, 0, 300)
	r.post(2, 300, 300)
	r.recv(rspPkt(packet.UCSendFirst, rspPSN, rspFill(rspMTU, 0), nil))
	r.recv(rspPkt(packet.UCSendMiddle, rspPSN+1, rspFill(rspMTU, 0), nil))
	r.recv(rspPkt(packet.UCSendLast, rspPSN+2, rspFill(4, 0), nil))
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 1, Status: WCLocLenErr, Opcode: WCRecv, QPN: rspQPN}, wcs[0])
	assert.Equal(t, RTR, r.q.State())
	r.recv(rspPkt(packet.UCSendOnly, rspPSN+3, rspFill(4, 0), nil))
	wcs = r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, uint64(2), wcs[0].ID)
	assert.Equal(t, WCSuccess, wcs[0].Status)
}

func udPkt(op packet.Opcode, qkey, srcQP uint32, payload []byte) packet.Packet {
	return rspPkt(op, 0, payload, func(p *packet.Packet) {
		p.DETH = packet.DETHFields{QKey: qkey, SrcQP: srcQP}
		p.Imm = 0x0A0B0C0D
	})
}

func TestUDReceiveGRH(t *testing.T) {
	a4 := packet.Addressing{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, SrcPort: 0xC001}
	a6 := packet.Addressing{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), HopLimit: 64, SrcPort: 0xC001}
	for _, c := range []struct {
		name string
		a    packet.Addressing
	}{{"ipv4", a4}, {"ipv6", a6}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, UD)
			r.post(3, 0, 20, 100) // the GRH area spans two SGEs
			payload := rspFill(50, 1)
			p := udPkt(packet.UDSendOnlyImm, rspQKey, 0x456, payload)
			hdr := c.a.AppendIPUDP(nil, p.Len())
			ip := hdr[:len(hdr)-packet.UDPLen]
			in := Incoming{Pkt: p, Src: c.a.Src, Dst: c.a.Dst, IPHeader: ip}
			r.q.Receive(r.now, &in)
			wcs := r.wcs()
			require.Len(t, wcs, 1)
			assert.Equal(t, WC{ID: 3, Opcode: WCRecv, ByteLen: 90, Imm: 0x0A0B0C0D, QPN: rspQPN,
				SrcQP: 0x456, Flags: WCWithGRH | WCWithImm}, wcs[0])
			buf := r.recvBuf()
			if len(ip) == packet.IPv4Len {
				assert.Equal(t, make([]byte, 20), buf[:20], "IPv4: 20 zero bytes first")
				assert.Equal(t, ip, buf[20:40])
			} else {
				assert.Equal(t, ip, buf[:40])
			}
			assert.Equal(t, payload, buf[40:90])
			assert.Empty(t, r.drain(), "UD never answers")
		})
	}
}

func TestUDDrops(t *testing.T) {
	r := newRespRig(t, UD, rspWithMaxMTU(1024))
	r.post(1, 0, 4096)
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey+1, 1, rspFill(8, 0))})
	assert.Equal(t, uint64(1), r.q.counters.DropBadQKey)
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(1025, 0))})
	assert.Equal(t, uint64(1), r.q.counters.DropBadLength)
	assert.Zero(t, r.rcq.Len())
	// A payload up to the port MTU is fine (UD has no path MTU).
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(1024, 0))})
	require.Len(t, r.wcs(), 1)
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(8, 0))})
	assert.Equal(t, uint64(1), r.q.counters.DropNoWQE)
	assert.Equal(t, RTR, r.q.State())
}

func TestUDRecvTooSmall(t *testing.T) {
	r := newRespRig(t, UD)
	r.post(1, 0, 60)
	r.post(2, 100, 100)
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(21, 0))})
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(20, 0))})
	wcs := r.wcs()
	require.Len(t, wcs, 2)
	assert.Equal(t, WCLocLenErr, wcs[0].Status, "40-byte GRH + 21 bytes do not fit 60")
	assert.Equal(t, uint64(1), wcs[0].ID)
	assert.Equal(t, WCSuccess, wcs[1].Status)
	assert.Equal(t, uint32(60), wcs[1].ByteLen)
	assert.Equal(t, RTR, r.q.State())
}

func TestUDMalformedWQEStopsQP(t *testing.T) {
	r := newRespRig(t, UD)
	require.NoError(t, r.q.PostRecv(&RecvWR{ID: 1, SGL: []SGE{{Length: 100, LKey: 0x4321}}}))
	r.q.Receive(r.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 1, rspFill(8, 0))})
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCLocQPOpErr, wcs[0].Status)
	assert.Equal(t, Err, r.q.State())
}

func TestUCUDNoAllocs(t *testing.T) {
	uc := newRespRig(t, UC)
	ud := newRespRig(t, UD)
	wr := RecvWR{ID: 1, SGL: []SGE{{Addr: 0, Length: 64, LKey: rspRecvKey}, {Addr: 64, Length: 400, LKey: rspRecvKey}}}
	first := rspPkt(packet.UCSendFirst, 0, rspFill(rspMTU, 0), nil)
	last := rspPkt(packet.UCSendLastImm, 0, rspFill(20, 0), nil)
	write := rspPkt(packet.UCWriteOnly, 0, rspFill(64, 0), rspReth(rspRemoteVA, rspRemoteKey, 64))
	udp := udPkt(packet.UDSendOnlyImm, rspQKey, 9, rspFill(300, 0))
	ip := make([]byte, packet.IPv4Len)
	out := make([]WC, 4)
	psn := rspPSN
	step := func() {
		if uc.q.PostRecv(&wr) != nil || ud.q.PostRecv(&wr) != nil {
			panic("post")
		}
		first.BTH.PSN, last.BTH.PSN, write.BTH.PSN = psn, psnAdd(psn, 1), psnAdd(psn, 2)
		uc.q.Receive(0, &Incoming{Pkt: first})
		uc.q.Receive(0, &Incoming{Pkt: last})
		uc.q.Receive(0, &Incoming{Pkt: write})
		ud.q.Receive(0, &Incoming{Pkt: udp, IPHeader: ip})
		psn = psnAdd(psn, 3)
		uc.rcq.Poll(out)
		ud.rcq.Poll(out)
	}
	step()
	require.Equal(t, uint64(2), uc.q.counters.RdmaRecvs+ud.q.counters.RdmaRecvs)
	assert.Zero(t, testing.AllocsPerRun(200, step))
	assert.Equal(t, uint64(2*202), uc.q.counters.RdmaRecvs+ud.q.counters.RdmaRecvs, "every step completed both (AllocsPerRun adds a warm-up run)")
}
