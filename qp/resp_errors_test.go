package qp

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRespRNR(t *testing.T) {
	for _, op := range []packet.Opcode{packet.RCSendOnly, packet.RCSendFirst, packet.RCWriteOnlyImm} {
		t.Run(op.String(), func(t *testing.T) {
			r := newRespRig(t, RC)
			mk := func() packet.Packet {
				n := 10
				if op == packet.RCSendFirst {
					n = rspMTU
				}
				return rspPkt(op, rspPSN, rspFill(n, 0), func(p *packet.Packet) {
					rspReth(rspRemoteVA, rspRemoteKey, uint32(n))(p)
					p.BTH.AckReq = true
				})
			}
			r.recv(mk())
			rspRequireAck(t, r.drain(), packet.MakeRNR(rspRNR), rspPSN, 0)
			assert.Equal(t, uint64(1), r.q.counters.SendRNRErr)
			assert.Equal(t, RTR, r.q.State())
			// The PSN was not consumed: the retry is accepted.
			r.post(3, 0, 4096)
			r.recv(mk())
			out := r.drain()
			if op == packet.RCSendFirst {
				rspRequireAck(t, out, packet.SyndromeACKUnlimited, rspPSN, 0)
			} else {
				rspRequireAck(t, out, packet.SyndromeACKUnlimited, rspPSN, 1)
				require.Len(t, r.wcs(), 1)
			}
		})
	}
}

func TestRespRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		p    packet.Packet
	}{
		{"write bad rkey", rspPkt(packet.RCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, 0x99, 8))},
		{"write out of bounds", rspPkt(packet.RCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA+64<<10-4, rspRemoteKey, 8))},
		{"write first covers too much", rspPkt(packet.RCWriteFirst, rspPSN, rspFill(rspMTU, 0), rspReth(rspRemoteVA, rspRemoteKey, 65<<10))},
		{"write to region without remote write", rspPkt(packet.RCWriteOnly, rspPSN, rspFill(8, 0), rspReth(0, rspRecvKey, 8))},
		{"read bad rkey", rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, 0x99, 8))},
		{"read out of bounds", rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 64<<10+1))},
		{"read region without remote read", rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(0, rspRecvKey, 8))},
		{"atomic bad rkey", rspPkt(packet.RCCompareSwap, rspPSN, nil, func(p *packet.Packet) {
			p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: 0x99}
		})},
		{"atomic region without atomic", rspPkt(packet.RCFetchAdd, rspPSN, nil, func(p *packet.Packet) {
			p.AtomicETH = packet.AtomicETHFields{VA: 0, RKey: rspRecvKey}
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, RC)
			r.post(9, 0, 64)
			r.recv(c.p)
			r.requireFatal(packet.SyndromeNAKRemAccess, rspPSN, EventQPAccessErr)
			wcs := r.wcs()
			require.Len(t, wcs, 1, "the posted receive is flushed")
			assert.Equal(t, WCWRFlushErr, wcs[0].Status)
			assert.Equal(t, uint64(9), wcs[0].ID)
		})
	}
}

func TestRespInvalidRequests(t *testing.T) {
	noAccess := func(a Access) rspOpt { return rspWithAccess(rspAllAccess() &^ a) }
	cases := []struct {
		name    string
		opts    []rspOpt
		before  []packet.Packet // accepted first
		p       packet.Packet
		wqeStat WCStatus // status of the receive WQE in use, if any
	}{
		{name: "write without REMOTE_WRITE", opts: []rspOpt{noAccess(AccessRemoteWrite)},
			p: rspPkt(packet.RCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, rspRemoteKey, 8))},
		{name: "read without REMOTE_READ", opts: []rspOpt{noAccess(AccessRemoteRead)},
			p: rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 8))},
		{name: "atomic without REMOTE_ATOMIC", opts: []rspOpt{noAccess(AccessRemoteAtomic)},
			p: rspPkt(packet.RCFetchAdd, rspPSN, nil, func(p *packet.Packet) {
				p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey}
			})},
		{name: "read with max_dest_rd_atomic 0", opts: []rspOpt{rspWithMaxDestRdAtomic(0)},
			p: rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 8))},
		{name: "misaligned atomic",
			p: rspPkt(packet.RCCompareSwap, rspPSN, nil, func(p *packet.Packet) {
				p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA + 4, RKey: rspRemoteKey}
			})},
		{name: "send middle without first", p: rspPkt(packet.RCSendMiddle, rspPSN, rspFill(rspMTU, 0), nil)},
		{name: "send last without first", p: rspPkt(packet.RCSendLast, rspPSN, rspFill(8, 0), nil)},
		{name: "write last without first", p: rspPkt(packet.RCWriteLast, rspPSN, rspFill(8, 0), nil)},
		{name: "send only inside a send",
			before:  []packet.Packet{rspPkt(packet.RCSendFirst, rspPSN-1, rspFill(rspMTU, 0), nil)},
			p:       rspPkt(packet.RCSendOnly, rspPSN, rspFill(8, 0), nil),
			wqeStat: WCRemInvReqErr},
		{name: "write middle inside a send",
			before:  []packet.Packet{rspPkt(packet.RCSendFirst, rspPSN-1, rspFill(rspMTU, 0), nil)},
			p:       rspPkt(packet.RCWriteMiddle, rspPSN, rspFill(rspMTU, 0), nil),
			wqeStat: WCRemInvReqErr},
		{name: "read inside a write",
			before: []packet.Packet{rspPkt(packet.RCWriteFirst, rspPSN-1, rspFill(rspMTU, 0), rspReth(rspRemoteVA, rspRemoteKey, 1000))},
			p:      rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 8))},
		{name: "send first shorter than mtu", p: rspPkt(packet.RCSendFirst, rspPSN, rspFill(rspMTU-4, 0), nil), wqeStat: WCRemInvReqErr},
		{name: "send only longer than mtu", p: rspPkt(packet.RCSendOnly, rspPSN, rspFill(rspMTU+4, 0), nil), wqeStat: WCRemInvReqErr},
		{name: "send last empty",
			before:  []packet.Packet{rspPkt(packet.RCSendFirst, rspPSN-1, rspFill(rspMTU, 0), nil)},
			p:       rspPkt(packet.RCSendLast, rspPSN, nil, nil),
			wqeStat: WCRemInvReqErr},
		{name: "write only shorter than reth", p: rspPkt(packet.RCWriteOnly, rspPSN, rspFill(8, 0), rspReth(rspRemoteVA, rspRemoteKey, 12))},
		{name: "write last short of reth",
			before: []packet.Packet{rspPkt(packet.RCWriteFirst, rspPSN-1, rspFill(rspMTU, 0), rspReth(rspRemoteVA, rspRemoteKey, 600))},
			p:      rspPkt(packet.RCWriteLast, rspPSN, rspFill(8, 0), nil)},
		{name: "reth length over 2^31", p: rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 1<<31+1))},
		{name: "flush unsupported", p: rspPkt(packet.RCFlush, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 8))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, RC, append([]rspOpt{rspWithRQPSN(rspPSN - uint32(len(c.before)))}, c.opts...)...)
			r.post(9, 0, 4096)
			r.post(10, 4096, 64)
			for _, b := range c.before {
				r.recv(b)
			}
			require.Empty(t, r.drain())
			r.recv(c.p)
			r.requireFatal(packet.SyndromeNAKInvReq, rspPSN, EventQPReqErr)
			wcs := r.wcs()
			if c.wqeStat != WCSuccess {
				require.Len(t, wcs, 2)
				assert.Equal(t, WC{ID: 9, Status: c.wqeStat, Opcode: WCRecv, QPN: rspQPN}, wcs[0])
				assert.Equal(t, WCWRFlushErr, wcs[1].Status)
			} else {
				require.Len(t, wcs, 2)
				assert.Equal(t, WCWRFlushErr, wcs[0].Status)
				assert.Equal(t, uint64(9), wcs[0].ID)
			}
		})
	}
}

func TestRespRecvOverflowRC(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 100)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(101, 0), nil))
	r.requireFatal(packet.SyndromeNAKInvReq, rspPSN, EventQPReqErr)
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCLocLenErr, wcs[0].Status)
	assert.Equal(t, make([]byte, 101), r.recvBuf()[:101], "nothing is placed")
}

func TestRespMalformedRecvWQE(t *testing.T) {
	r := newRespRig(t, RC)
	require.NoError(t, r.q.PostRecv(&RecvWR{ID: 4, SGL: []SGE{{Addr: 0, Length: 64, LKey: 0x4242}}}))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(10, 0), nil))
	r.requireFatal(packet.SyndromeNAKRemOp, rspPSN, EventQPFatal)
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCLocQPOpErr, wcs[0].Status)
}

func TestRespSendWithInvalidate(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		r := newRespRig(t, RC)
		r.post(1, 0, 64)
		r.recv(rspPkt(packet.RCSendOnlyInv, rspPSN, rspFill(8, 0), func(p *packet.Packet) { p.IETH = rspRemoteKey }))
		wcs := r.wcs()
		require.Len(t, wcs, 1)
		assert.Equal(t, WC{ID: 1, Opcode: WCRecv, ByteLen: 8, Imm: rspRemoteKey, Flags: WCWithInv, QPN: rspQPN}, wcs[0])
		assert.Equal(t, []uint32{rspRemoteKey}, r.mem.Invalidated)
	})
	t.Run("unknown key", func(t *testing.T) {
		r := newRespRig(t, RC)
		r.post(1, 0, 64)
		r.recv(rspPkt(packet.RCSendOnlyInv, rspPSN, rspFill(8, 0), func(p *packet.Packet) { p.IETH = 0x5555 }))
		r.requireFatal(packet.SyndromeNAKInvReq, rspPSN, EventQPReqErr)
		wcs := r.wcs()
		require.Len(t, wcs, 1)
		assert.Equal(t, WCRemInvReqErr, wcs[0].Status)
	})
}

func TestRespReadMemoryGoneAtTransmit(t *testing.T) {
	r := newRespRig(t, RC)
	r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	var o Outgoing
	require.True(t, r.q.Transmit(r.now, &o))
	require.Equal(t, packet.RCReadResponseFirst, o.Pkt.BTH.Opcode)
	require.NoError(t, r.mem.Invalidate(rspRemoteKey, false))
	require.True(t, r.q.Transmit(r.now, &o))
	assert.Equal(t, packet.RCAcknowledge, o.Pkt.BTH.Opcode)
	assert.Equal(t, packet.SyndromeNAKRemAccess, o.Pkt.AETH.Syndrome)
	assert.Equal(t, rspPSN, o.Pkt.BTH.PSN, "the NAK names the READ request")
	assert.Equal(t, Err, r.q.State())
	assert.False(t, r.q.Pending(r.now))
}

func TestRespPSNWrap(t *testing.T) {
	r := newRespRig(t, RC, rspWithRQPSN(0xFFFFFE))
	for i := 0; i < 3; i++ {
		r.post(uint64(i), uint64(i)*64, 64)
	}
	r.recv(rspPkt(packet.RCSendOnly, 0xFFFFFE, rspFill(4, 0), nil))
	r.recv(rspPkt(packet.RCSendOnly, 0xFFFFFF, rspFill(4, 0), nil))
	r.recv(rspPkt(packet.RCSendOnly, 0, rspFill(4, 0), rspAckReq))
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, 0, 3)
	require.Len(t, r.wcs(), 3)

	// A READ whose responses cross the wrap.
	r2 := newRespRig(t, RC, rspWithRQPSN(0xFFFFFF))
	r2.recv(rspPkt(packet.RCReadRequest, 0xFFFFFF, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	out := r2.drain()
	require.Len(t, out, 3)
	assert.Equal(t, []uint32{0xFFFFFF, 0, 1}, []uint32{out[0].BTH.PSN, out[1].BTH.PSN, out[2].BTH.PSN})
	assert.Equal(t, uint32(2), r2.q.resp.psn)
	// 0xFFFFFF is now behind: a duplicate, replayed.
	r2.recv(rspPkt(packet.RCReadRequest, 0xFFFFFF, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	assert.Len(t, r2.drain(), 3)
	assert.Equal(t, uint64(1), r2.q.counters.DuplicateRequest)
	// and 3 is ahead.
	r2.recv(rspPkt(packet.RCSendOnly, 3, rspFill(4, 0), nil))
	rspRequireAck(t, r2.drain(), packet.SyndromeNAKPSNSeq, 2, 1)
}

func TestRespDropsInWrongState(t *testing.T) {
	r := newRespRig(t, RC)
	for _, st := range []State{Err, Reset} {
		require.NoError(t, r.q.Modify(&Attr{State: st}, AttrState))
		r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
		assert.Empty(t, r.drain())
	}
	attr := rspDefaultAttr()
	attr.State = Init
	require.NoError(t, r.q.Modify(&attr, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	require.NoError(t, r.q.PostRecv(&RecvWR{ID: 1, SGL: []SGE{{Addr: 0, Length: 64, LKey: rspRecvKey}}}))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
	assert.Empty(t, r.drain())
	assert.Zero(t, r.rcq.Len())
	assert.Equal(t, uint64(3), r.q.counters.DropQPState)
}

func TestRespDropsUnknownAndResponseOpcodes(t *testing.T) {
	r := newRespRig(t, RC)
	bad := rspPkt(packet.Opcode(0x15), rspPSN, nil, nil) // no such RC opcode
	r.recvRaw(bad)
	r.q.respReceive(r.now, &Incoming{Pkt: rspPkt(packet.RCAcknowledge, rspPSN, nil, nil)})
	assert.Equal(t, uint64(2), r.q.counters.DropBadOpcode)
	assert.Empty(t, r.drain())
	assert.Equal(t, RTR, r.q.State())
}

func TestRespQueueFullDropsRequest(t *testing.T) {
	r := newRespRig(t, RC, rspWithMaxDestRdAtomic(1))
	r.q.resp.sizeResources()
	capacity := r.q.resp.outCap
	for i := 0; i < capacity; i++ {
		r.recv(rspPkt(packet.RCReadRequest, rspPSN+uint32(i), nil, rspReth(rspRemoteVA, rspRemoteKey, 8)))
	}
	r.recv(rspPkt(packet.RCReadRequest, rspPSN+uint32(capacity), nil, rspReth(rspRemoteVA, rspRemoteKey, 8)))
	assert.Equal(t, uint64(1), r.q.counters.DropRespBusy)
	assert.Len(t, r.drain(), capacity)
	// The dropped request was not executed: it is accepted when sent again.
	r.recv(rspPkt(packet.RCReadRequest, rspPSN+uint32(capacity), nil, rspReth(rspRemoteVA, rspRemoteKey, 8)))
	assert.Len(t, r.drain(), 1)
}
