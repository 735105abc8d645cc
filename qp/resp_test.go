package qp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRespSendOnlyScattersAndAcks(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(7, 100, 10, 0, 300) // a zero-length SGE in the middle is skipped
	data := rspFill(200, 1)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, data, rspAckReq))

	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 7, Status: WCSuccess, Opcode: WCRecv, ByteLen: 200, QPN: rspQPN}, wcs[0])
	assert.Equal(t, data, r.recvBuf()[100:300])
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN, 1)
	assert.Equal(t, uint64(1), r.q.counters.RdmaRecvs)
}

func TestRespSendMultiPacketImmSolicited(t *testing.T) {
	r := newRespRig(t, RC)
	notified := 0
	r.rcq.Notify = func() { notified++ }
	r.rcq.Arm(true)
	r.post(1, 0, 4096)
	data := rspFill(600, 3)
	r.recv(rspPkt(packet.RCSendFirst, rspPSN, data[:256], nil))
	r.recv(rspPkt(packet.RCSendMiddle, rspPSN+1, data[256:512], nil))
	require.Empty(t, r.drain(), "no AckReq, no ACK")
	require.Zero(t, r.rcq.Len())
	r.recv(rspPkt(packet.RCSendLastImm, rspPSN+2, data[512:], func(p *packet.Packet) {
		p.Imm = 0xCAFEBABE
		p.BTH.SE = true
		p.BTH.AckReq = true
	}))
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 1, Opcode: WCRecv, ByteLen: 600, Imm: 0xCAFEBABE, Flags: WCWithImm, QPN: rspQPN}, wcs[0])
	assert.Equal(t, data, r.recvBuf()[:600])
	assert.Equal(t, 1, notified, "solicited completion wakes a solicited-only CQ")
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN+2, 1)
}

func TestRespUnsolicitedDoesNotWakeSolicitedCQ(t *testing.T) {
	r := newRespRig(t, RC)
	notified := 0
	r.rcq.Notify = func() { notified++ }
	r.rcq.Arm(true)
	r.post(1, 0, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(8, 0), nil))
	require.Len(t, r.wcs(), 1)
	assert.Zero(t, notified)
}

func TestRespAckCoalescing(t *testing.T) {
	r := newRespRig(t, RC)
	for i := 0; i < 3; i++ {
		r.post(uint64(i), uint64(i)*64, 64)
	}
	for i := uint32(0); i < 3; i++ {
		r.recv(rspPkt(packet.RCSendOnly, rspPSN+i, rspFill(16, byte(i)), rspAckReq))
	}
	// One cumulative ACK for the latest PSN, carrying the latest MSN.
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN+2, 3)
	require.Len(t, r.wcs(), 3)
}

func TestRespWriteMultiPacket(t *testing.T) {
	r := newRespRig(t, RC)
	data := rspFill(700, 9)
	va := uint64(rspRemoteVA + 0x100)
	r.recv(rspPkt(packet.RCWriteFirst, rspPSN, data[:256], rspReth(va, rspRemoteKey, 700)))
	r.recv(rspPkt(packet.RCWriteMiddle, rspPSN+1, data[256:512], nil))
	r.recv(rspPkt(packet.RCWriteLast, rspPSN+2, data[512:], rspAckReq))
	assert.Equal(t, data, r.remote(0x100, 700))
	assert.Zero(t, r.rcq.Len(), "a WRITE without immediate consumes no receive WQE")
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN+2, 1)
}

func TestRespWriteImmConsumesWQE(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(5, 0, 16) // the WQE's buffer is not touched
	data := rspFill(100, 4)
	r.recv(rspPkt(packet.RCWriteOnlyImm, rspPSN, data, func(p *packet.Packet) {
		rspReth(rspRemoteVA, rspRemoteKey, 100)(p)
		p.Imm = 0x01020304
		p.BTH.AckReq = true
	}))
	assert.Equal(t, data, r.remote(0, 100))
	wcs := r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 5, Opcode: WCRecvRDMAImm, ByteLen: 100, Imm: 0x01020304, Flags: WCWithImm, QPN: rspQPN}, wcs[0])
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN, 1)
}

func TestRespZeroLengthWriteNeedsNoKey(t *testing.T) {
	r := newRespRig(t, RC)
	r.recv(rspPkt(packet.RCWriteOnly, rspPSN, nil, func(p *packet.Packet) {
		rspReth(0xdead, 0xbad, 0)(p)
		p.BTH.AckReq = true
	}))
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN, 1)
	assert.Equal(t, RTR, r.q.State())
}

func TestRespReadResponses(t *testing.T) {
	cases := []struct {
		name   string
		length uint32
		ops    []packet.Opcode
	}{
		{"zero", 0, []packet.Opcode{packet.RCReadResponseOnly}},
		{"one byte", 1, []packet.Opcode{packet.RCReadResponseOnly}},
		{"exactly mtu", 256, []packet.Opcode{packet.RCReadResponseOnly}},
		{"mtu plus one", 257, []packet.Opcode{packet.RCReadResponseFirst, packet.RCReadResponseLast}},
		{"three packets", 600, []packet.Opcode{packet.RCReadResponseFirst, packet.RCReadResponseMid, packet.RCReadResponseLast}},
		{"four full", 1024, []packet.Opcode{packet.RCReadResponseFirst, packet.RCReadResponseMid,
			packet.RCReadResponseMid, packet.RCReadResponseLast}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, RC)
			src := r.remote(0x40, int(c.length))
			copy(src, rspFill(int(c.length), 11))
			r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA+0x40, rspRemoteKey, c.length)))
			out := r.drain()
			require.Len(t, out, len(c.ops))
			var got []byte
			for i, p := range out {
				assert.Equal(t, c.ops[i], p.BTH.Opcode, "packet %d", i)
				assert.Equal(t, psnAdd(rspPSN, uint32(i)), p.BTH.PSN)
				if p.Info().Is(packet.HdrAETH) {
					assert.Equal(t, packet.SyndromeACKUnlimited, p.AETH.Syndrome)
					assert.Equal(t, uint32(1), p.AETH.MSN, "MSN advances at the READ request")
				}
				got = append(got, p.Payload...)
			}
			assert.True(t, bytes.Equal(src, got), "payload")
			assert.Len(t, got, int(c.length))
			// The next request's PSN is after the responses.
			assert.Equal(t, psnAdd(rspPSN, uint32(len(c.ops))), r.q.resp.psn)
			r.post(1, 0, 64)
			r.recv(rspPkt(packet.RCSendOnly, psnAdd(rspPSN, uint32(len(c.ops))), rspFill(4, 0), rspAckReq))
			rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, psnAdd(rspPSN, uint32(len(c.ops))), 2)
		})
	}
}

func TestRespReadInterleavesWithAcksInPSNOrder(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 64)
	r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+3, rspFill(4, 0), rspAckReq))
	out := r.drain()
	require.Len(t, out, 4)
	for i, p := range out[:3] {
		assert.Equal(t, rspPSN+uint32(i), p.BTH.PSN)
		assert.Equal(t, packet.KindReadResponse, p.Info().Kind)
	}
	rspRequireAck(t, out[3:], packet.SyndromeACKUnlimited, rspPSN+3, 2)
}

func TestRespAtomics(t *testing.T) {
	cases := []struct {
		name      string
		op        packet.Opcode
		init      uint64
		swapAdd   uint64
		compare   uint64
		wantAfter uint64
	}{
		{"cmp swap hit", packet.RCCompareSwap, 5, 9, 5, 9},
		{"cmp swap miss", packet.RCCompareSwap, 5, 9, 6, 5},
		{"fetch add", packet.RCFetchAdd, 40, 2, 0, 42},
		{"fetch add wraps", packet.RCFetchAdd, ^uint64(0), 2, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRespRig(t, RC)
			word := r.remote(8, 8)
			binary.LittleEndian.PutUint64(word, c.init)
			r.recv(rspPkt(c.op, rspPSN, nil, func(p *packet.Packet) {
				p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA + 8, RKey: rspRemoteKey, SwapAdd: c.swapAdd, Compare: c.compare}
			}))
			assert.Equal(t, c.wantAfter, binary.LittleEndian.Uint64(word))
			out := r.drain()
			require.Len(t, out, 1, "an atomic is always acknowledged")
			assert.Equal(t, packet.RCAtomicAcknowledge, out[0].BTH.Opcode)
			assert.Equal(t, rspPSN, out[0].BTH.PSN)
			assert.Equal(t, c.init, out[0].AtomicAck)
			assert.Equal(t, packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited, MSN: 1}, out[0].AETH)
		})
	}
}

func TestRespAtomicWrite(t *testing.T) {
	r := newRespRig(t, RC)
	val := rspFill(8, 0x50)
	r.recv(rspPkt(packet.RCAtomicWrite, rspPSN, val, rspReth(rspRemoteVA+16, rspRemoteKey, 8)))
	assert.Equal(t, val, r.remote(16, 8))
	out := r.drain()
	require.Len(t, out, 1)
	assert.Equal(t, packet.RCReadResponseOnly, out[0].BTH.Opcode)
	assert.Empty(t, out[0].Payload)
	// A duplicate is acknowledged again without writing.
	copy(r.remote(16, 8), make([]byte, 8))
	r.recv(rspPkt(packet.RCAtomicWrite, rspPSN, val, rspReth(rspRemoteVA+16, rspRemoteKey, 8)))
	out = r.drain()
	require.Len(t, out, 1)
	assert.Equal(t, packet.RCReadResponseOnly, out[0].BTH.Opcode)
	assert.Equal(t, make([]byte, 8), r.remote(16, 8))
}

func TestRespPSNAheadNaksOnce(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+2, rspFill(4, 0), rspAckReq))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+3, rspFill(4, 0), rspAckReq))
	rspRequireAck(t, r.drain(), packet.SyndromeNAKPSNSeq, rspPSN, 0)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+4, rspFill(4, 0), rspAckReq))
	assert.Empty(t, r.drain(), "silent until the expected PSN arrives")
	assert.Equal(t, uint64(1), r.q.counters.OutOfSeqRequest)
	assert.Zero(t, r.rcq.Len())

	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN, 1)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+5, rspFill(4, 0), rspAckReq))
	rspRequireAck(t, r.drain(), packet.SyndromeNAKPSNSeq, rspPSN+1, 1)
	assert.Equal(t, uint64(2), r.q.counters.OutOfSeqRequest)
	assert.Equal(t, uint64(2), r.q.counters.NAKsSent)
}

func TestRespDuplicateSendAndWriteReAcked(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 64)
	r.post(2, 64, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
	r.recv(rspPkt(packet.RCWriteOnly, rspPSN+1, rspFill(4, 1), rspReth(rspRemoteVA, rspRemoteKey, 4)))
	require.Len(t, r.drain(), 1)
	require.Len(t, r.wcs(), 1)

	copy(r.remote(0, 4), make([]byte, 4))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
	r.recv(rspPkt(packet.RCWriteOnly, rspPSN+1, rspFill(4, 1), rspReth(rspRemoteVA, rspRemoteKey, 4)))
	// C9-105: ACK the last executed request; the duplicates are dropped.
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN+1, 2)
	assert.Zero(t, r.rcq.Len(), "a duplicate SEND does not consume a WQE")
	assert.Equal(t, make([]byte, 4), r.remote(0, 4), "a duplicate WRITE is not executed")
	assert.Equal(t, uint64(2), r.q.counters.DuplicateRequest)
}

func TestRespDuplicateReadReplays(t *testing.T) {
	r := newRespRig(t, RC)
	copy(r.remote(0, 600), rspFill(600, 21))
	r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	orig := r.drain()
	require.Len(t, orig, 3)

	t.Run("whole", func(t *testing.T) {
		r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
		out := r.drain()
		require.Len(t, out, 3)
		for i := range out {
			assert.Equal(t, orig[i].BTH, out[i].BTH)
			assert.Equal(t, orig[i].Payload, out[i].Payload)
		}
	})
	for _, c := range []struct {
		name string
		psn  uint32
		va   uint64
		rkey uint32
		len  uint32
	}{
		{"other rkey", rspPSN, rspRemoteVA + 256, 0x77, 344},
		{"longer", rspPSN + 1, rspRemoteVA + 256, rspRemoteKey, 345},
		{"before the start", rspPSN + 1, rspRemoteVA - 1, rspRemoteKey, 10},
		{"no resource", rspPSN - 1, rspRemoteVA, rspRemoteKey, 10},
	} {
		t.Run("dropped "+c.name, func(t *testing.T) {
			r.recv(rspPkt(packet.RCReadRequest, c.psn, nil, rspReth(c.va, c.rkey, c.len)))
			assert.Empty(t, r.drain())
			assert.Equal(t, RTR, r.q.State())
		})
	}
	t.Run("from the middle", func(t *testing.T) {
		// The requester resumes at the second packet with a new RETH;
		// rxe answers with MIDDLE/LAST, not FIRST.
		r.recv(rspPkt(packet.RCReadRequest, rspPSN+1, nil, rspReth(rspRemoteVA+256, rspRemoteKey, 344)))
		out := r.drain()
		require.Len(t, out, 2)
		assert.Equal(t, packet.RCReadResponseMid, out[0].BTH.Opcode)
		assert.Equal(t, rspPSN+1, out[0].BTH.PSN)
		assert.Equal(t, packet.RCReadResponseLast, out[1].BTH.Opcode)
		assert.Equal(t, rspPSN+2, out[1].BTH.PSN)
		assert.Equal(t, orig[1].Payload, out[0].Payload)
		assert.Equal(t, orig[2].Payload, out[1].Payload)
	})
}

func TestRespDuplicateAtomicNotReExecuted(t *testing.T) {
	r := newRespRig(t, RC)
	word := r.remote(0, 8)
	binary.LittleEndian.PutUint64(word, 100)
	fa := rspPkt(packet.RCFetchAdd, rspPSN, nil, func(p *packet.Packet) {
		p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey, SwapAdd: 1}
	})
	r.recv(fa)
	require.Len(t, r.drain(), 1)
	for i := 0; i < 3; i++ {
		r.recv(fa)
		out := r.drain()
		require.Len(t, out, 1)
		assert.Equal(t, packet.RCAtomicAcknowledge, out[0].BTH.Opcode)
		assert.Equal(t, uint64(100), out[0].AtomicAck, "the saved original value")
		assert.Equal(t, rspPSN, out[0].BTH.PSN)
	}
	assert.Equal(t, uint64(101), binary.LittleEndian.Uint64(word), "executed exactly once")
	// A duplicate of a different kind at that PSN is not answered.
	r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 8)))
	assert.Empty(t, r.drain())
}

func TestRespResourceRingRecycles(t *testing.T) {
	r := newRespRig(t, RC, rspWithMaxDestRdAtomic(2))
	r.q.resp.sizeResources()
	require.Len(t, r.q.resp.res, 2)
	binary.LittleEndian.PutUint64(r.remote(0, 8), 0)
	for i := uint32(0); i < 3; i++ {
		r.recv(rspPkt(packet.RCFetchAdd, rspPSN+i, nil, func(p *packet.Packet) {
			p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey, SwapAdd: 1}
		}))
	}
	require.Len(t, r.drain(), 3)
	// The oldest record was recycled: its duplicate is dropped; the
	// newer ones still replay.
	r.recv(rspPkt(packet.RCFetchAdd, rspPSN, nil, func(p *packet.Packet) {
		p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey, SwapAdd: 1}
	}))
	assert.Empty(t, r.drain())
	r.recv(rspPkt(packet.RCFetchAdd, rspPSN+2, nil, func(p *packet.Packet) {
		p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey, SwapAdd: 1}
	}))
	out := r.drain()
	require.Len(t, out, 1)
	assert.Equal(t, uint64(2), out[0].AtomicAck)
}

func TestRespModifyToErrFlushesInOrder(t *testing.T) {
	r := newRespRig(t, RC)
	for i := uint64(1); i <= 3; i++ {
		r.post(i, 0, 64)
	}
	r.recv(rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 600)))
	require.NoError(t, r.q.Modify(&Attr{State: Err}, AttrState))
	assert.Empty(t, r.drain(), "a modify to ERR stops queued responses")
	wcs := r.wcs()
	require.Len(t, wcs, 3)
	for i, wc := range wcs {
		assert.Equal(t, WC{ID: uint64(i + 1), Status: WCWRFlushErr, Opcode: WCRecv, QPN: rspQPN}, wc)
	}
	// Posting in ERR completes at once.
	r.post(4, 0, 64)
	wcs = r.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCWRFlushErr, wcs[0].Status)
	assert.Equal(t, uint64(4), wcs[0].ID)
}

// TestRespModifyToErrSendsOwedAcks: the ACK of a SEND the program has
// already seen complete still goes out after a modify to ERR (as
// rdma_disconnect does right after a last completion), as an RNIC has sent
// it by then; READ responses queued behind it, and what follows them, do
// not.
func TestRespModifyToErrSendsOwedAcks(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 64)
	r.post(2, 64, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), rspAckReq))
	r.recv(rspPkt(packet.RCReadRequest, rspPSN+1, nil, rspReth(rspRemoteVA, rspRemoteKey, 16)))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+2, rspFill(4, 0), rspAckReq))
	wcs := r.wcs()
	require.Len(t, wcs, 2, "both SENDs completed before the modify")
	require.NoError(t, r.q.Modify(&Attr{State: Err}, AttrState))
	rspRequireAck(t, r.drain(), packet.SyndromeACKUnlimited, rspPSN, 1)
}

func TestRespFlushIncludesMessageInProgress(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 4096)
	r.post(2, 4096, 64)
	r.recv(rspPkt(packet.RCSendFirst, rspPSN, rspFill(rspMTU, 0), nil))
	require.NoError(t, r.q.Modify(&Attr{State: Err}, AttrState))
	wcs := r.wcs()
	require.Len(t, wcs, 2)
	assert.Equal(t, []uint64{1, 2}, []uint64{wcs[0].ID, wcs[1].ID})
}

func TestRespResetDropsWithoutCompletions(t *testing.T) {
	r := newRespRig(t, RC)
	r.post(1, 0, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), nil))
	r.post(2, 0, 64)
	r.recv(rspPkt(packet.RCReadRequest, rspPSN+1, nil, rspReth(rspRemoteVA, rspRemoteKey, 8)))
	require.Len(t, r.wcs(), 1)
	require.NoError(t, r.q.Modify(&Attr{State: Reset}, AttrState))
	assert.False(t, r.q.Pending(r.now))
	assert.Zero(t, r.rcq.Len())
	assert.Zero(t, r.q.rq.ring.n)
	assert.Zero(t, r.q.resp.msn)
	assert.Nil(t, r.q.resp.findRes(rspPSN+1))
	err := r.q.PostRecv(&RecvWR{ID: 3})
	assert.ErrorIs(t, err, ErrQPState)
}

func TestPostRecvChecks(t *testing.T) {
	r := newRespRig(t, RC, rspWithRecvCap(2, 2))
	err := r.q.PostRecv(&RecvWR{ID: 1, SGL: make([]SGE, 3)})
	assert.ErrorIs(t, err, ErrTooManySGE)
	assert.Contains(t, err.Error(), "qp 17")
	require.NoError(t, r.q.PostRecv(&RecvWR{ID: 1, SGL: make([]SGE, 2)}))
	require.NoError(t, r.q.PostRecv(&RecvWR{ID: 2}))
	assert.ErrorIs(t, r.q.PostRecv(&RecvWR{ID: 3}), ErrQueueFull)

	// The SGL is copied: changing the caller's slice afterwards has no effect.
	r2 := newRespRig(t, RC)
	sgl := []SGE{{Addr: 0, Length: 64, LKey: rspRecvKey}}
	require.NoError(t, r2.q.PostRecv(&RecvWR{ID: 1, SGL: sgl}))
	sgl[0].LKey = 0xbad
	r2.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(8, 0), nil))
	wcs := r2.wcs()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCSuccess, wcs[0].Status)
}

func TestRespCQOverflowStopsQP(t *testing.T) {
	r := newRespRig(t, RC, rspWithCQDepth(1))
	r.post(1, 0, 64)
	r.post(2, 64, 64)
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), nil))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+1, rspFill(4, 0), rspAckReq))
	assert.Equal(t, Err, r.q.State())
	assert.True(t, r.rcq.Overflowed())
	assert.Empty(t, r.drain(), "no ACK for a message whose completion was lost")
}

// Zero allocations per packet in steady state: SEND with completion and ACK,
// multi-packet WRITE, and a READ's responses.
func TestRespNoAllocs(t *testing.T) {
	r := newRespRig(t, RC)
	send := rspPkt(packet.RCSendOnly, 0, rspFill(64, 0), rspAckReq)
	wrFirst := rspPkt(packet.RCWriteFirst, 0, rspFill(rspMTU, 0), rspReth(rspRemoteVA, rspRemoteKey, 300))
	wrLast := rspPkt(packet.RCWriteLast, 0, rspFill(44, 0), rspAckReq)
	wrLast.BTH.PadCnt = uint8(wrLast.Pad())
	read := rspPkt(packet.RCReadRequest, 0, nil, rspReth(rspRemoteVA, rspRemoteKey, 1000))
	wr := RecvWR{ID: 1, SGL: []SGE{{Addr: 0, Length: 32, LKey: rspRecvKey}, {Addr: 32, Length: 64, LKey: rspRecvKey}}}
	out := make([]WC, 4)
	var o Outgoing
	psn := uint32(rspPSN)
	step := func() {
		if err := r.q.PostRecv(&wr); err != nil {
			panic(err)
		}
		send.BTH.PSN = psn
		r.q.Receive(r.now, &Incoming{Pkt: send})
		wrFirst.BTH.PSN = psnAdd(psn, 1)
		r.q.Receive(r.now, &Incoming{Pkt: wrFirst})
		wrLast.BTH.PSN = psnAdd(psn, 2)
		r.q.Receive(r.now, &Incoming{Pkt: wrLast})
		read.BTH.PSN = psnAdd(psn, 3)
		r.q.Receive(r.now, &Incoming{Pkt: read})
		psn = psnAdd(psn, 7)
		for r.q.Transmit(r.now, &o) {
		}
		r.rcq.Poll(out)
	}
	step()
	require.Equal(t, RTR, r.q.State())
	require.Equal(t, psn, r.q.resp.psn)
	allocs := testing.AllocsPerRun(200, step)
	assert.Zero(t, allocs)
	require.Equal(t, RTR, r.q.State())
}

// FuzzRespReceive feeds arbitrary decoded packets to RC, UC and UD
// responders with receive WQEs posted: hostile input must never panic, and
// whatever the responder queues must encode.
func FuzzRespReceive(f *testing.F) {
	seeds := []packet.Packet{
		rspPkt(packet.RCSendOnly, rspPSN, rspFill(20, 0), rspAckReq),
		rspPkt(packet.RCReadRequest, rspPSN, nil, rspReth(rspRemoteVA, rspRemoteKey, 700)),
		rspPkt(packet.RCWriteFirst, rspPSN, rspFill(rspMTU, 0), rspReth(rspRemoteVA, rspRemoteKey, 600)),
		rspPkt(packet.RCFetchAdd, rspPSN, nil, func(p *packet.Packet) {
			p.AtomicETH = packet.AtomicETHFields{VA: rspRemoteVA, RKey: rspRemoteKey, SwapAdd: 3}
		}),
		rspPkt(packet.UCSendFirst, rspPSN, rspFill(rspMTU, 0), nil),
		udPkt(packet.UDSendOnly, rspQKey, 3, rspFill(30, 0)),
	}
	for _, p := range seeds {
		f.Add(p.AppendTo(nil), p.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		for _, typ := range []Type{RC, UC, UD} {
			r := newRespRig(t, typ)
			r.post(1, 0, 300, 300)
			r.post(2, 1000, 5)
			for _, raw := range [][]byte{a, b, a} {
				var p packet.Packet
				if p.Decode(raw) != nil {
					continue
				}
				r.q.Receive(r.now, &Incoming{Pkt: p, IPHeader: raw[:min(len(raw), 20)]})
				for i := 0; i < 1000 && r.q.Pending(r.now); i++ {
					var o Outgoing
					r.q.Transmit(r.now, &o)
					var d packet.Packet
					require.NoError(t, d.Decode(o.Pkt.AppendTo(nil)))
				}
			}
		}
	})
}

// A duplicate READ that comes after the responder has sent past that READ
// is a go-back-N: the responses still queued after it would only be thrown
// away by the requester, which asks for them again, so the replay goes out
// first and they are dropped. A duplicate of the READ being answered (a
// copy made by the network) leaves the queue as it is.
func TestRespGoBackNSupersedesQueuedReads(t *testing.T) {
	const n = 600 // three packets at path MTU 256
	read := func(r *respRig, i uint32, from uint32) {
		off := uint64(from) * rspMTU
		r.recv(rspPkt(packet.RCReadRequest, rspPSN+3*i+from, nil, rspReth(rspRemoteVA+uint64(i)*n+off, rspRemoteKey, n-uint32(off))))
	}
	send := func(r *respRig, k int) []packet.Packet {
		var out []packet.Packet
		for range k {
			var o Outgoing
			require.True(t, r.q.Transmit(r.now, &o))
			out = append(out, o.Pkt)
		}
		return out
	}
	psns := func(ps []packet.Packet) (s []uint32) {
		for _, p := range ps {
			s = append(s, p.BTH.PSN-rspPSN)
		}
		return s
	}

	t.Run("go-back-N", func(t *testing.T) {
		r := newRespRig(t, RC)
		for i := range uint32(3) {
			read(r, i, 0)
		}
		assert.Equal(t, []uint32{0, 1, 2, 3}, psns(send(r, 4)), "the first READ and the start of the second")
		read(r, 0, 1) // the requester goes back to the first READ's second packet
		assert.Equal(t, []uint32{1, 2}, psns(r.drain()), "the replay, not the rest of the second READ first")
		assert.Equal(t, uint64(5), r.q.counters.RespSuperseded, "the second READ's last two packets, the third's three")
		read(r, 1, 0) // ... and asks again for everything after it
		read(r, 2, 0)
		out := r.drain()
		assert.Equal(t, []uint32{3, 4, 5, 6, 7, 8}, psns(out))
		assert.Equal(t, packet.RCReadResponseFirst, out[0].BTH.Opcode)
	})
	t.Run("copy of the READ in progress", func(t *testing.T) {
		r := newRespRig(t, RC)
		for i := range uint32(3) {
			read(r, i, 0)
		}
		assert.Equal(t, []uint32{0, 1, 2, 3}, psns(send(r, 4)))
		read(r, 1, 0)
		assert.Equal(t, []uint32{4, 5, 6, 7, 8, 3, 4, 5}, psns(r.drain()), "in order, the copy's replay last")
		assert.Zero(t, r.q.counters.RespSuperseded)
	})
	t.Run("repair", func(t *testing.T) {
		// A READ for the first READ's second packet alone (read_repair.go):
		// the requester kept what came after it, so nothing is
		// superseded and the hole goes out first, as a LAST.
		r := newRespRig(t, RC)
		for i := range uint32(3) {
			read(r, i, 0)
		}
		assert.Equal(t, []uint32{0, 1, 2, 3}, psns(send(r, 4)))
		r.recv(rspPkt(packet.RCReadRequest, rspPSN+1, nil, rspReth(rspRemoteVA+rspMTU, rspRemoteKey, rspMTU)))
		out := r.drain()
		assert.Equal(t, []uint32{1, 4, 5, 6, 7, 8}, psns(out))
		assert.Equal(t, packet.RCReadResponseLast, out[0].BTH.Opcode)
		assert.Equal(t, packet.RCReadResponseMid, out[1].BTH.Opcode, "the second READ goes on where it was")
		assert.Zero(t, r.q.counters.RespSuperseded)
	})
}
