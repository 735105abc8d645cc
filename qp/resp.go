package qp

import (
	"encoding/binary"
	"errors"

	"github.com/softroce/softroce/internal/prefetch"
	"github.com/softroce/softroce/packet"
)

// The responder follows kernel rxe's rxe_resp.c: each request packet goes
// through the PSN check, the opcode-sequence check, the access check, the
// resource check (receive WQE, responder resources), the length check, the
// key check, then executes, completes and acknowledges. Unlike rxe, which
// sends from inside that loop, the engine queues what it has to send (ACKs,
// NAKs, READ responses, atomic ACKs) in PSN order and hands it out through
// Transmit (resp_out.go).

// msgKind is the multi-packet message a responder is in the middle of.
type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// responder is the receive half of a QP's transport state.
type responder struct {
	psn        uint32 // expected PSN of the next new request
	ackPSN     uint32 // PSN after the last SEND/WRITE/atomic executed (rxe's ack_psn)
	msn        uint32 // messages completed, 24 bits
	inMsg      msgKind
	sentPSNNak bool // RC: a PSN sequence error NAK was sent; stay quiet until in order
	// nakSeen is the last out-of-order PSN since that NAK: one at or
	// below it means the requester went back N (FastRecovery, recovery.go).
	nakSeen uint32
	dropMsg bool // UC: drop packets until the next FIRST/ONLY

	// The receive WQE of the message being received, if it takes one.
	wqe     *recvWQE
	fromSRQ bool    // wqe is srqWQE, a copy taken from the SRQ
	srqWQE  recvWQE // storage for a WQE taken from the SRQ
	recvd   uint64  // bytes placed into wqe so far
	sgeIdx  int     // scatter position: SGE index and offset within it
	sgeOff  uint32

	// The RDMA WRITE being received: next address, key, bytes left, total.
	va     uint64
	rkey   uint32
	resid  uint32
	length uint32

	// The rings hold as many entries as have been needed so far, up to
	// their capacities, which are what rxe allocates (resp_res.go).
	res     []respRes // responder resources, a ring (resp_res.go)
	resHead int
	resCap  int   // max_dest_rd_atomic rounded up: the ring's full size
	resN    uint8 // max_dest_rd_atomic the rings are (or will be) sized for

	out     []respOut // queued responses, a ring (resp_out.go)
	outHead int
	outN    int
	outCap  int // the most responses the queue holds

	grh [grhLen]byte // scratch for a UD receive's GRH area
}

// grhLen is the size of the GRH area at the head of a UD receive buffer
// (union rdma_network_hdr).
const grhLen = 40

// errRecvOverflow: the message does not fit the receive WQE's buffers.
var errRecvOverflow = errors.New("message longer than the receive buffer")

// reset returns the responder to its state at creation, expecting psn next.
func (r *responder) reset(psn uint32) {
	r.psn, r.ackPSN, r.msn = psn&psnMask, psn&psnMask, 0
	r.sentPSNNak, r.dropMsg = false, false
	r.abandon()
	for i := range r.res {
		r.res[i] = respRes{}
	}
	r.resHead = 0
	r.outHead, r.outN = 0, 0
}

// abandon forgets the message in progress and its receive WQE.
func (r *responder) abandon() {
	r.wqe, r.fromSRQ = nil, false
	r.restartMsg()
}

// restartMsg forgets the message in progress but keeps its receive WQE, to
// be filled from the start by the next message (rxe's class D1 handling).
func (r *responder) restartMsg() {
	r.inMsg = msgNone
	r.recvd, r.sgeIdx, r.sgeOff = 0, 0, 0
	r.va, r.rkey, r.resid, r.length = 0, 0, 0, 0
}

// respReceive handles a request packet addressed to the QP.
func (q *QP) respReceive(_ Time, in *Incoming) {
	info := in.Pkt.Info()
	if !info.Valid {
		q.counters.DropBadOpcode++
		return
	}
	switch info.Kind {
	case packet.KindSend, packet.KindWrite, packet.KindReadRequest, packet.KindCompareSwap,
		packet.KindFetchAdd, packet.KindFlush, packet.KindAtomicWrite:
	default:
		q.counters.DropBadOpcode++
		return
	}
	switch q.attr.State {
	case RTR, RTS, SQD, SQE:
	default:
		// RESET and INIT have no responder yet; ERR has stopped it.
		q.counters.DropQPState++
		return
	}
	if q.resp.out == nil {
		q.resp.sizeResources()
	}
	switch q.cfg.Type {
	case RC:
		q.rcReceive(&in.Pkt, info)
	case UC:
		q.ucReceive(&in.Pkt, info)
	case UD:
		q.udReceive(in, info)
	}
}

// rcReceive runs an RC request through rxe's checks in rxe's order.
func (q *QP) rcReceive(p *packet.Packet, info *packet.OpcodeInfo) {
	r := &q.resp
	if r.outN == r.outCap {
		// Every request may need one queued response. With the queue
		// full (the caller has not been calling Transmit) the request is
		// dropped unprocessed; the requester retransmits it.
		q.counters.DropRespBusy++
		return
	}
	psn := p.BTH.PSN & psnMask
	switch d := psnDiff(psn, r.psn); {
	case d > 0:
		// Class B: NAK once, then silence until the expected PSN shows
		// up, or, with FastRecovery, until the requester's go-back-N
		// comes round again without it.
		again := q.cfg.FastRecovery && r.sentPSNNak && psnDiff(psn, r.nakSeen) <= 0
		if !r.sentPSNNak || again {
			r.sentPSNNak = true
			q.counters.OutOfSeqRequest++
			r.pushAck(packet.SyndromeNAKPSNSeq, r.psn)
		}
		r.nakSeen = psn
		return
	case d < 0:
		q.counters.DuplicateRequest++
		q.rcDuplicate(p, info, psn)
		return
	}
	r.sentPSNNak = false

	if !r.seqOK(info) {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	if !q.accessOK(info) {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	switch info.Kind {
	case packet.KindReadRequest, packet.KindCompareSwap, packet.KindFetchAdd, packet.KindAtomicWrite:
		if r.resCap == 0 {
			// max_dest_rd_atomic is 0: the requester may not send these.
			q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
			return
		}
	case packet.KindFlush:
		// IBTA 1.5 FLUSH needs persistence attributes softroce does not
		// model: refused as an unsupported opcode.
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	if info.TakesRecvWQE() && !q.takeWQE() {
		// Class B: RNR NAK; the PSN is not consumed, the requester waits
		// and sends the packet again.
		q.counters.SendRNRErr++
		r.pushAck(packet.MakeRNR(q.attr.MinRNRTimer), psn)
		return
	}
	if !q.lengthOK(p, info) {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	switch info.Kind {
	case packet.KindSend:
		q.rcSend(p, info, psn)
	case packet.KindWrite:
		q.rcWrite(p, info, psn)
	case packet.KindReadRequest:
		q.rcRead(p, psn)
	case packet.KindCompareSwap, packet.KindFetchAdd:
		q.rcAtomic(p, info, psn)
	case packet.KindAtomicWrite:
		q.rcAtomicWrite(p, psn)
	}
}

// seqOK is rxe's check_op_seq for RC: MIDDLE and LAST continue a message of
// their own kind, anything else needs no message in progress.
func (r *responder) seqOK(info *packet.OpcodeInfo) bool {
	cont := info.Pos == packet.PosMiddle || info.Pos == packet.PosLast
	switch r.inMsg {
	case msgSend:
		return info.Kind == packet.KindSend && cont
	case msgWrite:
		return info.Kind == packet.KindWrite && cont
	}
	return !cont
}

// accessOK is rxe's check_op_valid: the QP's access flags must allow the
// remote operation.
func (q *QP) accessOK(info *packet.OpcodeInfo) bool {
	var need Access
	switch info.Kind {
	case packet.KindWrite, packet.KindAtomicWrite:
		need = AccessRemoteWrite
	case packet.KindReadRequest:
		need = AccessRemoteRead
	case packet.KindCompareSwap, packet.KindFetchAdd:
		need = AccessRemoteAtomic
	default:
		return true
	}
	return q.attr.AccessFlags&need != 0
}

// takeWQE attaches a receive WQE to the message, from the RQ or the SRQ,
// and reports whether there was one. A WQE kept from an abandoned UC
// message is reused.
func (q *QP) takeWQE() bool {
	r := &q.resp
	if r.wqe != nil {
		return true
	}
	if srq := q.cfg.SRQ; srq != nil {
		if !srq.take(&r.srqWQE) {
			return false
		}
		r.wqe, r.fromSRQ = &r.srqWQE, true
	} else {
		w := q.rq.ring.peek()
		if w == nil && q.rq.refill != nil {
			q.RefillRecv()
			w = q.rq.ring.peek()
		}
		if w == nil {
			return false
		}
		r.wqe, r.fromSRQ = w, false
	}
	r.recvd, r.sgeIdx, r.sgeOff = 0, 0, 0
	return true
}

// lengthOK is rxe's check_length (IBA C9-92..94): FIRST and MIDDLE carry
// exactly one MTU, LAST 1..MTU, ONLY up to MTU, and a RETH asks for at most
// 2^31 bytes.
func (q *QP) lengthOK(p *packet.Packet, info *packet.OpcodeInfo) bool {
	mtu := uint32(q.attr.PathMTU)
	n := uint32(len(p.Payload))
	switch info.Pos {
	case packet.PosOnly:
		if n > mtu {
			return false
		}
	case packet.PosFirst, packet.PosMiddle:
		if n != mtu {
			return false
		}
	case packet.PosLast:
		if n == 0 || n > mtu {
			return false
		}
	}
	if info.Is(packet.HdrRETH) && (info.Kind == packet.KindWrite || info.Kind == packet.KindReadRequest) {
		if p.RETH.Length > 1<<31 {
			return false
		}
	}
	return true
}

// rcFatal handles rxe's class A and C errors: the receive WQE in use (if
// any) completes with status, a NAK with the request's PSN is queued, the
// QP raises ev and goes to ERR, flushing the other receive WQEs.
func (q *QP) rcFatal(psn uint32, syn packet.Syndrome, status WCStatus, ev EventType) {
	r := &q.resp
	if r.wqe != nil {
		q.completeRecvErr(status)
	}
	if q.attr.State != Err { // a CQ overflow has already stopped the QP
		r.pushAck(syn, psn)
		q.event(ev)
		q.toError()
	}
}

// rcSend places a SEND packet's payload and completes the message at its
// last packet.
func (q *QP) rcSend(p *packet.Packet, info *packet.OpcodeInfo, psn uint32) {
	r := &q.resp
	if err := q.scatter(p.Payload); err != nil {
		if err == errRecvOverflow {
			// The message is longer than the receive buffer: the WQE
			// completes with a local length error (IBTA, and what
			// hardware reports; rxe reports REM_INV_REQ_ERR) and the
			// requester gets NAK invalid request, as from rxe.
			q.rcFatal(psn, packet.SyndromeNAKInvReq, WCLocLenErr, EventQPReqErr)
		} else {
			// rxe's malformed WQE (bad lkey in the receive SGL): class A.
			q.rcFatal(psn, packet.SyndromeNAKRemOp, WCLocQPOpErr, EventQPFatal)
		}
		return
	}
	last := info.Pos == packet.PosLast || info.Pos == packet.PosOnly
	var inv bool
	if last && info.Is(packet.HdrIETH) {
		if err := q.cfg.Memory.Invalidate(p.IETH, true); err != nil {
			// Class J (rxe): the invalidation failed; rxe ACKs and moves
			// to ERR, softroce NAKs invalid request so the requester
			// learns of it too.
			q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
			return
		}
		inv = true
	}
	r.advance(psn)
	if !last {
		r.inMsg = msgSend
		q.ackIfAsked(p, psn)
		return
	}
	r.inMsg = msgNone
	r.msn = (r.msn + 1) & psnMask
	wc := WC{Opcode: WCRecv, ByteLen: uint32(r.recvd)}
	if info.Is(packet.HdrImmDt) {
		wc.Flags |= WCWithImm
		wc.Imm = p.Imm
	}
	if inv {
		wc.Flags |= WCWithInv
		wc.Imm = p.IETH
	}
	q.completeRecv(&wc, p.BTH.SE)
	q.ackIfAsked(p, psn)
}

// rcWrite places an RDMA WRITE packet's payload into the target region.
func (q *QP) rcWrite(p *packet.Packet, info *packet.OpcodeInfo, psn uint32) {
	r := &q.resp
	switch q.writeData(p, info) {
	case writeBadLength:
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	case writeBadKey:
		q.rcFatal(psn, packet.SyndromeNAKRemAccess, WCRemAccessErr, EventQPAccessErr)
		return
	}
	r.advance(psn)
	if info.Pos == packet.PosFirst || info.Pos == packet.PosMiddle {
		r.inMsg = msgWrite
		q.ackIfAsked(p, psn)
		return
	}
	r.inMsg = msgNone
	r.msn = (r.msn + 1) & psnMask
	if info.Is(packet.HdrImmDt) {
		wc := WC{Opcode: WCRecvRDMAImm, ByteLen: r.length, Flags: WCWithImm, Imm: p.Imm}
		q.completeRecv(&wc, p.BTH.SE)
	}
	q.ackIfAsked(p, psn)
}

// writeResult says how writeData went.
type writeResult uint8

const (
	writeOK writeResult = iota
	writeBadLength
	writeBadKey
)

// writeData is rxe's check_rkey and write_data_in for an RDMA WRITE packet:
// a FIRST or ONLY packet loads the RETH; every packet must carry exactly
// what remains (LAST/ONLY) or one MTU with no pad (FIRST/MIDDLE), and the
// key must cover everything that remains.
func (q *QP) writeData(p *packet.Packet, info *packet.OpcodeInfo) writeResult {
	r := &q.resp
	if info.Is(packet.HdrRETH) {
		r.va, r.rkey = p.RETH.VA, p.RETH.RKey
		r.resid, r.length = p.RETH.Length, p.RETH.Length
	}
	n := uint32(len(p.Payload))
	mtu := uint32(q.attr.PathMTU)
	if r.resid > mtu {
		if n != mtu || p.BTH.PadCnt != 0 {
			return writeBadLength
		}
	} else if n != r.resid || uint32(p.BTH.PadCnt) != -r.resid&3 {
		return writeBadLength
	}
	if r.resid == 0 {
		return writeOK
	}
	dst, err := q.cfg.Memory.Remote(r.rkey, r.va, r.resid, AccessRemoteWrite)
	if err != nil || uint32(len(dst)) < n {
		return writeBadKey
	}
	copy(dst, p.Payload)
	// dst runs to the end of the message: the next packet's place is
	// prefetched (package prefetch says why).
	prefetch.Read(dst[n:min(uint32(len(dst)), 2*n)])
	r.va += uint64(n)
	r.resid -= n
	return writeOK
}

// rcRead executes a new RDMA READ request: MSN advances now (C9-148), a
// responder resource records it for duplicates, and its responses are
// queued; they take ceil(len/MTU) PSNs (at least one).
func (q *QP) rcRead(p *packet.Packet, psn uint32) {
	r := &q.resp
	va, rkey, length := p.RETH.VA, p.RETH.RKey, p.RETH.Length
	if length > 0 {
		if _, err := q.cfg.Memory.Remote(rkey, va, length, AccessRemoteRead); err != nil {
			q.rcFatal(psn, packet.SyndromeNAKRemAccess, WCRemAccessErr, EventQPAccessErr)
			return
		}
	}
	mtu := uint32(q.attr.PathMTU)
	pkts := (length + mtu - 1) / mtu
	if pkts == 0 {
		pkts = 1
	}
	r.msn = (r.msn + 1) & psnMask
	res := r.nextRes()
	*res = respRes{kind: resRead, firstPSN: psn, lastPSN: psnAdd(psn, pkts-1),
		va: va, rkey: rkey, length: length, end: va + uint64(length)}
	r.pushRead(psn, psn, va, rkey, length, true)
	r.psn = psnAdd(psn, pkts)
	r.inMsg = msgNone
}

// rcAtomic executes CMP_SWAP or FETCH_ADD on the little-endian 64-bit word
// at the target, saves the original value for duplicates and queues the
// atomic ACK.
func (q *QP) rcAtomic(p *packet.Packet, info *packet.OpcodeInfo, psn uint32) {
	r := &q.resp
	a := &p.AtomicETH
	b, err := q.cfg.Memory.Remote(a.RKey, a.VA, 8, AccessRemoteAtomic)
	if err != nil || len(b) < 8 {
		q.rcFatal(psn, packet.SyndromeNAKRemAccess, WCRemAccessErr, EventQPAccessErr)
		return
	}
	if a.VA&7 != 0 {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	orig := binary.LittleEndian.Uint64(b)
	if info.Kind == packet.KindCompareSwap {
		if orig == a.Compare {
			binary.LittleEndian.PutUint64(b, a.SwapAdd)
		}
	} else {
		binary.LittleEndian.PutUint64(b, orig+a.SwapAdd)
	}
	res := r.nextRes()
	*res = respRes{kind: resAtomic, firstPSN: psn, lastPSN: psn, orig: orig}
	r.msn = (r.msn + 1) & psnMask
	r.advance(psn)
	r.inMsg = msgNone
	r.pushAtomicAck(psn, orig)
}

// rcAtomicWrite executes an IBTA 1.5 ATOMIC WRITE: 8 bytes stored at once at
// an aligned address, answered (as rxe does) by a zero-length READ RESPONSE
// ONLY.
func (q *QP) rcAtomicWrite(p *packet.Packet, psn uint32) {
	r := &q.resp
	if len(p.Payload) != 8 || p.RETH.Length != 8 {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	b, err := q.cfg.Memory.Remote(p.RETH.RKey, p.RETH.VA, 8, AccessRemoteWrite)
	if err != nil || len(b) < 8 {
		q.rcFatal(psn, packet.SyndromeNAKRemAccess, WCRemAccessErr, EventQPAccessErr)
		return
	}
	if p.RETH.VA&7 != 0 {
		q.rcFatal(psn, packet.SyndromeNAKInvReq, WCRemInvReqErr, EventQPReqErr)
		return
	}
	copy(b, p.Payload)
	res := r.nextRes()
	*res = respRes{kind: resAtomicWrite, firstPSN: psn, lastPSN: psn}
	r.msn = (r.msn + 1) & psnMask
	r.advance(psn)
	r.inMsg = msgNone
	r.pushRead(psn, psn, 0, 0, 0, true)
}

// advance records that the request with this PSN executed.
func (r *responder) advance(psn uint32) {
	r.psn = psnAdd(psn, 1)
	r.ackPSN = r.psn
}

// ackIfAsked queues an ACK when the request asked for one: rxe ACKs only
// packets with AckReq set.
func (q *QP) ackIfAsked(p *packet.Packet, psn uint32) {
	if p.BTH.AckReq && q.attr.State != Err {
		q.resp.pushAck(packet.SyndromeACKUnlimited, psn)
	}
}

// scatter copies data into the receive WQE's buffers after what the message
// has placed so far. The whole piece must fit, or nothing is copied.
func (q *QP) scatter(data []byte) error {
	r := &q.resp
	w := r.wqe
	if uint64(len(data)) > w.length-r.recvd {
		return errRecvOverflow
	}
	for len(data) > 0 {
		sge := &w.sgl[r.sgeIdx]
		room := sge.Length - r.sgeOff
		if room == 0 {
			r.sgeIdx++
			r.sgeOff = 0
			continue
		}
		n := uint32(len(data))
		if n > room {
			n = room
		}
		dst, err := q.cfg.Memory.Local(sge.LKey, sge.Addr+uint64(r.sgeOff), n, AccessLocalWrite)
		if err != nil {
			return err
		}
		if uint32(len(dst)) < n {
			return ErrBounds
		}
		copy(dst, data[:n])
		data = data[n:]
		r.sgeOff += n
		r.recvd += uint64(n)
	}
	return nil
}

// completeRecv retires the message's receive WQE with a successful
// completion (wc carries opcode, length, flags and immediate).
func (q *QP) completeRecv(wc *WC, solicited bool) {
	r := &q.resp
	wc.ID = r.wqe.id
	wc.Status = WCSuccess
	q.releaseWQE()
	q.counters.RdmaRecvs++
	q.complete(q.cfg.RecvCQ, wc, solicited)
}

// completeRecvErr retires the message's receive WQE in error.
func (q *QP) completeRecvErr(status WCStatus) {
	wc := WC{ID: q.resp.wqe.id, Status: status, Opcode: WCRecv}
	q.releaseWQE()
	q.complete(q.cfg.RecvCQ, &wc, true)
}

// releaseWQE consumes the message's receive WQE.
func (q *QP) releaseWQE() {
	r := &q.resp
	if !r.fromSRQ {
		q.rq.ring.pop()
		q.noteRetired()
	}
	r.abandon()
}
