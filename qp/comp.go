package qp

import (
	"encoding/binary"

	"github.com/softroce/softroce/packet"
)

// completer processes what comes back for the requests an RC QP sent (ACKs,
// NAKs, RNR NAKs, read responses, atomic ACKs), retires send WQEs in order,
// and runs the retransmit timer (rxe_comp.c).
type completer struct {
	// psn is the oldest unacknowledged PSN: the PSN the next response
	// should carry (rxe's comp.psn).
	psn uint32
	// midRead: a READ's FIRST or MIDDLE response arrived; the next one is a
	// MIDDLE or LAST (rxe's comp.opcode).
	midRead bool
	// Retries left (rxe's comp.retry_cnt and comp.rnr_retry); reset to the
	// attributes on every forward progress.
	retryCnt, rnrRetry uint8
	// startedRetry: a go-back-N is under way, so a further PSN sequence NAK
	// does not start another (only a timeout does).
	startedRetry bool
	// deadline is when the retransmit timer fires, or Never.
	deadline Time
	// early is when an early retry starts (recovery.go), or Never: the
	// deadline of askedPSN, the newest packet that asked for an answer.
	// earlyShift doubles the wait per early retry until a fresh sample.
	early      Time
	askedPSN   uint32
	earlyShift uint8
	rtt        rttEstimator
	// lastResp is when the completer last moved forward; lastSend when
	// the requester last sent a packet.
	lastResp, lastSend Time
	// lossAt is when the requester last heard of a loss (lossHeard: ever).
	lossAt    Time
	lossHeard bool
	// kept: READ responses that arrived past a gap (read_repair.go).
	kept readKept
}

func (c *completer) reset() {
	*c = completer{deadline: Never, early: Never, retryCnt: c.retryCnt, rnrRetry: c.rnrRetry, rtt: rttEstimator{srtt: c.rtt.srtt, rttvar: c.rtt.rttvar, peak: c.rtt.peak}}
}

// resetRetry restores the retry counters after forward progress.
func (q *QP) resetRetry() {
	q.comp.retryCnt = q.attr.RetryCnt
	q.comp.rnrRetry = q.attr.RNRRetry
	q.comp.startedRetry = false
}

// compProgress runs after a response moved the completer forward: it
// retires WQEs that were waiting behind the completed ones, re-arms the
// retransmit timer while PSNs remain unacknowledged, and checks for an SQD
// drain.
func (q *QP) compProgress(now Time) {
	q.retireDone()
	if q.attr.State == Err {
		return
	}
	q.rttAcked(now)
	q.comp.deadline = Never
	if per := q.retransmitPeriod(); per != 0 && q.sendOutstanding() && !q.req.rnrWait {
		q.comp.deadline = now + per
	} else {
		q.comp.early = Never
	}
}

// sendOutstanding reports whether the oldest WQE has packets out that are
// not yet acknowledged or answered.
func (q *QP) sendOutstanding() bool {
	if q.sq.cons == q.sq.prod {
		return false
	}
	st := q.sq.at(q.sq.cons).state
	return st == wqeProcessing || st == wqePending
}

// compHeard restarts a running retransmit timer on any response to a PSN
// this QP sent, a duplicate or a stale one too, as rxe's completer re-arms
// it whenever it has processed what arrived (COMPST_EXIT): the timer then
// measures silence from the responder, not the time since the last
// progress. Restarted only on progress, it fired while the responses to a
// spurious go-back-N still drained through a slow bottleneck ahead of the
// ones it waited for; each such retry added a window of duplicates to that
// queue, and the QP kept timing out (READs at 20 Mb/s in the loss-curve
// guests fell to a third of kernel rxe's goodput with no loss at all).
// Whatever the response leads to (progress, a retry, a completion) sets the
// timer again after this.
func (q *QP) compHeard(now Time) {
	if q.comp.deadline == Never {
		return
	}
	if per := q.retransmitPeriod(); per != 0 {
		q.comp.deadline = now + per
	}
}

// compCatchUp completes SEND and WRITE WQEs at the head whose packets are
// all acknowledged already. That happens when the ACK for a message's
// original transmission arrives while a go-back-N retry is resending it:
// the ACK moves comp.psn past the message before the WQE is pending again,
// and no later ACK would name its last PSN. (rxe instead completes such a
// WQE when a duplicate ACK for exactly its last PSN arrives.)
func (q *QP) compCatchUp(now Time) {
	for q.sq.cons != q.sq.prod && q.attr.State != Err {
		w := q.sq.at(q.sq.cons)
		if w.state != wqePending || w.isReadOrAtomic() || psnDiff(q.comp.psn, w.lastPSN) <= 0 {
			return
		}
		w.status = WCSuccess
		q.completeWQE(w)
		q.compProgress(now)
	}
}

// compReceive processes a response packet (ACK, NAK, RNR NAK, read
// response, atomic ACK). Like rxe's completer, it first lets a response
// whose PSN lies past the oldest WQE acknowledge that WQE, then checks the
// response against the WQE its PSN falls in. Responses that are stale,
// out of order or malformed are dropped and counted; retransmission
// recovers from them.
func (q *QP) compReceive(now Time, in *Incoming) {
	switch q.attr.State {
	case RTS, SQD, SQE:
	default:
		q.counters.DropQPState++
		return
	}
	pkt := &in.Pkt
	psn := pkt.BTH.PSN
	if q.cfg.Type != RC {
		q.counters.DropBadOpcode++
		return
	}
	// A response for a PSN never sent is forged or from an earlier life.
	if psnDiff(psn, q.req.maxPSN) >= 0 {
		q.counters.DropStale++
		return
	}
	q.compHeard(now)
	var w *sendWQE
	for {
		if q.sq.cons == q.sq.prod {
			q.counters.DropStale++
			return
		}
		w = q.sq.at(q.sq.cons)
		if w.state != wqeProcessing && w.state != wqePending {
			q.counters.DropStale++
			return
		}
		if psnDiff(psn, w.lastPSN) <= 0 {
			break
		}
		// The response is for a later request, so this WQE's requests
		// all arrived: a SEND or WRITE is acknowledged; a READ or atomic
		// lost its response, which only a retry recovers.
		if w.state != wqePending {
			q.counters.DropStale++
			return
		}
		if w.isReadOrAtomic() {
			if !q.readKeep(now, pkt) {
				q.compRetry(w, false)
			}
			return
		}
		if psnDiff(w.lastPSN, q.comp.psn) >= 0 {
			q.comp.psn = psnAdd(w.lastPSN, 1)
		}
		q.comp.midRead = false
		q.resetRetry()
		w.status = WCSuccess
		q.completeWQE(w)
		q.compProgress(now)
		if q.attr.State == Err {
			return
		}
	}
	d := psnDiff(psn, q.comp.psn)
	if d < 0 || (d > 0 && w.isReadOrAtomic()) {
		// Behind what is acknowledged already, or an out-of-order
		// response inside a READ: kept, and only the hole asked for
		// again, where it can be (read_repair.go).
		if d > 0 && q.readKeep(now, pkt) {
			return
		}
		q.counters.DropStale++
		if d > 0 {
			// A READ response went missing: ask again from the
			// missing PSN now, as the responder NAKs the first gap in
			// a WRITE, rather than wait for the next READ's responses
			// or the timer as rxe's completer does. Once per progress
			// (compRetry): what the old stream still has in flight
			// looks like more gaps until the resent responses arrive,
			// and the responder drops what it still had queued of that
			// stream (supersede).
			if q.cfg.FastRecovery {
				q.lossHeardAt(now) // arms the early retry
			}
			q.compRetry(w, false)
		}
		return
	}
	switch pkt.Info().Kind {
	case packet.KindReadResponse:
		q.compReadResponse(now, w, pkt)
	case packet.KindAtomicAck:
		q.compAtomicAck(now, w, pkt)
	case packet.KindAck:
		q.compAck(now, w, pkt)
	default:
		q.counters.DropBadOpcode++
	}
}

// compAck handles an ACKNOWLEDGE packet whose PSN lies in w: an ACK, an RNR
// NAK or a NAK.
func (q *QP) compAck(now Time, w *sendWQE, pkt *packet.Packet) {
	psn := pkt.BTH.PSN
	syn := pkt.AETH.Syndrome
	switch syn.Type() {
	case packet.AckTypeACK:
		if w.isReadOrAtomic() {
			// A READ or atomic is answered by its response, never by a
			// plain ACK (rxe would complete it without data).
			q.counters.DropStale++
			return
		}
		q.resetRetry()
		q.comp.psn = psnAdd(psn, 1)
		if w.state == wqePending && psn == w.lastPSN {
			w.status = WCSuccess
			q.completeWQE(w)
		}
		q.compProgress(now)
	case packet.AckTypeRNR:
		if q.req.rnrWait {
			// A duplicate of the RNR NAK being waited out: it must not
			// spend another rnr_retry.
			q.counters.DropStale++
			return
		}
		q.counters.RcvdRNRErr++
		// A NAK acknowledges the packets before the one it names.
		q.comp.psn = psn
		if q.comp.rnrRetry == 0 {
			q.counters.RetryRNRExceededErr++
			q.failWQE(w, WCRNRRetryExcErr)
			return
		}
		if q.comp.rnrRetry != 7 { // 7 means retry forever
			q.comp.rnrRetry--
		}
		q.req.needRetry = true
		q.req.rnrWait = true
		q.req.rnrUntil = now + Time(packet.RNRTimerNanos(syn.Value()))
		q.comp.deadline, q.comp.early = Never, Never
	case packet.AckTypeNAK:
		switch syn.Value() {
		case packet.NAKPSNSequenceError:
			q.counters.RcvdSeqErr++
			q.lossHeardAt(now)
			// The PSN is the one the responder expects: everything
			// before it arrived. That is forward progress, so a
			// go-back-N already under way has done its work and this
			// NAK, about a later loss, starts the next one; only a
			// repeated NAK for the same PSN is left to the running
			// retry. (Ignoring it until the timer fired cost a whole
			// timeout per loss inside a long message: 2% loss on 64 KiB
			// WRITEs made perftest fail with RETRY_EXC_ERR.)
			if psnDiff(psn, q.comp.psn) > 0 {
				q.comp.psn = psn
				q.resetRetry()
				q.rttAcked(now)
			} else if q.resentLostAgain(psn) {
				// Not charged to retry_cnt, as an early retry is not:
				// the responder answers, and the timer still runs.
				q.startRetry()
				return
			}
			q.compRetry(w, false)
		case packet.NAKInvalidRequest:
			q.failWQE(w, WCRemInvReqErr)
		case packet.NAKRemoteAccessError:
			q.failWQE(w, WCRemAccessErr)
		default: // remote operational error and codes rxe does not expect
			q.failWQE(w, WCRemOpErr)
		}
	default:
		q.counters.DropBadOpcode++
	}
}

// compRetry starts a go-back-N retransmission after a PSN sequence NAK, a
// lost READ/atomic response or a timeout, or fails w with RETRY_EXC_ERR
// when the retry count is spent. Unlike rxe, a retry_cnt of 7 is an
// ordinary count (IBTA: only rnr_retry 7 means infinite).
func (q *QP) compRetry(w *sendWQE, timeout bool) {
	if q.comp.startedRetry && !timeout {
		return
	}
	if q.comp.retryCnt == 0 {
		q.counters.RetryExceededErr++
		q.failWQE(w, WCRetryExcErr)
		return
	}
	q.comp.retryCnt--
	if timeout && q.readRepair(true) {
		// The repair or its answer was lost: ask for the hole again
		// rather than for all that was kept behind it.
		q.counters.CompleterRetryErr++
		return
	}
	if psnDiff(q.req.maxPSN, q.comp.psn) > 0 {
		q.counters.CompleterRetryErr++
		q.startRetry()
	}
}

// startRetry asks the requester to go back N before its next packet.
func (q *QP) startRetry() {
	q.req.needRetry = true
	q.comp.startedRetry = true
	q.comp.early = Never // the packets it resends set the next deadline
}

// compReadResponse scatters a READ response into w's SGL and completes the
// READ on its LAST or ONLY response. Responses must come in PSN order, in a
// valid FIRST/MIDDLE/LAST sequence and with the sizes the MTU dictates; any
// other is dropped.
func (q *QP) compReadResponse(now Time, w *sendWQE, pkt *packet.Packet) {
	if w.wr.Opcode != WRRead {
		q.counters.DropBadOpcode++
		return
	}
	info := pkt.Info()
	if info.Is(packet.HdrAETH) && !pkt.AETH.Syndrome.IsACK() {
		q.counters.DropBadOpcode++
		return
	}
	psn := pkt.BTH.PSN
	pos := info.Pos
	mtu := q.mtu()
	off := w.readOffset(psn, mtu)
	n := uint32(len(pkt.Payload))
	end := pos == packet.PosLast || pos == packet.PosOnly
	if q.comp.kept.n > 0 && off == w.rcvd && q.readRespFits(w, psn, pos, n) {
		// A repair's response: it may end (LAST) or start (ONLY) inside
		// the READ, where the hole does; the READ ends at its last PSN.
		end = psn == w.lastPSN
	} else {
		switch {
		case (pos == packet.PosFirst || pos == packet.PosOnly) && psn == w.firstPSN:
			// The start of the (re)requested range.
		case q.comp.midRead && (pos == packet.PosMiddle || pos == packet.PosLast):
		default:
			q.counters.DropBadOpcode++
			return
		}
		if pos == packet.PosOnly && w.firstPSN != w.lastPSN || pos == packet.PosFirst && w.firstPSN == w.lastPSN {
			q.counters.DropBadOpcode++
			return
		}
		remaining := w.length - w.rcvd
		if off != w.rcvd || (end && n != remaining) || (!end && (n != mtu || n >= remaining)) {
			q.counters.DropBadLength++
			return
		}
	}
	if err := q.scatterSend(w, off, pkt.Payload); err {
		q.failWQE(w, WCLocProtErr)
		return
	}
	q.readAdvance(now, w, n, end)
	q.readTakeKept(now)
}

// readAdvance moves the completer past the READ response at its PSN, n
// bytes of w, already scattered, completing w when end.
func (q *QP) readAdvance(now Time, w *sendWQE, n uint32, end bool) {
	w.rcvd += n
	q.resetRetry()
	q.comp.psn = psnAdd(q.comp.psn, 1)
	q.comp.midRead = !end
	if end {
		w.status = WCSuccess
		q.completeWQE(w)
	}
	q.compProgress(now)
}

// readOffset is the byte offset in w's message of the READ response at psn
// in w's current request.
func (w *sendWQE) readOffset(psn, mtu uint32) uint32 {
	return w.readBase + uint32(psnDiff(psn, w.firstPSN))*mtu
}

// compAtomicAck writes the original remote value an atomic ACK carries into
// w's local buffer (8 bytes, little-endian, as rxe on x86 stores the u64;
// PostSend ensures the buffer is 8 bytes) and completes the atomic.
func (q *QP) compAtomicAck(now Time, w *sendWQE, pkt *packet.Packet) {
	if !w.isAtomic() || !pkt.AETH.Syndrome.IsACK() {
		q.counters.DropBadOpcode++
		return
	}
	q.resetRetry()
	q.comp.psn = psnAdd(pkt.BTH.PSN, 1)
	var orig [8]byte
	binary.LittleEndian.PutUint64(orig[:], pkt.AtomicAck)
	if q.scatterSend(w, 0, orig[:]) {
		q.failWQE(w, WCLocProtErr)
		return
	}
	w.status = WCSuccess
	q.completeWQE(w)
	q.compProgress(now)
}

// scatterSend copies data into w's SGL at message offset off, checking local
// write access. It reports true on failure (bad lkey, bounds, access, or an
// SGL too short).
func (q *QP) scatterSend(w *sendWQE, off uint32, data []byte) (failed bool) {
	sgl := w.sgl
	i := 0
	for i < len(sgl) && off >= sgl[i].Length {
		off -= sgl[i].Length
		i++
	}
	for k := 0; k < len(data); i, off = i+1, 0 {
		if i >= len(sgl) {
			return true
		}
		take := min(sgl[i].Length-off, uint32(len(data)-k))
		if take == 0 {
			continue
		}
		b, err := q.cfg.Memory.Local(sgl[i].LKey, sgl[i].Addr+uint64(off), take, AccessLocalWrite)
		if err != nil || uint32(len(b)) != take {
			return true
		}
		k += copy(b, data[k:])
	}
	return false
}

// compTick runs the send side's timers at now: the end of an RNR wait lets
// the requester retransmit; an expired retransmit timer starts a retry (or
// fails the oldest WQE when retries are spent).
func (q *QP) compTick(now Time) {
	if q.req.rnrWait && now >= q.req.rnrUntil {
		q.req.rnrWait = false
	}
	q.earlyTick(now)
	if q.comp.deadline == Never || now < q.comp.deadline {
		return
	}
	q.comp.deadline = Never
	if q.attr.State != RTS && q.attr.State != SQD {
		return
	}
	if q.sq.cons == q.sq.prod {
		return
	}
	w := q.sq.at(q.sq.cons)
	if w.state != wqeProcessing && w.state != wqePending {
		return
	}
	q.lossHeardAt(now)
	q.compRetry(w, true)
}

// compDeadline returns when the send side next needs Tick: the retransmit
// timer, an early retry (FastRecovery) or the end of an RNR wait, whichever
// is first, or Never.
func (q *QP) compDeadline() Time {
	d := min(q.comp.deadline, q.comp.early)
	if q.req.rnrWait && q.req.rnrUntil < d {
		d = q.req.rnrUntil
	}
	return d
}
