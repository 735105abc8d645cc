package qp

import (
	"math/bits"

	"github.com/softroce/softroce/packet"
)

// pacer holds a QP's requester to the rate its reaction point sets, as a
// NIC's per-QP rate limiter does: each request packet takes its length at
// that rate from a next-send slot, and the requester waits for the slot.
// With a Burst (real links), slots missed because the caller came late (a
// timer that woke a millisecond after the slot, as on a loaded machine)
// are made up, so the rate holds on average; slots missed because the QP
// had nothing to send are not, beyond Burst. Without one (the simulator,
// whose clock is exact), a missed slot is lost.
// A QP has no pacer state until its first CNP, and drops it when the rate
// control is back at line rate, so uncongested QPs pay nothing.
type pacer struct {
	rc   RateControl // nil: not rate limited
	next Time        // earliest time of the next request packet
	held bool        // the requester has a packet waiting for next
	// owed: packets have waited for their slots since the requester last
	// ran out of work, so a late wake-up (a real clock's timer) is caught
	// up in full; after idling, only Burst of sending ahead is allowed.
	owed bool
}

// wireOverhead is what a RoCE v2 packet occupies on an Ethernet wire beyond
// its BTH-to-ICRC length: UDP, Ethernet header, FCS, preamble and gap (IPv4
// or IPv6 is added per packet). The simulator's links count the same, so a
// QP paced at the line rate is exactly as fast as its link.
const wireOverhead = 8 + 14 + 4 + 8 + 12

// wireLen is out's length on the wire.
func wireLen(out *Outgoing) int {
	n := out.Pkt.Len() + wireOverhead + 20
	if out.AV != nil && !out.AV.DGID.Unmap().Is4() {
		n += 20
	}
	return n
}

// paceAllows reports whether the pacer lets a request packet go at now:
// at its slot, or up to Burst before it (a real clock's timers cannot wake
// the requester for slots closer together than they are late).
func (q *QP) paceAllows(now Time) bool {
	if q.pace.rc == nil {
		return true
	}
	return now >= q.pace.next-q.paceBurst()
}

// paceBurst is the device's Congestion.Burst (0 without congestion
// control).
func (q *QP) paceBurst() Time {
	if q.cfg.Congestion == nil {
		return 0
	}
	return q.cfg.Congestion.Burst
}

// paceSent charges a request packet that went out at now to the pacer.
func (q *QP) paceSent(now Time, out *Outgoing) {
	p := &q.pace
	if p.rc == nil {
		return
	}
	n := wireLen(out)
	p.rc.Sent(now, n)
	burst := q.paceBurst()
	if !p.owed || burst == 0 {
		// Exact pacing (Burst 0, the simulator's) never sends ahead of
		// the rate: a slot missed is lost.
		p.next = max(p.next, now-burst)
	}
	p.next += txTime(n, p.rc.Rate())
	q.paceMaybeIdle()
}

// txTime is how long n bytes take at rate bit/s.
func txTime(n int, rate int64) Time {
	if rate <= 0 {
		return 0
	}
	return Time((int64(n)*8*int64(Second) + rate - 1) / rate)
}

// paceCNP hands a congestion notification to the reaction point, starting
// one if the QP has none.
func (q *QP) paceCNP(now Time) {
	p := &q.pace
	if p.rc == nil {
		p.rc = q.cfg.Congestion.newRateControl(now)
		p.next = now
	}
	old := p.rc.Rate()
	p.rc.CNP(now)
	q.paceRateChanged(now, old)
}

// paceTick runs the reaction point's timers.
func (q *QP) paceTick(now Time) {
	p := &q.pace
	if p.rc == nil || p.rc.Deadline() > now {
		return
	}
	old := p.rc.Rate()
	p.rc.Tick(now)
	q.paceRateChanged(now, old)
	q.paceMaybeIdle()
}

// paceRateChanged moves the pending slot for the new rate: the part of the
// last packet's time still to run is stretched or shrunk in proportion.
func (q *QP) paceRateChanged(now Time, old int64) {
	p := &q.pace
	r := p.rc.Rate()
	if r == old || p.next <= now || r <= 0 {
		return
	}
	p.next = now + Time(mulDiv(uint64(p.next-now), uint64(old), uint64(r)))
}

// pacedAskDue reports whether a rate-limited QP should ask for an ACK in
// the middle of a message: when a quarter of the retransmit period has
// passed since it last asked. rxe asks at a message's end and every 65th
// packet, which at line rate is soon enough; a QP that DCQCN has cut to a
// few Mb/s may take longer than the whole period to send those packets,
// and the retransmit timer, armed by the first of them and moved only by
// an answer, would fire although nothing was lost (seen at 20 Mb/s through
// a RED queue: a timeout every 200 ms).
func (q *QP) pacedAskDue(now Time) bool {
	per := q.retransmitPeriod()
	return q.pace.rc != nil && per != 0 && now-q.req.askedAt >= per/4
}

// paceMaybeIdle drops a reaction point that is back at line rate.
func (q *QP) paceMaybeIdle() {
	if q.pace.rc != nil && q.pace.rc.Idle() {
		q.pace = pacer{}
	}
}

// paceDeadline is when the pacer or its reaction point next needs Tick.
func (q *QP) paceDeadline() Time {
	p := &q.pace
	if p.rc == nil {
		return Never
	}
	d := p.rc.Deadline()
	if p.held {
		d = min(d, p.next-q.paceBurst())
	}
	return d
}

// RateState reports the QP's reaction point, and whether it has one (a QP
// that never saw a CNP, or has recovered to line rate, has none).
func (q *QP) RateState() (RateState, bool) {
	if q.pace.rc == nil {
		return RateState{}, false
	}
	return q.pace.rc.State(), true
}

// mulDiv returns a·b/c, saturated to the largest Time.
func mulDiv(a, b, c uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return int64(Never)
	}
	quo, _ := bits.Div64(hi, lo, c)
	return int64(min(quo, uint64(Never)))
}

// isCNP reports whether p is a congestion notification.
func isCNP(p *packet.Packet) bool { return p.BTH.Opcode == packet.CNP }
