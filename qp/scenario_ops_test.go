package qp_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// TestUCGap: a UC message that loses a MIDDLE packet is dropped whole, and
// the next message arrives intact; UC requesters complete on send. (Which
// receive WQE the next message lands in is not asserted: rxe leaves the
// broken message's WQE at the head of the queue and reuses it.)
func TestUCGap(t *testing.T) {
	l := defaultLink()
	h := pair(t, qp.UC, l)
	h.Drop(All(FromA(), Op(packet.UCSendMiddle)), 1)
	fill(h.A.local, 17)
	h.B.postRecv(t, 100, 0, 8192)
	h.B.postRecv(t, 101, 8192, 8192)
	h.A.postSend(t, sendWR(1, 0, multiSize))
	h.A.postSend(t, sendWR(2, 0x4000, 1500))
	h.MustRun(nil)
	requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
	var ok []qp.WC
	for _, w := range h.B.recvWCs {
		if w.Status == qp.WCSuccess {
			ok = append(ok, w)
		}
	}
	require.Len(t, ok, 1, "only the second message arrives: %s", wcsString(h.B.recvWCs))
	require.Equal(t, uint32(1500), ok[0].ByteLen)
	off := uint64(0)
	if ok[0].ID == 101 {
		off = 8192
	}
	require.Equal(t, h.A.local[0x4000:0x4000+1500], h.B.local[off:off+1500])
	require.NotZero(t, h.B.qp.Counters().DropUCGap)
	require.Empty(t, h.Select(FromB()), "UC sends no ACKs")
	require.Equal(t, qp.RTS, h.B.qp.State())
}

// udPair returns two UD QPs in RTS with QKey 0x11111111.
func udPair(t *testing.T) *Harness {
	h := newHarness(t, epConfig{Type: qp.UD}, epConfig{Type: qp.UD})
	h.connect(defaultLink())
	return h
}

func udSend(h *Harness, id uint64, off uint64, n uint32, qkey uint32) qp.SendWR {
	av := h.B.av()
	return qp.SendWR{ID: id, Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}},
		AH: &av, RemoteQPN: h.B.qp.QPN(), RemoteQKey: qkey}
}

// TestUDQKeyMismatch: a UD SEND with the wrong QKey is dropped and counted;
// the next, right one is received.
func TestUDQKeyMismatch(t *testing.T) {
	h := udPair(t)
	fill(h.A.local, 18)
	h.B.postRecv(t, 100, 0, 40+1024)
	h.B.postRecv(t, 101, 4096, 40+1024)
	h.A.postSend(t, udSend(h, 1, 0, 300, 0x22222222))
	h.A.postSend(t, udSend(h, 2, 1024, 400, 0x11111111))
	h.MustRun(nil)
	requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
	require.Equal(t, uint32(40+400), h.B.recvWCs[0].ByteLen)
	require.Equal(t, h.A.qp.QPN(), h.B.recvWCs[0].SrcQP)
	require.Equal(t, h.A.local[1024:1024+400], h.B.local[40:40+400])
	require.Equal(t, uint64(1), h.B.qp.Counters().DropBadQKey)
	require.Len(t, h.Frames, 2)
	require.Equal(t, uint32(0x22222222), h.Frames[0].Pkt.DETH.QKey)
}

// TestUDGRH: a UD receive gets the 40-byte GRH area first: for IPv4, 20
// zero bytes and then the packet's IPv4 header as it was on the wire; for
// IPv6, the IPv6 header.
func TestUDGRH(t *testing.T) {
	t.Run("IPv6", func(t *testing.T) {
		h := newHarness(t, epConfig{Type: qp.UD, IPv6: true}, epConfig{Type: qp.UD, IPv6: true})
		h.connect(defaultLink())
		fill(h.A.local, 27)
		h.B.postRecv(t, 100, 0, 40+300)
		h.A.postSend(t, udSend(h, 1, 0, 300, 0x11111111))
		h.MustRun(nil)
		requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
		require.Equal(t, uint32(40+300), h.B.recvWCs[0].ByteLen)
		require.NotZero(t, h.B.recvWCs[0].Flags&qp.WCWithGRH)
		require.Len(t, h.Frames, 1)
		require.Equal(t, byte(6), h.Frames[0].Data[0]>>4, "an IPv6 packet")
		require.Equal(t, h.Frames[0].Data[:packet.IPv6Len], h.B.local[:40], "the GRH area is the IPv6 header")
		require.Equal(t, h.A.local[:300], h.B.local[40:340])
	})
	h := udPair(t)
	fill(h.A.local, 19)
	fill(h.B.local[:40], 20) // garbage the receive must overwrite
	h.B.postRecv(t, 100, 0, 40+512)
	h.A.postSend(t, udSend(h, 1, 0, 512, 0x11111111))
	h.MustRun(nil)
	requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
	w := h.B.recvWCs[0]
	require.Equal(t, uint32(40+512), w.ByteLen)
	require.NotZero(t, w.Flags&qp.WCWithGRH, "IBV_WC_GRH set")
	require.Equal(t, h.A.qp.QPN(), w.SrcQP)
	require.Len(t, h.Frames, 1)
	f := h.Frames[0]
	require.Equal(t, make([]byte, 20), h.B.local[:20], "first 20 bytes of the GRH area are zero for IPv4")
	require.Equal(t, f.Data[:packet.IPv4Len], h.B.local[20:40], "then the IPv4 header")
	require.True(t, bytes.Equal(h.A.local[:512], h.B.local[40:40+512]))
	require.Equal(t, packet.UDSendOnly, f.Op())
	require.Equal(t, h.A.qp.QPN(), f.Pkt.DETH.SrcQP)
}

// TestACKDuringResend: the only ACK of a multi-packet SEND is lost, so the
// requester resends the whole message after a timeout; the responder, which
// has it all, re-ACKs every duplicate with the message's last PSN while the
// resend is still going. Those ACKs must complete the SEND (rxe's completer
// completes the oldest WQE on a response carrying its last PSN even when
// that PSN is behind comp.psn) without waiting for another timeout.
func TestACKDuringResend(t *testing.T) {
	l := defaultLink()
	l.Timeout = 12
	h := pair(t, qp.RC, l)
	h.Burst = 1 // let ACKs interleave with the resend
	h.Drop(All(FromB(), Op(packet.RCAcknowledge)), 1)
	fill(h.A.local, 21)
	h.B.postRecv(t, 100, 0, 8192)
	h.A.postSend(t, sendWR(1, 0, multiSize))
	h.MustRun(h.sendsDone(h.A, 1))
	requireWCs(t, h.A.sendWCs, []uint64{1}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
	T := ackTimeout(l.Timeout)
	require.Less(t, h.A.sendWCAt[0], 2*T, "completed by the resend's ACKs, not after a second timeout\n%s", h.Dump(30))
	require.Len(t, h.Select(FromA(), Op(packet.RCSendFirst)), 2, "sent twice\n%s", h.Dump(30))
	h.MustRun(nil)
}

// TestFence: a fenced WR waits until every earlier READ and atomic has
// completed (IBTA 10.8.3.3): its first packet goes out only after the
// requester has received the last response of the READ before it, while an
// unfenced WR does not wait.
func TestFence(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			h.Burst = 32
			fill(h.A.local, 22)
			fill(h.B.remote, 23)
			h.B.postRecv(t, 100, 0, 4096)
			h.A.postSend(t, readWR(1, 0x8000, 0, 4*1024))
			wr := sendWR(2, 0, 100)
			if fenced {
				wr.Flags |= qp.SendFence
			}
			h.A.postSend(t, wr)
			h.MustRun(func() bool { return len(h.A.sendWCs) == 2 })
			requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
			last := h.Select(FromB(), Op(packet.RCReadResponseLast))
			send := h.Select(FromA(), Op(packet.RCSendOnly))
			require.Len(t, last, 1)
			require.Len(t, send, 1)
			if fenced {
				require.Greater(t, send[0].Seq, last[0].Seq, "fenced SEND after the READ's last response\n%s", h.Dump(20))
				require.GreaterOrEqual(t, send[0].Time, last[0].DeliverAt)
			} else {
				require.Less(t, send[0].Seq, last[0].Seq, "unfenced SEND does not wait\n%s", h.Dump(20))
			}
			require.Equal(t, h.B.remote[:4096], h.A.local[0x8000:0x8000+4096])
		})
	}
}

// TestSendWithInvalidate: SEND_WITH_INV delivers the message, reports the
// invalidated rkey in the receive completion (IBV_WC_WITH_INV) and
// invalidates it: a later WRITE with that rkey is NAKed remote access
// error. LOCAL_INV invalidates a local key in queue order: a later SEND
// from it fails locally with LOC_PROT_ERR.
func TestSendWithInvalidate(t *testing.T) {
	t.Run("SEND_WITH_INV", func(t *testing.T) {
		h := pair(t, qp.RC, defaultLink())
		fill(h.A.local, 24)
		h.B.postRecv(t, 100, 0, 4096)
		h.B.postRecv(t, 101, 4096, 4096)
		wr := sendWR(1, 0, 2000)
		wr.Opcode, wr.InvRKey = qp.WRSendInv, remoteKey
		h.A.postSend(t, wr)
		h.MustRun(func() bool { return len(h.A.sendWCs) == 1 && len(h.B.recvWCs) == 1 })
		requireWCs(t, h.A.sendWCs, []uint64{1}, qp.WCSuccess)
		requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
		w := h.B.recvWCs[0]
		require.NotZero(t, w.Flags&qp.WCWithInv)
		require.Equal(t, remoteKey, w.Imm, "the invalidated rkey")
		require.Equal(t, uint32(2000), w.ByteLen)
		require.Equal(t, h.A.local[:2000], h.B.local[:2000])
		require.Len(t, h.Select(FromA(), Op(packet.RCSendFirst)), 1)
		inv := h.Select(FromA(), Op(packet.RCSendLastInv, packet.RCSendOnlyInv))
		require.Len(t, inv, 1, "2000 bytes at MTU 1024 end in SEND_LAST_WITH_INVALIDATE")
		require.Equal(t, packet.RCSendLastInv, inv[0].Op())
		require.Equal(t, remoteKey, inv[0].Pkt.IETH)
	})
	t.Run("SEND_WITH_INV then WRITE", func(t *testing.T) {
		h := pair(t, qp.RC, defaultLink())
		h.B.postRecv(t, 100, 0, 4096)
		wr := sendWR(1, 0, 100)
		wr.Opcode, wr.InvRKey = qp.WRSendInv, remoteKey
		h.A.postSend(t, wr)
		h.A.postSend(t, writeWR(2, 0, 0, 64))
		h.MustRun(h.sendsDone(h.A, 2))
		require.Equal(t, qp.WCSuccess, h.A.sendWCs[0].Status)
		require.Equal(t, qp.WCRemAccessErr, h.A.sendWCs[1].Status, "%s", h.Dump(10))
		require.Len(t, h.Select(FromA(), Op(packet.RCSendOnlyInv)), 1)
		require.Equal(t, remoteKey, h.Select(FromA(), Op(packet.RCSendOnlyInv))[0].Pkt.IETH)
	})
	t.Run("LOCAL_INV", func(t *testing.T) {
		h := pair(t, qp.RC, defaultLink())
		extra := make([]byte, 4096)
		h.A.mem.Register(0x400, 0x40_0000, extra, qp.AccessLocalWrite)
		h.B.postRecv(t, 100, 0, 4096)
		h.B.postRecv(t, 101, 4096, 4096)
		send := func(id uint64) qp.SendWR {
			return qp.SendWR{ID: id, Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: 0x40_0000, Length: 64, LKey: 0x400}}}
		}
		h.A.postSend(t, send(1))
		h.A.postSend(t, qp.SendWR{ID: 2, Opcode: qp.WRLocalInv, InvRKey: 0x400})
		h.A.postSend(t, send(3))
		h.MustRun(h.sendsDone(h.A, 3))
		require.Equal(t, qp.WCSuccess, h.A.sendWCs[0].Status)
		require.Equal(t, qp.WCSuccess, h.A.sendWCs[1].Status)
		require.Equal(t, qp.WCLocalInv, h.A.sendWCs[1].Opcode)
		require.Equal(t, qp.WCLocProtErr, h.A.sendWCs[2].Status)
		requireWCs(t, h.B.recvWCs[:1], []uint64{100}, qp.WCSuccess)
		require.Len(t, h.Select(FromA(), Op(packet.RCSendOnly)), 1, "nothing sent from the invalidated key")
	})
}

// TestAckReqPlacement: an RC requester sets AckReq on the last packet of
// every message and, inside a long message, on every 66th packet since the
// last AckReq (rxe: ack_req = END || noack_pkts++ > RXE_MAX_PKT_PER_ACK);
// UC and UD requesters never set it.
func TestAckReqPlacement(t *testing.T) {
	l := defaultLink()
	l.MTU = 256
	h := pair(t, qp.RC, l)
	h.B.postRecv(t, 100, 0, 1<<16)
	h.A.postSend(t, writeWR(1, 0, 0, 200*256))
	h.A.postSend(t, sendWR(2, 0, 70*256))
	h.MustRun(h.sendsDone(h.A, 2))
	requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
	var got []int
	for i, f := range h.Select(FromA()) {
		if f.Pkt.BTH.AckReq {
			got = append(got, i)
		}
	}
	// WRITE: packets 0..199; SEND: 200..269.
	require.Equal(t, []int{65, 131, 197, 199, 265, 269}, got)
	for _, f := range h.Select(FromB()) {
		require.Contains(t, []uint32{65, 131, 197, 199, 265, 269}, (f.PSN()-l.APSN)&0xFFFFFF,
			"ACKs answer AckReq packets only")
	}

	for _, typ := range []qp.Type{qp.UC, qp.UD} {
		t.Run(typ.String(), func(t *testing.T) {
			var h *Harness
			var wr qp.SendWR
			if typ == qp.UD {
				h = udPair(t)
				wr = udSend(h, 1, 0, 200, 0x11111111)
			} else {
				h = pair(t, typ, l)
				wr = sendWR(1, 0, 3000)
			}
			h.B.postRecv(t, 100, 0, 8192)
			h.A.postSend(t, wr)
			h.MustRun(nil)
			requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
			for _, f := range h.Frames {
				require.False(t, f.Pkt.BTH.AckReq, "%v", f)
			}
		})
	}
}

// TestUnackedWindow: an RC requester runs at most RXE_MAX_UNACKED_PSNS
// (128) PSNs ahead of the oldest unacknowledged one, so with every ACK lost
// it sends PSNs first..first+128 and then waits for its timer.
func TestUnackedWindow(t *testing.T) {
	l := defaultLink()
	l.MTU = 256
	h := pair(t, qp.RC, l)
	h.Burst = 64
	h.Drop(FromB(), 0)
	h.A.postSend(t, writeWR(1, 0, 0, 300*256))
	require.NoError(t, h.Run(func() bool { return h.Now >= ackTimeout(l.Timeout)/2 }))
	fs := h.Select(FromA())
	require.Len(t, fs, 129, "PSNs %#x..%#x", l.APSN, psnAdd(l.APSN, 128))
	require.Equal(t, psnAdd(l.APSN, 128), fs[len(fs)-1].PSN())
}

// TestResponderErrors: receive-side failures of an RC SEND. A receive WQE
// whose SGL names a bad lkey is rxe's malformed WQE (class A): NAK remote
// operational error, the requester completes REM_OP_ERR, the responder
// LOC_QP_OP_ERR. A message longer than the receive buffer gets NAK invalid
// request (REM_INV_REQ_ERR at the requester; the responder's completion is
// LOC_LEN_ERR, as IBTA and hardware report, where rxe says
// REM_INV_REQ_ERR). Both QPs end in ERR either way.
func TestResponderErrors(t *testing.T) {
	for _, c := range []struct {
		name          string
		recv          qp.RecvWR
		syn           packet.Syndrome
		reqWC, respWC qp.WCStatus
	}{
		{"bad lkey in receive", qp.RecvWR{ID: 100, SGL: []qp.SGE{{Addr: localVA, Length: 4096, LKey: 0x777}}},
			packet.SyndromeNAKRemOp, qp.WCRemOpErr, qp.WCLocQPOpErr},
		{"receive too small", qp.RecvWR{ID: 100, SGL: []qp.SGE{{Addr: localVA, Length: 1000, LKey: localKey}}},
			packet.SyndromeNAKInvReq, qp.WCRemInvReqErr, qp.WCLocLenErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			recv := c.recv
			require.NoError(t, h.B.qp.PostRecv(&recv))
			h.B.postRecv(t, 101, 8192, 4096)
			h.A.postSend(t, sendWR(1, 0, 2000))
			h.A.postSend(t, sendWR(2, 0, 10))
			h.MustRun(func() bool { return len(h.A.sendWCs) == 2 && len(h.B.recvWCs) == 2 })
			h.MustRun(nil)
			naks := h.Select(FromB(), NAK())
			require.Len(t, naks, 1, "%s", h.Dump(20))
			require.Equal(t, c.syn, naks[0].Pkt.AETH.Syndrome)
			require.Equal(t, c.reqWC, h.A.sendWCs[0].Status)
			require.Equal(t, qp.WCWRFlushErr, h.A.sendWCs[1].Status)
			require.Equal(t, c.respWC, h.B.recvWCs[0].Status)
			require.Equal(t, uint64(100), h.B.recvWCs[0].ID)
			require.Equal(t, qp.WCWRFlushErr, h.B.recvWCs[1].Status)
			require.Equal(t, qp.Err, h.A.qp.State())
			require.Equal(t, qp.Err, h.B.qp.State())
		})
	}
}

// TestCQOverflow: a completion that finds its CQ full overflows it: the CQ
// raises EventCQErr, the QP that pushed raises EventQPFatal and goes to ERR.
func TestCQOverflow(t *testing.T) {
	h := newHarness(t, epConfig{Type: qp.RC, CQDepth: 2}, epConfig{Type: qp.RC})
	h.connect(defaultLink())
	var cqEvents []qp.Event
	h.A.sendCQ.Events = func(e qp.Event) { cqEvents = append(cqEvents, e) }
	for i := uint64(0); i < 4; i++ {
		h.B.postRecv(t, 100+i, i*4096, 4096)
		h.A.postSend(t, sendWR(1+i, 0, 100))
	}
	// Nobody polls A's send CQ during the run.
	for k := 0; k < 1000 && h.A.qp.State() == qp.RTS; k++ {
		h.tick()
		h.transmit(0)
		h.transmit(1)
		for len(h.queue) > 0 {
			h.deliver()
		}
	}
	require.True(t, h.A.sendCQ.Overflowed())
	require.Equal(t, []qp.Event{{Type: qp.EventCQErr}}, cqEvents)
	require.Equal(t, qp.Err, h.A.qp.State())
	require.Contains(t, h.A.events, qp.Event{Type: qp.EventQPFatal, QPN: h.A.qp.QPN()})
	h.A.poll(h.Now)
	require.Len(t, h.A.sendWCs, 2, "the CQ kept what it held")
}

// TestResetAndReuse: QPs that went to ERR are moved to RESET and brought up
// again with new PSNs; they then carry traffic as new (nothing from their
// earlier life is completed again or sent).
func TestResetAndReuse(t *testing.T) {
	h := pair(t, qp.RC, defaultLink())
	h.B.postRecv(t, 100, 0, 4096)
	h.A.postSend(t, writeWR(1, 0, 0, 64)) // bad rkey below: both QPs to ERR
	h.A.postSend(t, qp.SendWR{ID: 2, Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: localVA, Length: 64, LKey: localKey}},
		RemoteAddr: remoteVA, RKey: 0x999})
	h.A.postSend(t, sendWR(3, 0, 10))
	h.MustRun(h.sendsDone(h.A, 3))
	h.MustRun(nil)
	require.Equal(t, qp.Err, h.A.qp.State())
	require.Equal(t, qp.Err, h.B.qp.State())
	before := len(h.Frames)

	for _, ep := range h.eps {
		require.NoError(t, modify(ep.qp, &qp.Attr{State: qp.Reset}, qp.AttrState))
		require.Equal(t, qp.Reset, ep.qp.State())
		ep.sendWCs, ep.recvWCs = nil, nil
	}
	l := defaultLink()
	l.APSN, l.BPSN = 0x500000, 0x600000
	h.connect(l)
	fill(h.A.local, 25)
	h.B.postRecv(t, 200, 0, 4096)
	h.A.postSend(t, sendWR(10, 0, 3000))
	h.A.postSend(t, writeWR(11, 0, 0x100, 500))
	h.MustRun(func() bool { return len(h.A.sendWCs) == 2 && len(h.B.recvWCs) == 1 })
	h.MustRun(nil)
	requireWCs(t, h.A.sendWCs, []uint64{10, 11}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{200}, qp.WCSuccess)
	require.Equal(t, h.A.local[:3000], h.B.local[:3000])
	require.Equal(t, h.A.local[:500], h.B.remote[0x100:0x100+500])
	for _, f := range h.Frames[before:] {
		if f.From == 0 {
			require.True(t, psnIn(f.PSN(), 0x500000, 0x500010), "new PSNs only: %v", f)
		}
	}
}

// TestResponderStates: a responder already answers in RTR (before RTS);
// in INIT or RESET it drops requests and counts them.
func TestResponderStates(t *testing.T) {
	l := defaultLink()
	h := newHarness(t, epConfig{Type: qp.RC}, epConfig{Type: qp.RC})
	bringUp(t, h.A.qp, h.B, l, l.AAccess, l.APSN, l.BPSN)
	// B only to RTR.
	require.NoError(t, modify(h.B.qp, &qp.Attr{State: qp.Init, Port: 1, AccessFlags: allRemote},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	h.B.postRecv(t, 100, 0, 4096)
	h.A.postSend(t, sendWR(1, 0, 100))
	// In INIT, B drops what arrives.
	require.NoError(t, h.Run(func() bool { return len(h.Frames) >= 1 }))
	for len(h.queue) > 0 {
		h.deliver()
	}
	require.NotZero(t, h.B.qp.Counters().DropQPState)
	require.Empty(t, h.B.recvWCs)
	require.NoError(t, modify(h.B.qp, &qp.Attr{State: qp.RTR, AV: h.A.av(), PathMTU: l.MTU, DestQPN: h.A.qp.QPN(),
		RQPSN: l.APSN, MaxDestRdAtomic: 16, MinRNRTimer: 1},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	h.MustRun(h.sendsDone(h.A, 1)) // the retransmission finds B in RTR
	requireWCs(t, h.A.sendWCs, []uint64{1}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
	require.Equal(t, qp.RTR, h.B.qp.State())
	require.Error(t, h.B.qp.PostSend(&qp.SendWR{ID: 9, Opcode: qp.WRSend}), "no sends before RTS")
}

// TestRNRLongWait: rnr_retry 7 means "retry forever" on RNR NAKs, so a
// requester whose peer posts its receive late, after many RNR rounds, must
// still succeed. With two SENDs in flight, the responder follows every RNR
// NAK with a PSN-sequence NAK for the second SEND (as rxe does); rxe's
// completer charges those to retry_cnt, which rxe treats as infinite at 7,
// so rxe survives any number of rounds.
func TestRNRLongWait(t *testing.T) {
	l := defaultLink()
	l.MinRNRTimer = 1 // 10 us
	l.RetryCnt, l.RNRRetry = 7, 7
	h := pair(t, qp.RC, l)
	rounds := 0
	h.OnSend = func(f *Frame) {
		if f.From == 1 && f.Pkt.Info().Is(packet.HdrAETH) && f.Pkt.AETH.Syndrome.IsRNR() {
			rounds++
			if rounds == 12 {
				h.B.postRecv(t, 100, 0, 4096)
				h.B.postRecv(t, 101, 4096, 4096)
			}
		}
	}
	h.A.postSend(t, sendWR(1, 0, 100))
	h.A.postSend(t, sendWR(2, 0, 100))
	h.MustRun(h.sendsDone(h.A, 2))
	require.Equal(t, 12, rounds)
	requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100, 101}, qp.WCSuccess)
}

// TestACKCoalescing documents how the responder answers AckReq packets
// that arrive together before it transmits: rxe sends one ACK per AckReq;
// the engine may coalesce them, which IBTA allows because ACKs are
// cumulative. Either way the last ACK must carry the last PSN and the MSN
// of every message, and each ACK must be for an AckReq packet.
func TestACKCoalescing(t *testing.T) {
	h := pair(t, qp.RC, defaultLink())
	h.Burst = 16
	for i := uint64(0); i < 4; i++ {
		h.B.postRecv(t, 100+i, i*4096, 4096)
		h.A.postSend(t, sendWR(1+i, 0, 100))
	}
	h.MustRun(h.sendsDone(h.A, 4))
	acks := h.Select(FromB())
	require.NotEmpty(t, acks)
	require.LessOrEqual(t, len(acks), 4)
	last := acks[len(acks)-1]
	require.Equal(t, psnAdd(defaultLink().APSN, 3), last.PSN())
	require.Equal(t, uint32(4), last.Pkt.AETH.MSN)
	t.Logf("4 AckReq packets delivered together drew %d ACK(s) (rxe: 4)", len(acks))
}

// TestRetryAfterAckedMidResend drives one requester with hand-made
// responses through the sequence behind random seeds 2556 and 14747: a
// go-back-N resend has re-sent only the FIRST of a 3-packet SEND when a
// duplicate ACK for the SEND's last PSN arrives, so the SEND is wholly
// acknowledged, while a second retry has been asked for (by an ACK beyond a
// READ whose response is missing). Whatever the requester does next, it
// must complete everything and never send a packet for a PSN past the
// SEND: the responder would take a LAST at that PSN as a message without
// FIRST, NAK it invalid-request and go to ERR.
func TestRetryAfterAckedMidResend(t *testing.T) {
	h := newHarness(t, epConfig{Type: qp.RC}, epConfig{Type: qp.RC})
	l := defaultLink()
	l.Timeout = 10
	h.connect(l)
	q := h.A.qp
	base := l.APSN
	var sent []packet.Packet
	now := qp.Time(0)
	send := func(max int) {
		for k := 0; k < max; k++ {
			var out qp.Outgoing
			if !q.Transmit(now, &out) {
				return
			}
			p := out.Pkt
			p.Payload = append([]byte(nil), p.Payload...)
			sent = append(sent, p)
		}
	}
	recv := func(op packet.Opcode, psn uint32, payload []byte) {
		now += 1000
		p := packet.Packet{Payload: payload}
		p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN, p.BTH.PKey = op, q.QPN(), psn, 0xFFFF
		p.AETH.Syndrome = packet.SyndromeACKUnlimited
		q.Receive(now, &qp.Incoming{Pkt: p, Src: h.B.addr, Dst: h.A.addr, IPHeader: make([]byte, 20)})
	}
	fill(h.B.remote, 26)
	h.A.postSend(t, readWR(1, 0x8000, 0, 100))  // PSN base
	h.A.postSend(t, sendWR(2, 0, 10))           // base+1
	h.A.postSend(t, readWR(3, 0x9000, 200, 50)) // base+2
	h.A.postSend(t, sendWR(4, 0, 3000))         // base+3..base+5
	send(10)
	require.Len(t, sent, 6)
	last := psnAdd(base, 5)
	// A reordered ACK for everything overtakes the READs' responses: the
	// requester goes back to the first READ.
	recv(packet.RCAcknowledge, last, nil)
	send(4) // READ, SEND_ONLY, READ, and the 3-packet SEND's FIRST
	require.Len(t, sent, 10)
	require.Equal(t, packet.RCSendFirst, sent[9].BTH.Opcode)
	// The first READ's response; a duplicate ACK (completing the SEND_ONLY,
	// and beyond the second READ, whose response is still missing: a new
	// retry); the second READ's response; another duplicate ACK, for the
	// 3-packet SEND that is being re-sent.
	recv(packet.RCReadResponseOnly, base, h.B.remote[:100])
	recv(packet.RCAcknowledge, last, nil)
	recv(packet.RCReadResponseOnly, psnAdd(base, 2), h.B.remote[200:250])
	recv(packet.RCAcknowledge, last, nil)
	// Run the requester on, through its timer, until it goes quiet.
	for k := 0; k < 20; k++ {
		send(10)
		if d := q.Deadline(); d != qp.Never {
			now = max(now, d)
			q.Tick(now)
		}
	}
	send(10)
	for _, p := range sent[10:] {
		require.True(t, psnIn(p.BTH.PSN, base, last),
			"sent %v at PSN %#x, past the last request (%#x)", p.BTH.Opcode, p.BTH.PSN, last)
	}
	var wcs [8]qp.WC
	n := h.A.sendCQ.Poll(wcs[:])
	requireWCs(t, wcs[:n], []uint64{1, 2, 3, 4}, qp.WCSuccess)
	require.Equal(t, h.B.remote[:100], h.A.local[0x8000:0x8000+100])
	require.Equal(t, h.B.remote[200:250], h.A.local[0x9000:0x9000+50])
}

// TestSQDrain: moving to SQD stops the requester from starting new WRs;
// those already started complete, and then EventSQDrained is raised (with
// EnSQDAsyncNotify). Back in RTS, the rest go out.
func TestSQDrain(t *testing.T) {
	h := pair(t, qp.RC, defaultLink())
	h.Burst = 1
	fill(h.A.local, 28)
	for i := uint64(0); i < 3; i++ {
		h.B.postRecv(t, 100+i, i*4096, 4096)
	}
	h.A.postSend(t, sendWR(1, 0, multiSize))
	h.A.postSend(t, sendWR(2, 0, 10))
	h.A.postSend(t, sendWR(3, 0, 20))
	require.NoError(t, h.Run(func() bool { return len(h.Frames) >= 1 }))
	require.NoError(t, modify(h.A.qp, &qp.Attr{State: qp.SQD, EnSQDAsyncNotify: true},
		qp.AttrState|qp.AttrEnSQDAsyncNotify))
	require.Equal(t, qp.SQD, h.A.qp.State())
	h.MustRun(nil)
	requireWCs(t, h.A.sendWCs, []uint64{1}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
	require.Len(t, h.Select(FromA()), 4, "only the started SEND's packets")
	require.Contains(t, h.A.events, qp.Event{Type: qp.EventSQDrained, QPN: h.A.qp.QPN()})
	require.NoError(t, modify(h.A.qp, &qp.Attr{State: qp.RTS}, qp.AttrState))
	h.MustRun(h.sendsDone(h.A, 3))
	requireWCs(t, h.A.sendWCs, []uint64{1, 2, 3}, qp.WCSuccess)
	requireWCs(t, h.B.recvWCs, []uint64{100, 101, 102}, qp.WCSuccess)
}
