package qp

import (
	"github.com/softroce/softroce/internal/prefetch"
	"github.com/softroce/softroce/packet"
)

// Requester limits, as rxe's rxe_param.h.
const (
	// maxUnackedPSNs bounds how far the requester runs ahead of the oldest
	// unacknowledged PSN (RXE_MAX_UNACKED_PSNS).
	maxUnackedPSNs = 128
	// maxPktPerAck is how many packets of one long RC message may go out
	// without AckReq (RXE_MAX_PKT_PER_ACK).
	maxPktPerAck = 64
	// gsiQKey is the QKey of QP1 (IB_QP1_QKEY), which it always sends.
	gsiQKey = 0x80010000
	// defaultPKey is the only P_Key rxe has (full member, default partition).
	defaultPKey = 0xFFFF
)

// requester turns send WQEs into request packets, in order (rxe_req.c).
type requester struct {
	idx    uint64 // next WQE to work on
	maxIdx uint64 // one past the newest WQE ever started (for SQD drain)
	psn    uint32 // PSN of the next request packet
	maxPSN uint32 // one past the newest PSN ever sent (to count retransmits)
	midMsg bool   // the WQE at idx is partly sent: next is MIDDLE or LAST

	noackPkts int  // packets since the last AckReq, as rxe's noack_pkts
	askedAt   Time // when the last packet with AckReq went out
	rdMax     int  // max_rd_atomic credits (rounded up to a power of two)
	rdOut     int  // credits held by READ/atomic WQEs not yet completed

	// needRetry asks for go-back-N from the completer's PSN before the next
	// packet (rxe's req.need_retry); the retry runs lazily so that ACKs that
	// arrive before it still count.
	needRetry bool
	// repair asks for a hole in a READ's responses before anything else
	// (read_repair.go).
	repair readRepairReq
	// rnrWait holds the requester until rnrUntil after an RNR NAK.
	rnrWait  bool
	rnrUntil Time

	// SQD: WQEs at or beyond drainLimit are not started; drainNotify asks
	// for EventSQDrained when the ones before it have completed.
	drainLimit  uint64
	drainNotify bool

	// scratch gathers the payload of a packet that spans several SGEs;
	// gatherBuf allocates it on first use.
	scratch []byte
}

func (r *requester) reset(idx uint64) {
	*r = requester{idx: idx, maxIdx: idx, rdMax: r.rdMax, scratch: r.scratch}
}

// mtu is the payload size of a full packet: the path MTU for RC and UC, the
// port's MTU for UD (rxe's get_mtu uses the port's mtu_cap).
func (q *QP) mtu() uint32 {
	m := q.attr.PathMTU
	if q.cfg.Type == UD {
		m = q.cfg.MaxMTU
	}
	if !m.Valid() {
		m = 256
	}
	return uint32(m)
}

// retransmitPeriod is the local ACK timeout, 4.096 us * 2^Timeout; 0 means
// no timer.
func (q *QP) retransmitPeriod() Time {
	t := q.attr.Timeout
	if t == 0 {
		return 0
	}
	if t > 31 {
		t = 31
	}
	return Time(4096) << t
}

// reqRunnable reports whether the requester may send at time now: the QP
// is in RTS or SQD and no RNR wait is running.
func (q *QP) reqRunnable(now Time) bool {
	if q.attr.State != RTS && q.attr.State != SQD {
		return false
	}
	return !q.req.rnrWait || now >= q.req.rnrUntil
}

// reqPeek returns the index and WQE the requester would work on next,
// starting at idx, or nil when there is none or it may not start yet (SQD,
// a fence, a WQE the requester failed).
func (q *QP) reqPeek(idx uint64) (uint64, *sendWQE) {
	for ; idx != q.sq.prod; idx++ {
		w := q.sq.at(idx)
		switch w.state {
		case wqeDone:
			continue
		case wqeError:
			return idx, nil
		}
		if q.attr.State == SQD && idx >= q.req.drainLimit {
			return idx, nil
		}
		if w.wr.Flags&SendFence != 0 && w.state == wqePosted {
			// IBTA 10.8.3.3: a fenced WR waits for every earlier READ and
			// atomic to complete. (rxe waits for every earlier WR.)
			for j := q.sq.cons; j != idx; j++ {
				if q.sq.at(j).isReadOrAtomic() {
					return idx, nil
				}
			}
		}
		return idx, w
	}
	return idx, nil
}

// reqMayStart applies flow control to the next packet of w at PSN psn: the
// unacknowledged-PSN window (RC) and the max_rd_atomic credits.
func (q *QP) reqMayStart(w *sendWQE, psn uint32) bool {
	if q.cfg.Type == RC && psnDiff(psn, psnAdd(q.comp.psn, maxUnackedPSNs)) > 0 {
		return false
	}
	if w.isReadOrAtomic() && !w.hasRdAtomic && q.req.rdOut >= q.req.rdMax {
		return false
	}
	return true
}

// udOversize reports whether w is a UD send longer than the MTU, which rxe
// completes successfully without sending (C10-93.1.1).
func (q *QP) udOversize(w *sendWQE) bool {
	return q.cfg.Type == UD && w.length > q.mtu()
}

// reqPending reports whether reqTransmit would produce a packet at now. It
// does not change the QP, so it assumes that local operations on the way
// succeed and that the payload's lkeys are good: when they are not,
// Transmit returns nothing (the WQE fails) and Pending turns false.
func (q *QP) reqPending(now Time) bool {
	if !q.reqRunnable(now) || !q.paceAllows(now) {
		return false
	}
	if q.req.repair.pending && !q.req.needRetry {
		return true
	}
	idx, psn := q.req.idx, q.req.psn
	if q.req.needRetry {
		idx, psn = q.sq.cons, q.comp.psn
	}
	for {
		i, w := q.reqPeek(idx)
		if w == nil {
			return false
		}
		if w.isLocal() || q.udOversize(w) {
			idx = i + 1
			continue
		}
		return q.reqMayStart(w, psn)
	}
}

// reqTransmit fills out with the next request packet and reports whether
// there was one. Local operations and oversize UD sends met on the way are
// executed and retired.
func (q *QP) reqTransmit(now Time, out *Outgoing) bool {
	if !q.reqRunnable(now) {
		return false
	}
	q.req.rnrWait = false
	q.pace.held = false
	if !q.paceAllows(now) {
		q.pace.held = q.reqPending(q.pace.next)
		q.pace.owed = q.pace.owed || q.pace.held
		return false
	}
	sent := q.reqBuild(now, out)
	if !sent {
		// Out of work: no catching up later. (Held by the window or the
		// read credits, the work still waits, and so do its slots.)
		if _, w := q.reqPeek(q.req.idx); w == nil {
			q.pace.owed = false
		}
	}
	return sent
}

// reqBuild is reqTransmit once the pacer lets a packet go.
func (q *QP) reqBuild(now Time, out *Outgoing) bool {
	if q.req.needRetry {
		q.reqRetry()
	}
	if q.req.repair.pending {
		q.readRepairTransmit(now, out)
		q.paceSent(now, out)
		return true
	}
	for {
		idx, w := q.reqPeek(q.req.idx)
		q.req.idx = idx
		if w == nil {
			return false
		}
		if w.isLocal() {
			q.doLocalOp(w)
			q.retireDone()
			if q.attr.State == Err {
				return false
			}
			continue
		}
		if !q.reqMayStart(w, q.req.psn) {
			return false
		}
		if q.udOversize(w) {
			w.firstPSN, w.lastPSN = q.req.psn, q.req.psn
			q.req.psn = psnAdd(q.req.psn, 1)
			w.state = wqeDone
			q.reqAdvance()
			q.retireDone()
			continue
		}
		if q.buildRequest(now, w, out) {
			q.paceSent(now, out)
			return true
		}
		q.retireDone()
		return false
	}
}

// reqAdvance moves the requester past the WQE at idx.
func (q *QP) reqAdvance() {
	q.req.idx++
	q.req.midMsg = false
	if q.req.idx > q.req.maxIdx {
		q.req.maxIdx = q.req.idx
	}
}

// nextOpcode picks the opcode of w's next packet, as rxe's next_opcode: the
// message position follows from whether a packet of w is already out and
// whether the rest fits in one packet.
func (q *QP) nextOpcode(w *sendWQE, fits bool) packet.Opcode {
	if q.cfg.Type == UD {
		if w.wr.Opcode == WRSendImm {
			return packet.UDSendOnlyImm
		}
		return packet.UDSendOnly
	}
	var first, middle, last, only packet.Opcode
	switch w.wr.Opcode {
	case WRSend:
		first, middle, last, only = packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLast, packet.RCSendOnly
	case WRSendImm:
		first, middle, last, only = packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLastImm, packet.RCSendOnlyImm
	case WRSendInv:
		first, middle, last, only = packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLastInv, packet.RCSendOnlyInv
	case WRWrite:
		first, middle, last, only = packet.RCWriteFirst, packet.RCWriteMiddle, packet.RCWriteLast, packet.RCWriteOnly
	case WRWriteImm:
		first, middle, last, only = packet.RCWriteFirst, packet.RCWriteMiddle, packet.RCWriteLastImm, packet.RCWriteOnlyImm
	case WRRead:
		return packet.RCReadRequest
	case WRCmpSwap:
		return packet.RCCompareSwap
	case WRFetchAdd:
		return packet.RCFetchAdd
	}
	var op packet.Opcode
	switch {
	case q.req.midMsg && fits:
		op = last
	case q.req.midMsg:
		op = middle
	case fits:
		op = only
	default:
		op = first
	}
	if q.cfg.Type == UC {
		op += packet.Opcode(packet.TransportUC)
	}
	return op
}

// buildRequest fills out with w's next packet and updates the WQE and
// requester state (rxe's init_req_packet, finish_packet, update_wqe_*,
// update_state). On a local protection error it marks w failed and reports
// false.
func (q *QP) buildRequest(now Time, w *sendWQE, out *Outgoing) bool {
	mtu := q.mtu()
	var resid uint32
	if w.wr.Opcode == WRRead {
		resid = w.length - w.rcvd
	} else {
		resid = w.length - w.sent
	}
	op := q.nextOpcode(w, resid <= mtu)
	info := op.Info()
	var payload []byte
	var n uint32
	if w.carriesPayload() {
		n = min(resid, mtu)
		var ok bool
		if payload, ok = q.gather(w, w.sent, n); !ok {
			w.state = wqeError
			w.status = WCLocProtErr
			return false
		}
	}
	if w.isReadOrAtomic() && !w.hasRdAtomic {
		w.hasRdAtomic = true
		q.req.rdOut++
	}
	start := info.Pos == packet.PosOnly || info.Pos == packet.PosFirst
	end := info.Pos == packet.PosOnly || info.Pos == packet.PosLast
	psn := q.req.psn

	p := &out.Pkt
	*p = packet.Packet{}
	p.BTH.Opcode = op
	p.BTH.PKey = defaultPKey
	p.BTH.PSN = psn
	p.BTH.DestQP = q.attr.DestQPN
	if q.cfg.Type == UD {
		p.BTH.DestQP = w.wr.RemoteQPN
	}
	p.BTH.SE = end && w.wr.Flags&SendSolicited != 0 &&
		(info.Kind == packet.KindSend || op == packet.RCWriteLastImm || op == packet.RCWriteOnlyImm ||
			op == packet.UCWriteLastImm || op == packet.UCWriteOnlyImm)
	if q.cfg.Type == RC {
		// rxe: ack_req = END || noack_pkts++ > RXE_MAX_PKT_PER_ACK, so
		// within a long message every 66th packet asks for an ACK.
		if end {
			p.BTH.AckReq = true
		} else {
			p.BTH.AckReq = q.req.noackPkts > maxPktPerAck || q.pacedAskDue(now)
			q.req.noackPkts++
		}
		if p.BTH.AckReq {
			q.req.noackPkts = 0
			q.req.askedAt = now
		}
	}
	if info.Is(packet.HdrRETH) {
		p.RETH = packet.RETHFields{VA: w.iova, RKey: w.wr.RKey, Length: resid}
	}
	if info.Is(packet.HdrImmDt) {
		p.Imm = w.wr.Imm
	}
	if info.Is(packet.HdrIETH) {
		p.IETH = w.wr.InvRKey
	}
	if info.Is(packet.HdrAtomicETH) {
		p.AtomicETH = packet.AtomicETHFields{VA: w.iova, RKey: w.wr.RKey}
		if w.wr.Opcode == WRCmpSwap {
			p.AtomicETH.SwapAdd, p.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		} else {
			p.AtomicETH.SwapAdd = w.wr.CompareAdd
		}
	}
	if info.Is(packet.HdrDETH) {
		p.DETH = packet.DETHFields{QKey: w.wr.RemoteQKey, SrcQP: q.cfg.QPN}
		switch {
		case q.cfg.QPN == 1:
			p.DETH.QKey = gsiQKey
		case w.wr.RemoteQKey&0x80000000 != 0:
			// IBTA 10.2.5: a QKey with the high bit set means "use the
			// QP's own QKey" (rxe sends the WR's value as is).
			p.DETH.QKey = q.attr.QKey
		}
	}
	p.Payload = payload
	out.AV = &q.attr.AV
	if q.cfg.Type == UD {
		out.AV = &w.ah
	}
	out.SrcPort = q.cfg.SrcPort

	// PSNs: a READ request takes one PSN per response packet.
	if start {
		npkts := uint32(1)
		if w.wr.Opcode == WRRead || w.carriesPayload() {
			npkts = max((resid+mtu-1)/mtu, 1)
		}
		w.firstPSN = psn
		w.lastPSN = psnAdd(psn, npkts-1)
		if w.wr.Opcode == WRRead {
			w.readBase = w.rcvd
		}
	}
	if w.wr.Opcode == WRRead {
		q.req.psn = psnAdd(w.lastPSN, 1)
	} else {
		q.req.psn = psnAdd(psn, 1)
	}
	w.sent += n
	resent := psnDiff(psn, q.req.maxPSN) < 0
	if resent {
		q.counters.Retransmits++
	}
	if q.cfg.Type == RC {
		q.comp.lastSend = now
		if p.BTH.AckReq || w.isReadOrAtomic() {
			q.reqAsked(now, psn, resent)
		}
	}
	if psnDiff(q.req.psn, q.req.maxPSN) > 0 {
		q.req.maxPSN = q.req.psn
	}
	if end {
		w.state = wqePending
		if q.cfg.Type != RC {
			w.state = wqeDone
		}
		q.reqAdvance()
	} else {
		w.state = wqeProcessing
		q.req.midMsg = true
		if q.req.idx+1 > q.req.maxIdx {
			q.req.maxIdx = q.req.idx + 1
		}
	}
	if q.cfg.Type == RC {
		if per := q.retransmitPeriod(); per != 0 && q.comp.deadline == Never {
			q.comp.deadline = now + per
		}
		if end {
			q.compCatchUp(now)
		}
	} else if end {
		q.retireDone()
	}
	return true
}

// gather returns the n payload bytes of w at message offset off: inline
// data from the WQE's copy; registered memory aliased directly when one SGE
// holds them all, else copied into the scratch buffer. It reports false on
// a bad lkey or bounds.
func (q *QP) gather(w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	after := w.length - off - n // the message's bytes past this packet's
	if w.isInline() {
		return w.inline[off : off+n], true
	}
	sgl := w.sgl
	i := 0
	for i < len(sgl) && off >= sgl[i].Length {
		off -= sgl[i].Length
		i++
	}
	if i == len(sgl) {
		return nil, false
	}
	if sgl[i].Length-off >= n {
		// The next packet's bytes, where the message and this SGE go
		// on, are asked for too, to prefetch them (package prefetch says
		// why); if they fail the access check, that packet will say so.
		ahead := min(sgl[i].Length-off-n, after, n)
		b, err := q.cfg.Memory.Local(sgl[i].LKey, sgl[i].Addr+uint64(off), n+ahead, 0)
		if err != nil && ahead > 0 {
			ahead = 0
			b, err = q.cfg.Memory.Local(sgl[i].LKey, sgl[i].Addr+uint64(off), n, 0)
		}
		if err != nil || uint32(len(b)) != n+ahead {
			return nil, false
		}
		prefetch.Read(b[n:])
		return b[:n:n], true
	}
	buf := q.gatherBuf(n)
	if buf == nil {
		return nil, false
	}
	for k := uint32(0); k < n; i, off = i+1, 0 {
		if i == len(sgl) {
			return nil, false
		}
		take := min(sgl[i].Length-off, n-k)
		if take == 0 {
			continue
		}
		b, err := q.cfg.Memory.Local(sgl[i].LKey, sgl[i].Addr+uint64(off), take, 0)
		if err != nil || uint32(len(b)) != take {
			return nil, false
		}
		k += uint32(copy(buf[k:], b))
	}
	return buf, true
}

// reqRetry rewinds the requester to the oldest unacknowledged PSN (go-back-N,
// rxe's req_retry): every started WQE goes back to posted; the first one
// skips the packets already acknowledged, and a partly answered READ asks
// again only for the bytes still missing.
func (q *QP) reqRetry() {
	q.req.needRetry = false
	q.comp.rtt.timing = false // Karn: a resent PSN's answer times nothing
	// The go-back-N's responses bring again whatever was kept.
	q.req.repair.pending = false
	q.comp.kept = readKept{}
	q.req.idx = q.sq.cons
	q.req.psn = q.comp.psn
	q.req.midMsg = false
	mtu := q.mtu()
	first := true
	for i := q.sq.cons; i != q.sq.prod; i++ {
		w := q.sq.at(i)
		if w.state == wqePosted || w.state == wqeError {
			break
		}
		if w.state == wqeDone {
			continue
		}
		if first && w.carriesPayload() && psnDiff(q.comp.psn, w.lastPSN) > 0 {
			// Wholly acknowledged (a duplicate ACK for its last PSN came in
			// while a resend was under way): complete it rather than
			// restart it with nothing left to send, as rxe's check_psn does.
			w.status, w.state = WCSuccess, wqeDone
			q.req.idx = i + 1
			q.retireDone()
			if q.attr.State == Err {
				return
			}
			continue
		}
		w.iova = w.wr.RemoteAddr
		w.sent = 0
		if !first {
			w.rcvd = 0
		}
		if first {
			first = false
			switch {
			case w.carriesPayload():
				if npsn := psnDiff(q.comp.psn, w.firstPSN); npsn > 0 {
					w.sent = min(uint32(npsn)*mtu, w.length)
					q.req.midMsg = true
				}
			case w.wr.Opcode == WRRead:
				w.iova += uint64(w.rcvd)
			}
		}
		w.state = wqePosted
	}
}

// sendOnModify applies a Modify to the send side; q.attr already holds the
// new attributes and prev is the state before. RESET drops the send queue
// silently; ERR and SQE flush it (in SQE the send queue is not processed,
// IBTA 10.3.1); SQD stops starting WQEs and raises EventSQDrained, if
// EnSQDAsyncNotify asked for it, once the started ones complete; RTS (from
// RTR, SQD or SQE) needs nothing: the requester runs whenever the state is
// RTS. The SQ PSN sets both the requester's next PSN and the completer's
// expected one; max_rd_atomic is rounded up to a power of two, as rxe.
func (q *QP) sendOnModify(prev State, mask AttrMask) {
	st := q.attr.State
	if st == Reset && prev != Reset {
		q.resetSend()
	}
	if mask&AttrSQPSN != 0 {
		p := q.attr.SQPSN & psnMask
		q.req.psn, q.req.maxPSN, q.comp.psn = p, p, p
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		q.req.rdMax = rdAtomicCredits(q.attr.MaxRdAtomic)
	}
	if mask&AttrRetryCnt != 0 {
		q.comp.retryCnt = q.attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		q.comp.rnrRetry = q.attr.RNRRetry
	}
	if st == prev {
		return
	}
	switch st {
	case Err, SQE:
		q.flushSend()
	case SQD:
		// Stop starting WQEs; those already started (including a message
		// partly sent) finish.
		q.req.drainLimit = q.req.maxIdx
		q.req.drainNotify = q.attr.EnSQDAsyncNotify
		q.checkDrained()
	}
}
