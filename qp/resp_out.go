package qp

import (
	"github.com/softroce/softroce/internal/prefetch"
	"github.com/softroce/softroce/packet"
)

// The responder's output queue. rxe sends ACKs, NAKs and READ responses
// from inside its responder loop, finishing a READ's responses before it
// looks at the next request; the engine instead queues them in the order the
// requests were processed, which is PSN order, and Transmit hands them out.
// READ responses are built one packet per Transmit, their payload read from
// registered memory at that moment, so a large READ needs no buffer.

// outKind is what a queued response is.
type outKind uint8

const (
	outAck       outKind = iota // ACK, NAK or RNR NAK (RC ACKNOWLEDGE)
	outAtomicAck                // ATOMIC ACKNOWLEDGE
	outRead                     // READ response packets (FIRST/MIDDLE/LAST or ONLY)
)

// respOut is one queued response.
type respOut struct {
	kind outKind
	syn  packet.Syndrome
	psn  uint32 // PSN of the next packet to send
	msn  uint32 // MSN to report, as it was when the response was queued
	orig uint64 // atomic: original value
	// READ: the next packet's source, what remains, whether the next
	// packet opens the response (FIRST or ONLY), and the request's PSN
	// (which a NAK for it carries).
	va     uint64
	rkey   uint32
	resid  uint32
	first  bool
	reqPSN uint32
}

// push appends an entry. Callers check for room first (rcReceive drops a
// request when the queue is full), so the guard only protects the ring.
func (r *responder) push() *respOut {
	if !r.outRoom() {
		return nil
	}
	o := &r.out[(r.outHead+r.outN)%len(r.out)]
	r.outN++
	return o
}

// outRoom reports whether the queue has room for one more response,
// growing the ring towards outCap when it is full before that.
func (r *responder) outRoom() bool {
	if r.outN < len(r.out) {
		return true
	}
	if r.outN == r.outCap {
		return false
	}
	grown := make([]respOut, min(2*len(r.out), r.outCap))
	for i := range r.outN {
		grown[i] = r.out[(r.outHead+i)%len(r.out)]
	}
	r.out, r.outHead = grown, 0
	return true
}

// pushAck queues an ACK or NAK. Plain ACKs coalesce: when the last queued
// entry is a plain ACK too, it is updated to acknowledge the later PSN with
// the current MSN, as one cumulative ACK covers both.
func (r *responder) pushAck(syn packet.Syndrome, psn uint32) {
	if syn == packet.SyndromeACKUnlimited && r.outN > 0 {
		t := &r.out[(r.outHead+r.outN-1)%len(r.out)]
		if t.kind == outAck && t.syn == packet.SyndromeACKUnlimited {
			if psnDiff(psn, t.psn) > 0 {
				t.psn = psn
			}
			t.msn = r.msn
			return
		}
	}
	if o := r.push(); o != nil {
		*o = respOut{kind: outAck, syn: syn, psn: psn, msn: r.msn}
	}
}

// pushAtomicAck queues an ATOMIC ACKNOWLEDGE carrying the original value.
func (r *responder) pushAtomicAck(psn uint32, orig uint64) {
	if o := r.push(); o != nil {
		*o = respOut{kind: outAtomicAck, syn: packet.SyndromeACKUnlimited, psn: psn, msn: r.msn, orig: orig}
	}
}

// pushRead queues the responses to a READ of length bytes at va, starting at
// PSN psn. first says whether they start with FIRST/ONLY (a new request or a
// replay from its first PSN) or, for a replay from the middle, as rxe does,
// with MIDDLE/LAST.
func (r *responder) pushRead(psn, reqPSN uint32, va uint64, rkey, length uint32, first bool) {
	if o := r.push(); o != nil {
		*o = r.readOut(psn, reqPSN, va, rkey, length, first)
	}
}

// readOut is the queue entry for the responses to a READ (pushRead).
func (r *responder) readOut(psn, reqPSN uint32, va uint64, rkey, length uint32, first bool) respOut {
	return respOut{kind: outRead, syn: packet.SyndromeACKUnlimited, psn: psn, msn: r.msn,
		va: va, rkey: rkey, resid: length, first: first, reqPSN: reqPSN}
}

// pushReadFront queues the responses to a repair READ (read_repair.go)
// ahead of everything queued: the requester waits for the hole before it
// can use what it kept, and a response queue that is partly sent may be
// interrupted between packets, as each entry says where it stands.
func (r *responder) pushReadFront(psn uint32, va uint64, rkey, length uint32, first bool) {
	if !r.outRoom() {
		return
	}
	r.outHead = (r.outHead + len(r.out) - 1) % len(r.out)
	r.outN++
	r.out[r.outHead] = r.readOut(psn, psn, va, rkey, length, first)
}

// goneBack reports whether a duplicate READ at psn, covered by res, is the
// requester's go-back-N rather than a copy the network made: what is queued
// now lies past that READ (the requester saw a later response first), or
// the request resumes inside the READ (only a requester's retry asks from
// the middle) at a PSN already sent. With nothing queued there is nothing
// to tell, nor to supersede.
func (r *responder) goneBack(res *respRes, psn uint32) bool {
	if r.outN == 0 {
		return false
	}
	head := r.out[r.outHead].psn
	return psnDiff(head, res.lastPSN) > 0 || (psn != res.firstPSN && psnDiff(head, psn) > 0)
}

// supersede drops every queued response at psn or later, for a duplicate
// READ at psn that is a go-back-N: the requester came back for it after a
// response past that READ reached it (what is queued now lies past the
// READ), so it discards every response after psn until psn's own arrives,
// and it asks again for every request after it. Sending them first, in
// queue order, would only put the replay behind them: with many READs
// outstanding a responder that cannot keep up spent most of its time on
// responses thrown away (rxe does too). A duplicate that is no go-back-N (a
// network copy arriving late) costs the requester a retransmit timeout.
func (q *QP) supersede(psn uint32) {
	r := &q.resp
	kept := 0
	for i := range r.outN {
		o := r.out[(r.outHead+i)%len(r.out)]
		if psnDiff(o.psn, psn) >= 0 {
			q.counters.RespSuperseded += uint64(o.packets(uint32(q.attr.PathMTU)))
			continue
		}
		r.out[(r.outHead+kept)%len(r.out)] = o
		kept++
	}
	r.outN = kept
}

// packets is how many packets o still stands for: a READ response's
// remaining ones (at least one: a zero-length READ answers with ONLY), one
// for an ACK or atomic ACK.
func (o *respOut) packets(mtu uint32) uint32 {
	if o.kind != outRead || o.resid <= mtu {
		return 1
	}
	return (o.resid + mtu - 1) / mtu
}

func (r *responder) pop() {
	r.outHead = (r.outHead + 1) % len(r.out)
	r.outN--
}

// clearOut drops every queued response.
func (r *responder) clearOut() { r.outHead, r.outN = 0, 0 }

// keepAcks drops the queue from its first READ response on, keeping the
// acknowledgements ahead of it.
func (r *responder) keepAcks() {
	for i := 0; i < r.outN; i++ {
		if r.out[(r.outHead+i)%len(r.out)].kind == outRead {
			r.outN = i
			return
		}
	}
}

// respPending reports whether the responder has something to send.
func (q *QP) respPending() bool { return q.resp.outN > 0 && q.attr.State != Reset }

// respTransmit builds the next queued response packet into out.
func (q *QP) respTransmit(_ Time, out *Outgoing) bool {
	r := &q.resp
	if r.outN == 0 || q.attr.State == Reset {
		return false
	}
	o := &r.out[r.outHead]
	out.AV = &q.attr.AV
	out.SrcPort = q.cfg.SrcPort
	p := &out.Pkt
	*p = packet.Packet{}
	p.BTH.PKey = 0xFFFF
	p.BTH.DestQP = q.attr.DestQPN & psnMask
	p.BTH.PSN = o.psn
	p.AETH = packet.AETHFields{Syndrome: o.syn, MSN: o.msn}
	switch o.kind {
	case outAck:
		p.BTH.Opcode = packet.RCAcknowledge
		if o.syn.Type() != packet.AckTypeACK {
			q.counters.NAKsSent++
		}
		r.pop()
	case outAtomicAck:
		p.BTH.Opcode = packet.RCAtomicAcknowledge
		p.AtomicAck = o.orig
		r.pop()
	case outRead:
		q.readResponse(o, p)
	}
	return true
}

// readResponse builds the next packet of a READ response. If the memory can
// no longer be read (the region was deregistered or invalidated since the
// request), the response becomes a NAK remote access error for the request,
// and the QP goes to ERR (rxe's RKEY_VIOLATION in read_reply).
func (q *QP) readResponse(o *respOut, p *packet.Packet) {
	r := &q.resp
	mtu := uint32(q.attr.PathMTU)
	n := o.resid
	if n > mtu {
		n = mtu
	}
	switch {
	case o.first && o.resid <= mtu:
		p.BTH.Opcode = packet.RCReadResponseOnly
	case o.first:
		p.BTH.Opcode = packet.RCReadResponseFirst
	case o.resid > mtu:
		p.BTH.Opcode = packet.RCReadResponseMid
	default:
		p.BTH.Opcode = packet.RCReadResponseLast
	}
	if n > 0 {
		// The next response's bytes too, to prefetch them (package
		// prefetch says why): the READ's whole range passed the access
		// check when it arrived, but the region may have gone since.
		ahead := min(o.resid-n, n)
		b, err := q.cfg.Memory.Remote(o.rkey, o.va, n+ahead, AccessRemoteRead)
		if err != nil && ahead > 0 {
			ahead = 0
			b, err = q.cfg.Memory.Remote(o.rkey, o.va, n, AccessRemoteRead)
		}
		if err == nil && uint32(len(b)) >= n+ahead {
			prefetch.Read(b[n : n+ahead])
		}
		if err != nil || uint32(len(b)) < n {
			p.BTH.Opcode = packet.RCAcknowledge
			p.BTH.PSN = o.reqPSN
			p.AETH = packet.AETHFields{Syndrome: packet.SyndromeNAKRemAccess, MSN: r.msn}
			q.counters.NAKsSent++
			r.clearOut()
			q.event(EventQPAccessErr)
			q.toError()
			return
		}
		p.Payload = b[:n]
	}
	o.first = false
	o.va += uint64(n)
	o.resid -= n
	o.psn = psnAdd(o.psn, 1)
	if o.resid == 0 {
		r.pop()
	}
}
