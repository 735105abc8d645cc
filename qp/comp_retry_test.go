package qp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

func TestRetransmitTimeout(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 8; a.RetryCnt = 2 })
	period := Time(4096 << 8)
	r.buf(1, 1024, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 600, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 4, LKey: 1}}})
	require.Len(t, r.tx(), 4)
	assert.Equal(t, period, r.q.Deadline())
	r.now = period - 1
	r.q.Tick(r.now)
	assert.Empty(t, r.tx())
	r.ack(100) // first packet of WR 1 acknowledged
	assert.Equal(t, 2*period-1, r.q.Deadline(), "re-armed by the ACK")
	r.now = 2*period - 2
	r.q.Tick(r.now)
	assert.Empty(t, r.tx())
	r.now = 2*period - 1
	r.q.Tick(r.now)
	ps := r.tx()
	assert.Equal(t, []uint32{101, 102, 103}, psns(ps), "go-back-N from the oldest unacked PSN")
	assert.Equal(t, []packet.Opcode{packet.RCSendMiddle, packet.RCSendLast, packet.RCSendOnly}, ops(ps))
	assert.Equal(t, uint64(1), r.q.counters.CompleterRetryErr)
	assert.Equal(t, r.now+period, r.q.Deadline())
	// The second timeout spends retry_cnt 2; the third fails.
	r.now = r.q.Deadline()
	r.q.Tick(r.now)
	require.Len(t, r.tx(), 3)
	assert.Empty(t, r.poll())
	r.now = r.q.Deadline()
	r.q.Tick(r.now)
	wcs := r.poll()
	require.Len(t, wcs, 2)
	assert.Equal(t, WC{ID: 1, Status: WCRetryExcErr, QPN: rigQPN}, wcs[0])
	assert.Equal(t, WCWRFlushErr, wcs[1].Status)
	assert.Equal(t, uint64(1), r.q.counters.RetryExceededErr)
	assert.Equal(t, Err, r.q.State())
	assert.Equal(t, Never, r.q.Deadline())
}

// TestRetryCount7IsFinite documents the IBTA choice: retry_cnt 7 allows
// seven retries (rxe would retry forever).
func TestRetryCount7IsFinite(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 1 })
	r.post(SendWR{ID: 1, Opcode: WRSend})
	r.tx()
	for i := 0; i < 7; i++ {
		r.now = r.q.Deadline()
		r.q.Tick(r.now)
		require.Len(t, r.tx(), 1, "retry %d", i+1)
	}
	r.now = r.q.Deadline()
	r.q.Tick(r.now)
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCRetryExcErr, wcs[0].Status)
}

func TestTimeoutZeroMeansNoTimer(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 0 })
	r.post(SendWR{ID: 1, Opcode: WRSend})
	r.tx()
	assert.Equal(t, Never, r.q.Deadline())
	u := newSendRig(t, UC, 256)
	u.post(SendWR{ID: 1, Opcode: WRSend})
	u.tx()
	assert.Equal(t, Never, u.q.Deadline(), "UC has no retransmit timer")
}

func TestPartialReadResume(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 5 })
	dst := r.buf(1, 1024, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SGL: []SGE{{Length: 1000, LKey: 1}},
		RemoteAddr: 0x9000, RKey: 4})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled})
	require.Equal(t, []uint32{100, 104}, psns(r.tx()))
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	r.readResp(packet.RCReadResponseFirst, 100, src[:256])
	r.readResp(packet.RCReadResponseMid, 101, src[256:512])
	// 102 and 103 are lost.
	r.now = r.q.Deadline()
	r.q.Tick(r.now)
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCReadRequest, packet.RCSendOnly}, ops(ps))
	assert.Equal(t, []uint32{102, 104}, psns(ps), "the READ resumes at the first missing response")
	assert.Equal(t, packet.RETHFields{VA: 0x9000 + 512, RKey: 4, Length: 488}, ps[0].RETH)
	r.readResp(packet.RCReadResponseFirst, 102, src[512:768])
	r.readResp(packet.RCReadResponseLast, 103, src[768:])
	r.ack(104)
	assert.Equal(t, []uint64{1, 2}, wcIDs(r.poll()))
	assert.Equal(t, src, dst[:1000])
}

func TestLostReadResponseRetried(t *testing.T) {
	// An ACK beyond a READ whose response never came means the response
	// was lost: rxe retries rather than completing the READ.
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled})
	r.tx()
	r.ack(101)
	assert.Empty(t, r.poll())
	assert.Equal(t, uint64(1), r.q.counters.CompleterRetryErr)
	assert.Equal(t, []uint32{100, 101}, psns(r.tx()))
}

func TestFlushOrder(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRSend})
	r.post(SendWR{ID: 2, Opcode: WRRead, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.tx()
	r.post(SendWR{ID: 3, Opcode: WRWrite, Flags: SendSignaled})
	r.post(SendWR{ID: 4, Opcode: WRFetchAdd, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.setState(Err)
	wcs := r.poll()
	assert.Equal(t, []uint64{1, 2, 3, 4}, wcIDs(wcs))
	for i := range wcs {
		assert.Equal(t, WC{ID: uint64(i + 1), Status: WCWRFlushErr, QPN: rigQPN}, wcs[i])
	}
	assert.Equal(t, Never, r.q.Deadline())
	assert.False(t, r.q.Pending(r.now))

	// Back through RESET the QP works again from the new SQ PSN.
	a := r.q.attr
	r.modify(a, Reset, AttrState)
	a.SQPSN = 500
	r.modify(a, RTS, AttrState|AttrSQPSN)
	r.post(SendWR{ID: 5, Opcode: WRSend, Flags: SendSignaled})
	assert.Equal(t, []uint32{500}, psns(r.tx()))
	r.ack(500)
	assert.Equal(t, []uint64{5}, wcIDs(r.poll()))
}

func TestResetDropsQueueSilently(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled})
	r.tx()
	r.setState(Reset)
	assert.Empty(t, r.poll())
	assert.Equal(t, 0, r.q.sq.len())
	assert.Equal(t, Never, r.q.Deadline())
}

func TestCQOverflowMovesQPToErr(t *testing.T) {
	r := newSendRig(t, UC, 256)
	r.cq = NewCQ(2)
	r.q.cfg.SendCQ = r.cq
	for i := 1; i <= 4; i++ {
		r.post(SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled})
	}
	r.tx()
	assert.True(t, r.cq.Overflowed())
	assert.Equal(t, Err, r.q.State())
	assert.Equal(t, 0, r.q.sq.len())
	assert.Contains(t, r.events, Event{Type: EventQPFatal, QPN: rigQPN})
}

func TestPSNDiff(t *testing.T) {
	assert.Equal(t, int32(0), psnDiff(5, 5))
	assert.Equal(t, int32(1), psnDiff(0, 0xFFFFFF))
	assert.Equal(t, int32(-1), psnDiff(0xFFFFFF, 0))
	assert.Equal(t, int32(0x7FFFFF), psnDiff(0x7FFFFF, 0))
	assert.Equal(t, int32(-0x800000), psnDiff(0x800000, 0))
	assert.Equal(t, uint32(2), psnAdd(0xFFFFFF, 3))
}

// TestAckDuringRetryResend: the ACK for a message's first transmission
// arrives while a retry is resending it; the WQE completes when its resent
// LAST goes out, without waiting for an ACK that names its last PSN again.
func TestAckDuringRetryResend(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 4 })
	r.buf(1, 1024, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 512, LKey: 1}}})
	require.Len(t, r.tx(), 2)
	r.now = r.q.Deadline()
	r.q.Tick(r.now)
	var o Outgoing
	require.True(t, r.q.Transmit(r.now, &o))
	require.Equal(t, packet.RCSendFirst, o.Pkt.BTH.Opcode)
	r.ack(101) // for the first transmission
	assert.Empty(t, r.poll())
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCSendLast}, ops(ps))
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, Never, r.q.Deadline())
	r.ack(101) // the responder's re-ACK of the duplicate is stale now
	assert.Empty(t, r.poll())
}

func TestDuplicateRNRNAKSpendsOneRetry(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.RNRRetry = 1 })
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled})
	r.tx()
	r.aeth(100, packet.MakeRNR(1))
	r.aeth(100, packet.MakeRNR(1)) // the network duplicated it
	assert.Equal(t, RTS, r.q.State())
	r.now += 10_000
	require.Len(t, r.tx(), 1)
	r.ack(100)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
}

// FuzzCompReceive feeds arbitrary response packets to a QP with READ,
// atomic, SEND and WRITE requests outstanding: nothing may panic, the queue
// indices stay ordered, and the QP keeps working or fails cleanly.
func FuzzCompReceive(f *testing.F) {
	ack := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCAcknowledge, PSN: 101},
		AETH: packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited}}
	f.Add(ack.AppendTo(nil), uint8(0))
	rr := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCReadResponseFirst, PSN: 100},
		AETH: packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited}, Payload: make([]byte, 256)}
	f.Add(rr.AppendTo(nil), uint8(3))
	aa := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCAtomicAcknowledge, PSN: 103}}
	f.Add(aa.AppendTo(nil), uint8(1))
	nak := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCAcknowledge, PSN: 104},
		AETH: packet.AETHFields{Syndrome: packet.SyndromeNAKPSNSeq}}
	f.Add(nak.AppendTo(nil), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, ticks uint8) {
		r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 1 })
		r.buf(1, 4096, AccessLocalWrite)
		r.post(SendWR{ID: 1, Opcode: WRRead, SGL: []SGE{{Length: 700, LKey: 1}}, RKey: 2})
		r.post(SendWR{ID: 2, Opcode: WRFetchAdd, SGL: []SGE{{Length: 8, LKey: 1}}, RKey: 2})
		r.post(SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{{Length: 600, LKey: 1}}})
		r.post(SendWR{ID: 4, Opcode: WRWrite, SGL: []SGE{{Length: 10, LKey: 1}}, RKey: 2})
		var o Outgoing
		for r.q.Transmit(r.now, &o) {
		}
		var p packet.Packet
		if p.Decode(b) != nil {
			return
		}
		for i := 0; i < 3; i++ {
			r.q.Receive(r.now, &Incoming{Pkt: p})
			for j := uint8(0); j < ticks%4; j++ {
				if d := r.q.Deadline(); d != Never {
					r.now = d
				}
				r.q.Tick(r.now)
				for r.q.Transmit(r.now, &o) {
				}
			}
		}
		q := r.q
		if q.sq.cons > q.req.idx || q.req.idx > q.sq.prod || q.req.rdOut < 0 || q.req.rdOut > q.req.rdMax {
			t.Fatalf("indices cons=%d idx=%d prod=%d rdOut=%d", q.sq.cons, q.req.idx, q.sq.prod, q.req.rdOut)
		}
		if n := len(r.poll()); n > 4 {
			t.Fatalf("%d completions for 4 WRs", n)
		}
	})
}

func BenchmarkSendWriteAck(b *testing.B) {
	r := newSendRig(b, RC, 4096)
	r.buf(1, 65536, 0)
	wr := SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, RKey: 5, SGL: []SGE{{Length: 65536, LKey: 1}}}
	var o Outgoing
	wcs := make([]WC, 4)
	in := Incoming{}
	in.Pkt.BTH.Opcode = packet.RCAcknowledge
	in.Pkt.AETH.Syndrome = packet.SyndromeACKUnlimited
	b.SetBytes(65536)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.q.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		for r.q.Transmit(r.now, &o) {
			in.Pkt.BTH.PSN = o.Pkt.BTH.PSN
		}
		r.q.Receive(r.now, &in)
		if r.cq.Poll(wcs) != 1 {
			b.Fatal("no completion")
		}
	}
}

// TestSQEFlushesAndRTSResumes: entering SQE completes the send queue with
// WR_FLUSH_ERR (IBTA 10.3.1: the send queue is not processed in SQE, so
// posted WRs flush); a WR posted in SQE flushes at once; RTS resumes.
func TestSQEFlushesAndRTSResumes(t *testing.T) {
	r := newSendRig(t, UC, 256)
	r.post(SendWR{ID: 1, Opcode: WRSend})
	r.setState(SQE)
	r.post(SendWR{ID: 2, Opcode: WRSend})
	assert.Empty(t, r.tx())
	wcs := r.poll()
	assert.Equal(t, []uint64{1, 2}, wcIDs(wcs))
	assert.Equal(t, WCWRFlushErr, wcs[0].Status)
	assert.Equal(t, WCWRFlushErr, wcs[1].Status)
	r.setState(RTS)
	r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled})
	require.Len(t, r.tx(), 1)
	assert.Equal(t, []uint64{3}, wcIDs(r.poll()))
	assert.Equal(t, uint64(3), r.q.counters.RdmaSends, "rxe counts every retired SEND")
}
