package qp

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

func TestCumulativeAckCompletesInOrder(t *testing.T) {
	for _, sigAll := range []bool{false, true} {
		r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { c.SigAll = sigAll })
		r.buf(1, 1024, 0)
		r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 300, LKey: 1}}})
		r.post(SendWR{ID: 2, Opcode: WRWrite, SGL: []SGE{{Length: 10, LKey: 1}}})
		r.post(SendWR{ID: 3, Opcode: WRWriteImm, Flags: SendSignaled, SGL: []SGE{{Length: 10, LKey: 1}}})
		require.Equal(t, []uint32{100, 101, 102, 103}, psns(r.tx()))
		r.ack(103)
		wcs := r.poll()
		if sigAll {
			assert.Equal(t, []uint64{1, 2, 3}, wcIDs(wcs))
		} else {
			assert.Equal(t, []uint64{1, 3}, wcIDs(wcs), "unsignaled WR retires silently")
		}
		last := wcs[len(wcs)-1]
		assert.Equal(t, WC{ID: 3, Opcode: WCRDMAWrite, ByteLen: 10, QPN: rigQPN, Flags: WCWithImm}, last)
		assert.Equal(t, WCSend, wcs[0].Opcode)
		assert.Equal(t, uint32(300), wcs[0].ByteLen)
		assert.Equal(t, Never, r.q.Deadline())
		assert.Equal(t, 0, r.q.sq.len())
	}
}

func TestPartialAckRearmsTimer(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.Timeout = 10 })
	period := Time(4096 << 10)
	r.buf(1, 1024, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 1024, LKey: 1}}})
	r.now = 1000
	require.Len(t, r.tx(), 4)
	assert.Equal(t, 1000+period, r.q.Deadline())
	r.now = 5000
	r.ack(101)
	assert.Empty(t, r.poll())
	assert.Equal(t, uint32(102), r.q.comp.psn)
	assert.Equal(t, 5000+period, r.q.Deadline(), "progress re-arms the timer")
	r.now = 6000
	r.ack(101) // a duplicate: no progress, but the responder is alive
	assert.Equal(t, 6000+period, r.q.Deadline(), "any response restarts the timer, as in rxe (COMPST_EXIT)")
	assert.Equal(t, uint64(1), r.q.counters.DropStale)
	r.now = 7000
	r.ack(200) // a PSN never sent: forged or from an earlier life
	assert.Equal(t, 6000+period, r.q.Deadline(), "a response to nothing sent does not")
	assert.Equal(t, uint64(2), r.q.counters.DropStale)
	r.ack(103)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, Never, r.q.Deadline())
}

func TestStaleResponsesDropped(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.ack(100) // nothing outstanding
	assert.Equal(t, uint64(1), r.q.counters.DropStale)
	r.buf(1, 64, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.tx()
	r.ack(101) // a PSN never sent
	r.ack(99)  // older than anything outstanding
	r.ack(0x800000 + 100)
	assert.Equal(t, uint64(4), r.q.counters.DropStale)
	assert.Empty(t, r.poll())
	r.readResp(packet.RCReadResponseOnly, 100, nil) // a read response for a SEND
	r.atomicAck(100, 5)                             // an atomic ACK for a SEND
	assert.Equal(t, uint64(2), r.q.counters.DropBadOpcode)
	assert.Empty(t, r.poll())
	r.ack(100)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, RTS, r.q.State())
}

func TestReadResponses(t *testing.T) {
	r := newSendRig(t, RC, 256)
	a := r.buf(1, 400, AccessLocalWrite)
	b := r.buf(2, 400, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, RKey: 9, RemoteAddr: 0x5000,
		SGL: []SGE{{Addr: 100, Length: 300, LKey: 1}, {Addr: 0, Length: 300, LKey: 2}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled})
	ps := r.tx()
	require.Equal(t, []uint32{100, 103}, psns(ps)) // READ of 600 bytes = 3 response PSNs
	src := make([]byte, 600)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	r.readResp(packet.RCReadResponseMid, 101, src[256:512]) // before FIRST: kept
	r.readResp(packet.RCReadResponseMid, 101, src[256:512]) // a copy of it
	r.readResp(packet.RCReadResponseLast, 100, src[:256])   // LAST where FIRST belongs
	r.readResp(packet.RCReadResponseFirst, 100, src[:200])  // short FIRST
	assert.Equal(t, uint64(1), r.q.counters.ReadRespKept)
	assert.Equal(t, uint64(1), r.q.counters.DropStale)
	assert.Equal(t, uint64(1), r.q.counters.DropBadOpcode)
	assert.Equal(t, uint64(1), r.q.counters.DropBadLength)
	// The hole before the kept response is asked for alone.
	rep := r.tx()
	require.Len(t, rep, 1)
	assert.Equal(t, packet.RCReadRequest, rep[0].BTH.Opcode)
	assert.Equal(t, uint32(100), rep[0].BTH.PSN)
	assert.Equal(t, packet.RETHFields{VA: 0x5000, RKey: 9, Length: 256}, rep[0].RETH)
	r.readResp(packet.RCReadResponseOnly, 100, src[:256])  // the repair's answer
	r.readResp(packet.RCReadResponseFirst, 100, src[:256]) // the original, late
	r.readResp(packet.RCReadResponseMid, 101, src[256:512])
	assert.Equal(t, uint64(3), r.q.counters.DropStale)
	r.readResp(packet.RCReadResponseLast, 102, src[512:599]) // one byte short
	assert.Empty(t, r.poll())
	r.readResp(packet.RCReadResponseLast, 102, src[512:600])
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 1, Opcode: WCRDMARead, ByteLen: 600, QPN: rigQPN}, wcs[0])
	assert.Equal(t, src[:300], a[100:400])
	assert.Equal(t, src[300:600], b[:300])
	r.ack(103)
	assert.Equal(t, []uint64{2}, wcIDs(r.poll()))
}

func TestReadResponseAcksEarlierRequests(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, AccessLocalWrite)
	r.buf(2, 512, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled})
	r.post(SendWR{ID: 2, Opcode: WRWrite, Flags: SendSignaled, SGL: []SGE{{Length: 300, LKey: 2}}})
	r.post(SendWR{ID: 3, Opcode: WRRead, Flags: SendSignaled, SGL: []SGE{{Length: 4, LKey: 1}}})
	require.Equal(t, []uint32{100, 101, 102, 103}, psns(r.tx()))
	r.readResp(packet.RCReadResponseOnly, 103, []byte{1, 2, 3, 4})
	assert.Equal(t, []uint64{1, 2, 3}, wcIDs(r.poll()))
}

func TestReadLocalAccessError(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, 0) // no local write
	r.post(SendWR{ID: 1, Opcode: WRRead, SGL: []SGE{{Length: 4, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend})
	r.tx()
	r.readResp(packet.RCReadResponseOnly, 100, []byte{1, 2, 3, 4})
	wcs := r.poll()
	require.Len(t, wcs, 2)
	assert.Equal(t, WCLocProtErr, wcs[0].Status)
	assert.Equal(t, WCWRFlushErr, wcs[1].Status)
	assert.Equal(t, Err, r.q.State())
}

func TestAtomicAck(t *testing.T) {
	r := newSendRig(t, RC, 256)
	buf := r.buf(1, 64, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRCmpSwap, Flags: SendSignaled, SGL: []SGE{{Addr: 8, Length: 8, LKey: 1}}, RKey: 3})
	r.post(SendWR{ID: 2, Opcode: WRFetchAdd, Flags: SendSignaled, SGL: []SGE{{Addr: 16, Length: 8, LKey: 1}}, RKey: 3})
	r.post(SendWR{ID: 3, Opcode: WRFetchAdd, Flags: SendSignaled, SGL: []SGE{{Addr: 24, Length: 4, LKey: 1},
		{Addr: 60, Length: 4, LKey: 1}}, RKey: 3}) // 8 bytes in two pieces
	r.post(SendWR{ID: 4, Opcode: WRSend, Flags: SendSignaled})
	r.post(SendWR{ID: 5, Opcode: WRSend, Flags: SendSignaled})
	r.tx()
	r.ack(100) // a plain ACK does not answer an atomic
	assert.Empty(t, r.poll())
	r.atomicAck(100, 0x0102030405060708)
	r.atomicAck(101, 0xAABBCCDDEEFF0011)
	assert.Equal(t, uint64(0x0102030405060708), binary.LittleEndian.Uint64(buf[8:]))
	assert.Equal(t, uint64(0xAABBCCDDEEFF0011), binary.LittleEndian.Uint64(buf[16:]))
	r.atomicAck(102, 0x1122334455667788)
	assert.Equal(t, []byte{0x88, 0x77, 0x66, 0x55}, buf[24:28])
	assert.Equal(t, []byte{0x44, 0x33, 0x22, 0x11}, buf[60:64])
	wcs := r.poll()
	require.Len(t, wcs, 3)
	assert.Equal(t, WC{ID: 1, Opcode: WCCompSwap, ByteLen: 8, QPN: rigQPN}, wcs[0])
	assert.Equal(t, WC{ID: 2, Opcode: WCFetchAdd, ByteLen: 8, QPN: rigQPN}, wcs[1])
	assert.Equal(t, WC{ID: 3, Opcode: WCFetchAdd, ByteLen: 8, QPN: rigQPN}, wcs[2])
	// An atomic ACK that arrives again is stale.
	r.atomicAck(102, 0)
	assert.Equal(t, []byte{0x88, 0x77, 0x66, 0x55}, buf[24:28])

	// A local buffer that is not 8 bytes is refused at post time, as rxe.
	err := r.q.PostSend(&SendWR{Opcode: WRFetchAdd, SGL: []SGE{{Length: 4, LKey: 1}}})
	assert.ErrorIs(t, err, ErrInvalidWR)
}

func TestSequenceNAKGoBackN(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.RetryCnt = 3 })
	r.buf(1, 1024, 0)
	for i := 1; i <= 4; i++ {
		r.post(SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	}
	r.post(SendWR{ID: 5, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 512, LKey: 1}}})
	require.Equal(t, []uint32{100, 101, 102, 103, 104, 105}, psns(r.tx()))
	r.aeth(102, packet.SyndromeNAKPSNSeq) // responder expects 102: 100, 101 arrived
	assert.Equal(t, []uint64{1, 2}, wcIDs(r.poll()))
	assert.Equal(t, uint64(1), r.q.counters.RcvdSeqErr)
	assert.Equal(t, uint64(1), r.q.counters.CompleterRetryErr)
	assert.Equal(t, uint8(2), r.q.comp.retryCnt)
	r.aeth(102, packet.SyndromeNAKPSNSeq) // a second NAK does not start another retry
	assert.Equal(t, uint64(1), r.q.counters.CompleterRetryErr)
	ps := r.tx()
	assert.Equal(t, []uint32{102, 103, 104, 105}, psns(ps))
	assert.Equal(t, []packet.Opcode{packet.RCSendOnly, packet.RCSendOnly, packet.RCSendFirst, packet.RCSendLast}, ops(ps))
	assert.Equal(t, uint64(4), r.q.counters.Retransmits)
	r.ack(105)
	assert.Equal(t, []uint64{3, 4, 5}, wcIDs(r.poll()))
	assert.Equal(t, uint8(3), r.q.comp.retryCnt, "progress restores the retry count")
}

// TestLaterNAKStartsNewRetry: a PSN sequence NAK beyond the one being retried
// means the retransmission made progress and met another loss; it must start
// the next go-back-N at once rather than wait for the retransmit timer, and
// not spend the retry count, as each loss inside a long message would.
func TestLaterNAKStartsNewRetry(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.RetryCnt = 1 })
	r.buf(1, 8192, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8 * 256, LKey: 1}}})
	require.Equal(t, []uint32{100, 101, 102, 103, 104, 105, 106, 107}, psns(r.tx()))
	r.aeth(102, packet.SyndromeNAKPSNSeq) // 102 lost
	require.Equal(t, []uint32{102, 103, 104, 105, 106, 107}, psns(r.tx()))
	r.aeth(105, packet.SyndromeNAKPSNSeq) // the resend got 102-104 through, then lost 105
	assert.Equal(t, uint64(2), r.q.counters.CompleterRetryErr)
	require.Equal(t, []uint32{105, 106, 107}, psns(r.tx()))
	r.aeth(105, packet.SyndromeNAKPSNSeq) // the same NAK again: the retry is under way
	assert.Empty(t, r.tx())
	r.ack(107)
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCSuccess, wcs[0].Status)
}

func TestNAKErrors(t *testing.T) {
	cases := []struct {
		syn  packet.Syndrome
		want WCStatus
	}{
		{packet.SyndromeNAKInvReq, WCRemInvReqErr},
		{packet.SyndromeNAKRemAccess, WCRemAccessErr},
		{packet.SyndromeNAKRemOp, WCRemOpErr},
		{packet.SyndromeNAKInvRDReq, WCRemOpErr},
	}
	for _, c := range cases {
		t.Run(c.syn.String(), func(t *testing.T) {
			r := newSendRig(t, RC, 256)
			r.buf(1, 64, 0)
			r.post(SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{{Length: 8, LKey: 1}}})
			r.post(SendWR{ID: 2, Opcode: WRWrite, SGL: []SGE{{Length: 8, LKey: 1}}})
			r.post(SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{{Length: 8, LKey: 1}}})
			r.post(SendWR{ID: 4, Opcode: WRSend, SGL: []SGE{{Length: 8, LKey: 1}}}) // not yet sent
			var o Outgoing
			for i := 0; i < 3; i++ {
				require.True(t, r.q.Transmit(r.now, &o))
			}
			r.aeth(101, c.syn)
			wcs := r.poll()
			require.Len(t, wcs, 3, "WR 1 retired silently; the NAKed one fails; the rest flush")
			assert.Equal(t, []uint64{2, 3, 4}, wcIDs(wcs))
			assert.Equal(t, c.want, wcs[0].Status)
			assert.Equal(t, WC{ID: 2, Status: c.want, QPN: rigQPN}, wcs[0], "failed completions carry no opcode or length")
			assert.Equal(t, WCWRFlushErr, wcs[1].Status)
			assert.Equal(t, WCWRFlushErr, wcs[2].Status)
			assert.Equal(t, Err, r.q.State())
			assert.Empty(t, r.tx(), "no packets in ERR")
			assert.Equal(t, Never, r.q.Deadline())
			r.ack(102)
			assert.Equal(t, uint64(1), r.q.counters.DropQPState)
		})
	}
}

func TestRNRWaitAndRetry(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.RNRRetry = 2 })
	r.buf(1, 64, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.tx()
	r.now = 1_000_000
	r.aeth(101, packet.MakeRNR(14)) // 1.28 ms; acknowledges 100
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, uint64(1), r.q.counters.RcvdRNRErr)
	want := Time(1_000_000 + 1_280_000)
	assert.Equal(t, want, r.q.Deadline())
	r.now = want - 1
	r.q.Tick(r.now)
	assert.Empty(t, r.tx(), "waits out the RNR timer")
	r.now = want
	r.q.Tick(r.now)
	ps := r.tx()
	require.Equal(t, []uint32{101}, psns(ps))
	assert.Equal(t, r.now+Time(4096<<14), r.q.Deadline(), "retransmit timer runs again")
	r.aeth(101, packet.MakeRNR(1))
	r.now += 10_000
	require.Equal(t, []uint32{101}, psns(r.tx()), "Transmit itself ends an expired wait")
	r.aeth(101, packet.MakeRNR(1)) // third RNR: rnr_retry 2 is spent
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCRNRRetryExcErr, wcs[0].Status)
	assert.Equal(t, uint64(1), r.q.counters.RetryRNRExceededErr)
	assert.Equal(t, Err, r.q.State())
}

func TestRNRRetryInfinite(t *testing.T) {
	r := newSendRig(t, RC, 256) // RNRRetry 7
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled})
	r.tx()
	for i := 0; i < 20; i++ {
		r.aeth(100, packet.MakeRNR(1))
		r.now += 10_000
		r.q.Tick(r.now)
		require.Len(t, r.tx(), 1)
	}
	r.ack(100)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, uint64(20), r.q.counters.RcvdRNRErr)
}
