package qp

import "github.com/softroce/softroce/packet"

// UC and UD responders never answer: errors drop the message (IBTA classes
// D and E), and the QP keeps running, except for a malformed receive WQE
// (an SGE whose lkey does not work), which rxe treats as class A on every
// transport: the WQE completes with LOC_QP_OP_ERR and the QP goes to ERR.

// ucReceive handles a UC request. A PSN gap drops packets until the next
// FIRST or ONLY, which starts a new message; the message in progress is
// abandoned and its receive WQE reused for the next one, as in rxe.
func (q *QP) ucReceive(p *packet.Packet, info *packet.OpcodeInfo) {
	r := &q.resp
	psn := p.BTH.PSN & psnMask
	start := info.Pos == packet.PosFirst || info.Pos == packet.PosOnly
	if r.dropMsg || psn != r.psn {
		if !start {
			r.dropMsg = true
			q.counters.DropUCGap++
			return
		}
		r.dropMsg = false
		r.restartMsg()
	}
	if !r.seqOK(info) {
		// rxe's class D1: a missing FIRST, or a new message while one is
		// in progress; the message in progress is abandoned and this
		// packet dropped.
		r.restartMsg()
		r.dropMsg = !start
		q.counters.DropBadOpcode++
		return
	}
	if info.Kind == packet.KindWrite && q.attr.AccessFlags&AccessRemoteWrite == 0 {
		q.ucDrop(&q.counters.DropAccess)
		return
	}
	if info.TakesRecvWQE() && !q.takeWQE() {
		q.ucDrop(&q.counters.DropNoWQE)
		return
	}
	if !q.lengthOK(p, info) {
		q.ucDrop(&q.counters.DropBadLength)
		return
	}
	last := info.Pos == packet.PosLast || info.Pos == packet.PosOnly
	switch info.Kind {
	case packet.KindSend:
		if err := q.scatter(p.Payload); err != nil {
			q.recvDataErr(err)
			return
		}
		if !last {
			r.inMsg = msgSend
			break
		}
		r.msn = (r.msn + 1) & psnMask
		wc := WC{Opcode: WCRecv, ByteLen: uint32(r.recvd)}
		if info.Is(packet.HdrImmDt) {
			wc.Flags, wc.Imm = WCWithImm, p.Imm
		}
		q.completeRecv(&wc, p.BTH.SE)
	case packet.KindWrite:
		switch q.writeData(p, info) {
		case writeBadLength:
			q.ucDrop(&q.counters.DropBadLength)
			return
		case writeBadKey:
			q.ucDrop(&q.counters.DropAccess)
			return
		}
		if !last {
			r.inMsg = msgWrite
			break
		}
		r.inMsg = msgNone
		r.msn = (r.msn + 1) & psnMask
		if info.Is(packet.HdrImmDt) {
			wc := WC{Opcode: WCRecvRDMAImm, ByteLen: r.length, Flags: WCWithImm, Imm: p.Imm}
			q.completeRecv(&wc, p.BTH.SE)
		} else {
			r.restartMsg()
		}
	default:
		// READ and atomics do not exist on UC.
		q.counters.DropBadOpcode++
		return
	}
	if q.attr.State != Err {
		r.psn = psnAdd(psn, 1)
	}
}

// ucDrop drops the UC message in progress: packets up to the next FIRST or
// ONLY are dropped too, and the receive WQE (if one was taken) stays for the
// next message.
func (q *QP) ucDrop(counter *uint64) {
	*counter++
	q.resp.restartMsg()
	q.resp.dropMsg = true
}

// recvDataErr handles a failure to place a UC or UD SEND into its receive
// WQE. A message longer than the buffer completes the WQE with
// LOC_LEN_ERR and is dropped (IBTA; rxe drops it silently without an SRQ).
// A receive SGE that does not resolve is rxe's malformed WQE: LOC_QP_OP_ERR
// and the QP goes to ERR.
func (q *QP) recvDataErr(err error) {
	if err == errRecvOverflow {
		q.counters.DropBadLength++
		q.completeRecvErr(WCLocLenErr)
		q.resp.dropMsg = q.cfg.Type == UC
		return
	}
	q.completeRecvErr(WCLocQPOpErr)
	q.event(EventQPFatal)
	q.toError()
}

// udReceive handles a UD SEND: the QKey must match; the receive buffer gets
// the 40-byte GRH area (for IPv4 20 zero bytes and the IPv4 header, for IPv6
// the IPv6 header) and then the payload.
func (q *QP) udReceive(in *Incoming, info *packet.OpcodeInfo) {
	p := &in.Pkt
	r := &q.resp
	if info.Kind != packet.KindSend {
		q.counters.DropBadOpcode++
		return
	}
	if p.DETH.QKey != q.attr.QKey {
		q.counters.DropBadQKey++
		return
	}
	// UD has no path MTU attribute: the limit is the port's MTU, as rxe's
	// requester uses for UD.
	if uint32(len(p.Payload)) > uint32(q.cfg.MaxMTU) {
		q.counters.DropBadLength++
		return
	}
	if !q.takeWQE() {
		q.counters.DropNoWQE++
		return
	}
	g := r.grh[:]
	clear(g)
	switch len(in.IPHeader) {
	case grhLen:
		copy(g, in.IPHeader)
	case packet.IPv4Len:
		copy(g[grhLen-packet.IPv4Len:], in.IPHeader)
	}
	if uint64(grhLen+len(p.Payload)) > r.wqe.length {
		q.recvDataErr(errRecvOverflow)
		return
	}
	if err := q.scatter(g); err != nil {
		q.recvDataErr(err)
		return
	}
	if err := q.scatter(p.Payload); err != nil {
		q.recvDataErr(err)
		return
	}
	wc := WC{Opcode: WCRecv, ByteLen: uint32(r.recvd), Flags: WCWithGRH, SrcQP: p.DETH.SrcQP & psnMask}
	if info.Is(packet.HdrImmDt) {
		wc.Flags |= WCWithImm
		wc.Imm = p.Imm
	}
	q.completeRecv(&wc, p.BTH.SE)
}
