package qp

import (
	"math/bits"

	"github.com/softroce/softroce/packet"
)

// Selective repair of a READ's lost responses.
//
// Kernel rxe's completer drops every READ response that arrives after a
// missing one and then asks again for the whole rest of the READ (go-back-N).
// Behind a slow bottleneck that throws away what the responder had queued
// behind the lost response: up to maxUnackedPSNs packets per loss, 55 ms of
// a 20 Mb/s link, so at 0.1% loss both stacks lost about 15% of READ
// goodput to it.
//
// Here a response that arrives past a gap is kept: its payload goes where it
// belongs in the READ's buffer (a READ's data are undefined until it
// completes, so writing early shows nothing) and a bit records its PSN. The
// requester then asks again for the missing range only, a READ request for
// a subset of the original (the hole's PSN, address and length), which the
// responder answers from its record of the READ (rxe_resp.c
// duplicate_request accepts "the same as the previous one or a subset of
// it"). When the repair's responses fill the hole, the kept responses behind
// it are taken in one step.
//
// Three rules keep this safe with either responder:
//   - Only a hole inside a READ is repaired, one that ends before the READ's
//     last PSN, so the request cannot be mistaken for a go-back-N (which
//     always asks to the end, and behind which softroce's responder drops
//     what it still had queued: resp_out.go supersede). A hole that runs to
//     the READ's end goes back N, as before.
//   - Only the hole at the completer's PSN is repaired, one at a time:
//     kernel rxe narrows a READ's record to each replay's start (va_org)
//     and refuses a later request that starts before it; asking in PSN
//     order never does.
//   - A go-back-N forgets every kept response: its own responses bring them
//     again.
//
// A lost repair (or a lost answer to it) is noticed without waiting for the
// local ACK timeout where it can be: the responder answers the repair no
// later than the requests sent after it, so a response to the last PSN
// requested before the repair went out, or to a later one, that arrives
// while the hole is still open sends the repair once more. Behind a FIFO
// queue (kernel rxe's responder, a qdisc) that second repair is often
// spurious, which costs the hole's packets once; softroce's responder
// answers a repair ahead of what it has queued, so there it never is. A
// repair sent when nothing more can come goes out twice at once. Only
// when both are lost does the timer decide.
//
// Kept responses are bounded by readKeepWindow PSNs past the first one's
// hole; the requester never runs more than maxUnackedPSNs ahead of the
// completer, so with READs of up to that many packets the window holds
// everything that can be in flight. Past it a response is dropped and
// makes a later hole.

// readKeepWindow is how many PSNs, from the first one kept, responses may be
// kept for.
const readKeepWindow = 256

// readKept records the READ responses that arrived past a gap and the
// repair that asks for the gap.
type readKept struct {
	base uint32 // PSN of bit 0: the completer's PSN when the first was kept
	bits [readKeepWindow / 64]uint64
	n    int // responses kept
	// A repair asked for [repairPSN, repairEnd) and is answered while the
	// completer's PSN lies in that range.
	repairing            bool
	repairPSN, repairEnd uint32
	// repairMax is the requester's maxPSN when the repair went out; resent
	// says it was sent a second time.
	repairMax uint32
	resent    bool
	// overflow: a response past the window was dropped, so once the kept
	// ones are taken the READ has a hole where they were.
	overflow bool
}

// has reports whether the response at psn is kept.
func (k *readKept) has(psn uint32) bool {
	if k.n == 0 {
		return false
	}
	d := psnDiff(psn, k.base)
	return d >= 0 && d < readKeepWindow && k.bits[d/64]&(1<<(d%64)) != 0
}

// add records psn, a PSN past comp, the completer's PSN. It reports false
// when psn lies outside the window.
func (k *readKept) add(psn, comp uint32) bool {
	if k.n == 0 {
		k.base = comp
		k.bits = [readKeepWindow / 64]uint64{}
	}
	d := psnDiff(psn, k.base)
	if d < 0 || d >= readKeepWindow {
		return false
	}
	k.bits[d/64] |= 1 << (d % 64)
	k.n++
	return true
}

// take forgets psn, which the completer has passed.
func (k *readKept) take(psn uint32) {
	d := psnDiff(psn, k.base)
	k.bits[d/64] &^= 1 << (d % 64)
	k.n--
}

// next returns the first kept PSN in (from, last], if any.
func (k *readKept) next(from, last uint32) (uint32, bool) {
	if k.n == 0 {
		return 0, false
	}
	lo := max(psnDiff(from, k.base)+1, 0)
	hi := min(psnDiff(last, k.base), readKeepWindow-1)
	for d := lo; d <= hi; {
		word := k.bits[d/64] >> (d % 64)
		if word == 0 {
			d = (d/64 + 1) * 64
			continue
		}
		d += int32(bits.TrailingZeros64(word))
		if d > hi {
			break
		}
		return psnAdd(k.base, uint32(d)), true
	}
	return 0, false
}

// outstanding reports whether the repair asked for covers psn, the
// completer's PSN: its responses are still to come.
func (k *readKept) outstanding(psn uint32) bool {
	return k.repairing && psnDiff(psn, k.repairPSN) >= 0 && psnDiff(psn, k.repairEnd) < 0
}

// readRepairReq is a repair READ request waiting to be sent.
type readRepairReq struct {
	pending bool
	psn     uint32
	va      uint64
	rkey    uint32
	length  uint32
}

// headRead returns the WQE at the head of the send queue if it is a READ
// that is waiting for responses and the completer's PSN lies in its current
// request.
func (q *QP) headRead() *sendWQE {
	if q.sq.cons == q.sq.prod {
		return nil
	}
	w := q.sq.at(q.sq.cons)
	if w.wr.Opcode != WRRead || w.state != wqePending ||
		psnDiff(q.comp.psn, w.firstPSN) < 0 || psnDiff(q.comp.psn, w.lastPSN) > 0 {
		return nil
	}
	return w
}

// readRespFits reports whether a READ response of n payload bytes at psn, in
// position pos, is one the responder sends for w at that PSN, whether from
// the original request, a go-back-N or a repair: a full MTU before w's last
// PSN, the rest at it, and FIRST or ONLY exactly at the READ's first byte
// (a replay from inside the READ, rxe's and ours, starts with MIDDLE or
// LAST).
func (q *QP) readRespFits(w *sendWQE, psn uint32, pos packet.Position, n uint32) bool {
	mtu := q.mtu()
	off := w.readOffset(psn, mtu)
	if start := pos == packet.PosFirst || pos == packet.PosOnly; start != (off == 0) {
		return false
	}
	if psn == w.lastPSN {
		return off <= w.length && n == w.length-off
	}
	return n == mtu && off+mtu < w.length
}

// readKeep takes a READ response at a PSN past the completer's, in the READ
// at the head of the send queue or in a READ behind it: it writes the
// payload where it belongs, records the PSN and asks for the hole before
// it. It reports false when the response is not one to keep (the caller
// then goes back N as before): not a READ's, outside the window, or past
// the head READ while the head's hole runs to its end.
func (q *QP) readKeep(now Time, pkt *packet.Packet) bool {
	info := pkt.Info()
	if info.Kind != packet.KindReadResponse || (info.Is(packet.HdrAETH) && !pkt.AETH.Syndrome.IsACK()) {
		return false
	}
	head := q.headRead()
	if head == nil {
		return false
	}
	psn := pkt.BTH.PSN
	k := &q.comp.kept
	if psnDiff(psn, q.comp.psn) <= 0 {
		return false
	}
	if k.n > 0 && psnDiff(psn, k.base) >= readKeepWindow {
		// Past the window while a hole is being repaired (a READ longer
		// than the window): dropped, it is a later hole to repair, and
		// going back N now would throw away what was kept.
		q.counters.DropStale++
		k.overflow = true
		q.readRepairLost(psn)
		return true
	}
	if psnDiff(psn, q.comp.psn) >= readKeepWindow {
		return false
	}
	var w *sendWQE
	for i := q.sq.cons; i != q.sq.prod; i++ {
		x := q.sq.at(i)
		if x.wr.Opcode != WRRead || x.state != wqePending {
			return false
		}
		if psnDiff(psn, x.lastPSN) <= 0 {
			w = x
			break
		}
	}
	if w == nil || psnDiff(psn, w.firstPSN) < 0 {
		return false
	}
	if w != head {
		if _, inside := k.next(q.comp.psn, head.lastPSN); !inside {
			return false
		}
	}
	if k.has(psn) {
		q.counters.DropStale++ // a copy of one kept already
		return true
	}
	n := uint32(len(pkt.Payload))
	if !q.readRespFits(w, psn, info.Pos, n) {
		return false
	}
	if q.scatterSend(w, w.readOffset(psn, q.mtu()), pkt.Payload) {
		return false // the in-order response fails the READ
	}
	k.add(psn, q.comp.psn)
	q.counters.ReadRespKept++
	q.comp.lastResp = now
	if q.cfg.FastRecovery {
		q.lossHeardAt(now) // arms the early retry, which asks again
	}
	if !q.readRepairLost(psn) {
		q.readRepair(false)
	}
	return true
}

// readRepairLost sends the outstanding repair again, once, when a response
// at psn shows that its answer should have come already: psn is the last
// one requested before the repair went out, or later.
func (q *QP) readRepairLost(psn uint32) bool {
	k := &q.comp.kept
	if !k.outstanding(q.comp.psn) || k.resent || q.req.repair.pending || psnDiff(psn, k.repairMax) < -1 {
		return false
	}
	k.resent = true
	return q.readRepair(true)
}

// readRepair asks for the hole at the completer's PSN, unless a repair for
// it is out already (again says it may be lost: ask anyway). It reports
// false when there is no hole inside the head READ to ask for.
func (q *QP) readRepair(again bool) bool {
	k := &q.comp.kept
	if k.n == 0 {
		return false
	}
	if !again && k.outstanding(q.comp.psn) {
		return true
	}
	w := q.headRead()
	if w == nil {
		return false
	}
	next, ok := k.next(q.comp.psn, w.lastPSN)
	if !ok {
		return false
	}
	mtu := q.mtu()
	off := w.readOffset(q.comp.psn, mtu)
	q.req.repair = readRepairReq{pending: true, psn: q.comp.psn, va: w.wr.RemoteAddr + uint64(off),
		rkey: w.wr.RKey, length: uint32(psnDiff(next, q.comp.psn)) * mtu}
	k.repairing, k.repairPSN, k.repairEnd = true, q.comp.psn, next
	if !again {
		k.resent = false
	}
	return true
}

// readTakeKept moves the completer over kept responses at its PSN, after an
// in-order response moved it: each adds its bytes to the READ it belongs to
// and completes the READ at its last PSN. Then a further hole gets its
// repair, or goes back N when it runs to the end of the head READ.
func (q *QP) readTakeKept(now Time) {
	k := &q.comp.kept
	for k.n > 0 && k.has(q.comp.psn) && q.attr.State != Err {
		w := q.headRead()
		if w == nil {
			k.n = 0
			break
		}
		k.take(q.comp.psn)
		n := q.mtu()
		end := q.comp.psn == w.lastPSN
		if end {
			n = w.length - w.rcvd
		}
		q.readAdvance(now, w, n, end)
	}
	if k.n == 0 && k.overflow && q.attr.State != Err {
		// What was dropped past the window is missing now: ask again
		// from here rather than wait for the timer.
		k.overflow = false
		if w := q.headRead(); w != nil {
			q.compRetry(w, false)
		}
		return
	}
	if k.n == 0 || q.attr.State == Err || k.outstanding(q.comp.psn) {
		return
	}
	if !q.readRepair(false) {
		if w := q.headRead(); w != nil {
			q.compRetry(w, false)
		}
	}
}

// readRepairTransmit builds the repair READ request into out.
func (q *QP) readRepairTransmit(now Time, out *Outgoing) {
	r := q.req.repair
	q.req.repair.pending = false
	// Karn: a PSN timed now is answered when the hole is, so its sample
	// would measure the repair, not the path.
	q.comp.rtt.timing = false
	k := &q.comp.kept
	k.repairMax = q.req.maxPSN
	if !k.resent && k.has(psnAdd(q.req.maxPSN, psnMask)) {
		// The last PSN requested is here already: no later response can
		// tell that this repair was lost, so it goes out twice.
		k.resent = true
		q.req.repair.pending = true
	}
	p := &out.Pkt
	*p = packet.Packet{}
	p.BTH.Opcode = packet.RCReadRequest
	p.BTH.PKey = defaultPKey
	p.BTH.PSN = r.psn
	p.BTH.DestQP = q.attr.DestQPN
	p.BTH.AckReq = true
	p.RETH = packet.RETHFields{VA: r.va, RKey: r.rkey, Length: r.length}
	out.AV = &q.attr.AV
	out.SrcPort = q.cfg.SrcPort
	q.counters.Retransmits++
	q.counters.ReadRepairs++
	q.comp.lastSend = now
	q.reqAsked(now, r.psn, true)
	if per := q.retransmitPeriod(); per != 0 && q.comp.deadline == Never {
		q.comp.deadline = now + per
	}
}
