package qp

// Fast recovery. Go-back-N recovers from most losses through the responder's
// PSN sequence NAK, but when the NAK itself is lost, when the first packet
// the retry resends is lost again (the responder NAKs a gap only once), or
// when the last packets of a burst are lost, nothing answers until the
// local ACK timeout: 67 ms at perftest's timeout 14. A requester that sends
// a few hundred thousand packets a second at 1% loss meets such a stall
// every few milliseconds, and waiting out the timer becomes nearly all of
// its time (kernel rxe's too: it has the same timer and the same NAKs).
//
// With Config.FastRecovery the requester expects an answer to every packet
// that asks for one (AckReq, and every READ and atomic request) within a few
// round trips of sending it, of the last response or of the last packet
// sent, whichever came later (a packet can wait behind others in the NIC's
// queue; while the requester still sends, a loss gets its NAK and a lost
// ACK is covered by the next): max(4 srtt, srtt + 4 rttvar, twice the
// largest recent round trip), the round trip
// measured from such a packet to the response that covers it, one timed PSN
// at a time and never a resent one (Karn's rule). When the newest of them
// is still unanswered at its deadline, the requester goes back N from the
// oldest unacknowledged PSN without spending retry_cnt. Each early retry
// that no fresh sample follows doubles the wait; the local ACK timeout still
// runs, and fails the WQE, as before. Timing only packets that ask for an
// answer keeps the gaps between coalesced ACKs (up to 64 packets of a long
// message) out of the estimate and out of the deadline. What an early retry
// resends twice, the responder handles as any duplicate (ACKed again, a
// READ re-read, an atomic answered from its responder resources), so a
// spurious one costs bandwidth, never data; a whole window of it when a
// queue builds up faster than the estimate follows, or where a CPU stalls
// for tens of milliseconds now and then (the interop harness's emulated
// guests, where early retries cost softroce a third of its goodput at 1-5%
// loss, and where a flood of READ responses overran a slow receiver they
// spiralled into RETRY_EXC_ERR). Hence FastRecovery is off unless asked
// for (--fast-recovery). Early retries are armed only within four local
// ACK timeouts of a loss the requester heard of (a PSN sequence NAK, a
// timeout, a gap in a READ's responses): on a path that loses nothing,
// however deep its queues, the requester behaves as kernel rxe's. The wait never
// exceeds an eighth of the local ACK timeout, and where a few round trips
// would (a slow peer, deep queues) there is no early retry at all.
//
// The responder, for its part, NAKs a gap once, as rxe's does, and once
// more each time the requester's go-back-N comes back round without the
// packet it lacks (an out-of-order PSN at or below one it saw since its
// last NAK: the requester went back): that resend was lost as well, and
// without the NAK nothing but a timer would tell the requester. A
// requester with FastRecovery takes a NAK for the PSN it is already
// resending as such a report once its go-back-N has passed that PSN.

const (
	// earlyRetryFloor keeps the wait above the cost of producing an ACK.
	earlyRetryFloor Time = 20 * Microsecond
	// earlyRetryMaxShift bounds the back-off's shift (the wait is capped
	// at an eighth of the timeout anyway).
	earlyRetryMaxShift = 10
)

// rttEstimator is RFC 6298's smoothed round trip and its variation, fed by
// one timed PSN at a time.
type rttEstimator struct {
	timing       bool
	psn          uint32 // the timed PSN
	sentAt       Time
	srtt, rttvar Time // srtt 0: no sample yet
	// peak is the largest recent sample, forgetting a sixteenth of
	// itself per sample: round trips with rare long stalls (a descheduled
	// CPU, an emulated one) have a small variance and a long tail.
	peak Time
}

// sample adds one measured round trip.
func (e *rttEstimator) sample(r Time) {
	e.peak = max(r, e.peak-e.peak/16)
	if e.srtt == 0 {
		e.srtt, e.rttvar = r, r/2
		return
	}
	d := e.srtt - r
	if d < 0 {
		d = -d
	}
	e.rttvar = (3*e.rttvar + d) / 4
	e.srtt = (7*e.srtt + r) / 8
}

// reqAsked notes a request packet at psn that asks for an answer (AckReq,
// or a READ or atomic request) sent at now: its deadline is the early
// retry's, and if it is sent for the first time and no PSN is being timed,
// it is timed.
func (q *QP) reqAsked(now Time, psn uint32, resent bool) {
	if !q.cfg.FastRecovery {
		return
	}
	q.comp.askedPSN = psn
	q.armEarly(now)
	e := &q.comp.rtt
	if !resent && !e.timing {
		e.timing, e.psn, e.sentAt = true, psn, now
	}
}

// rttAcked runs when the completer's PSN moved: a timed PSN it passed gives
// a sample (and ends the back-off), and once the newest packet that asked
// for an answer has one, there is nothing to expect early.
func (q *QP) rttAcked(now Time) {
	q.comp.lastResp = now
	e := &q.comp.rtt
	if e.timing && psnDiff(q.comp.psn, e.psn) > 0 {
		e.timing = false
		e.sample(max(now-e.sentAt, 0))
		q.comp.earlyShift = 0
	}
	if psnDiff(q.comp.psn, q.comp.askedPSN) > 0 {
		q.comp.early = Never
	}
}

// earlyWait is how long the requester waits at now for a response before
// it goes back N early: a few round trips, or an eighth of the local ACK
// timeout before the first sample. Zero means no early retry (off, no
// timer, or no loss heard of lately).
func (q *QP) earlyWait(now Time) Time {
	per := q.retransmitPeriod()
	if !q.cfg.FastRecovery || q.cfg.Type != RC || per == 0 || !q.comp.lossHeard || now-q.comp.lossAt > 4*per {
		return 0
	}
	w := per / 8
	if e := q.comp.rtt; e.srtt > 0 {
		w = max(4*e.srtt, e.srtt+4*e.rttvar, 2*e.peak, earlyRetryFloor)
	}
	if w > per/8 {
		// Round trips this long (a slow peer, a deep queue): an early
		// retry would be no earlier than a guess, and likely spurious.
		return 0
	}
	return min(w<<q.comp.earlyShift, per/8)
}

// armEarly restarts the early-retry timer from now.
func (q *QP) armEarly(now Time) {
	q.comp.early = Never
	if w := q.earlyWait(now); w != 0 {
		q.comp.early = now + w
	}
}

// earlyTick starts an early retry when the newest packet that asked for an
// answer has none by its deadline, unless nothing is outstanding or
// something else (an RNR wait, a retry not yet sent) is under way. The
// packets the retry resends set the next deadline.
func (q *QP) earlyTick(now Time) {
	if q.comp.early == Never || now < q.comp.early {
		return
	}
	q.comp.early = Never
	if q.attr.State != RTS && q.attr.State != SQD {
		return
	}
	w := q.earlyWait(now)
	if w == 0 {
		return // disarmed since: the loss is long past, or round trips grew
	}
	if last := max(q.comp.lastResp, q.comp.lastSend); now < last+w {
		// Answers are still coming, or the requester is still sending:
		// a request lost now gets its NAK from the packets behind it.
		q.comp.early = last + w
		return
	}
	if !q.sendOutstanding() || q.req.rnrWait || q.req.needRetry || psnDiff(q.req.maxPSN, q.comp.psn) <= 0 {
		return
	}
	q.counters.EarlyRetries++
	if !q.readRepair(true) {
		q.startRetry()
	}
	q.comp.earlyShift = min(q.comp.earlyShift+1, earlyRetryMaxShift)
}

// resentLostAgain reports whether a PSN sequence NAK for psn, the oldest
// unacknowledged PSN, says that the go-back-N under way lost psn again: the
// responder NAKs a gap a second time only when the requester came round
// without it, so once the retry has resent psn this NAK is news, not an
// echo of the one that started it.
func (q *QP) resentLostAgain(psn uint32) bool {
	return q.cfg.FastRecovery && q.comp.startedRetry && psn == q.comp.psn &&
		!q.req.needRetry && psnDiff(q.req.psn, psn) > 0
}

// lossHeardAt records evidence of loss at now: a PSN sequence NAK, a
// retransmit timeout, a gap in a READ's responses. It arms early retries
// for a while (earlyWait).
func (q *QP) lossHeardAt(now Time) {
	q.comp.lossHeard, q.comp.lossAt = true, now
	if q.comp.early == Never && q.sendOutstanding() {
		q.armEarly(now) // what is out already was sent before the loss
	}
}
