package qp

import "github.com/softroce/softroce/packet"

// Responder resources remember the READ and atomic requests a responder has
// executed, so that a duplicate (the requester retrying after a lost
// response) is answered from the record instead of being executed again.
// As in rxe they form a ring of max_dest_rd_atomic entries, rounded up to a
// power of two, recycled oldest first: "it is the requester's job to not
// send too many read/atomic ops" (rxe_resp.c check_resource).

// resKind is what a responder resource records.
type resKind uint8

const (
	resNone resKind = iota
	resRead
	resAtomic
	resAtomicWrite
)

// respRes is one responder resource.
type respRes struct {
	kind              resKind
	firstPSN, lastPSN uint32
	// READ: the request's target. va is where a replay may start (rxe's
	// va_org, narrowed by each replay).
	va     uint64
	rkey   uint32
	length uint32
	// end is where the original READ ends: a duplicate that ends before it
	// asks for a hole only (read_repair.go), not a go-back-N.
	end uint64
	// Atomic: the value at the target before the operation.
	orig uint64
}

// roundPow2 rounds n up to a power of two (0 stays 0), as rxe's
// roundup_pow_of_two for max_rd_atomic and max_dest_rd_atomic.
func roundPow2(n int) int {
	if n <= 0 {
		return 0
	}
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}

// allocResources sizes the resource ring for max_dest_rd_atomic n and the
// response queue to match: every resource may have a READ response queued,
// plus room for ACKs and NAKs. Called at creation and by Modify. The rings
// are made when the QP receives its first request (sizeResources), not
// before: a QP that only ever sends (half of every connection, in most
// programs) never needs them, and a simulation of thousands of QPs would
// otherwise spend much of its setup making them.
func (r *responder) allocResources(n uint8) {
	r.resN = n
	if r.out != nil {
		r.sizeResources() // rxe frees and reallocates them on a modify
	}
}

// sizeResources makes the rings for r.resN, once per QP and per Modify of
// max_dest_rd_atomic, never per packet. They start small and grow as they
// fill (nextRes, push), to the sizes rxe allocates at once: most QPs never
// have more than a few READs or responses outstanding, and a simulation of
// thousands of QPs spent a fifth of its allocation on rings it never used.
// Growth changes nothing a peer can see: the resource ring grows before it
// ever wraps, so resource n sits at index n as in the full ring, and the
// response queue is kept in order.
func (r *responder) sizeResources() {
	k := roundPow2(int(r.resN))
	if k != r.resCap || r.res == nil {
		r.resCap = k
		r.res = make([]respRes, min(k, ringStart))
		r.resHead = 0
	}
	if outCap := 2*k + 8; outCap != r.outCap {
		r.outCap = outCap
		r.out = make([]respOut, min(outCap, ringStart))
		r.outHead, r.outN = 0, 0
	}
}

// ringStart is the size the responder's rings start at.
const ringStart = 4

// nextRes returns the resource to record a new READ or atomic in: a fresh
// one until the ring is full, then the oldest.
func (r *responder) nextRes() *respRes {
	if r.resHead == len(r.res) {
		if len(r.res) < r.resCap {
			r.res = append(r.res, make([]respRes, min(len(r.res), r.resCap-len(r.res)))...)
		} else {
			r.resHead = 0
		}
	}
	res := &r.res[r.resHead]
	r.resHead++
	return res
}

// findRes returns the resource whose PSN range covers psn, or nil.
func (r *responder) findRes(psn uint32) *respRes {
	for i := range r.res {
		res := &r.res[i]
		if res.kind == resNone {
			continue
		}
		if psnDiff(psn, res.firstPSN) >= 0 && psnDiff(psn, res.lastPSN) <= 0 {
			return res
		}
	}
	return nil
}

// rcDuplicate answers a request whose PSN is behind the expected one (rxe's
// duplicate_request): a SEND or WRITE is ACKed again (C9-105) and dropped; a
// READ replays its responses from the PSN asked for, if a resource covers
// it and the request is the original or a subset of it; an atomic replays
// its saved original value and is never executed twice. Anything else is
// dropped (class D).
func (q *QP) rcDuplicate(p *packet.Packet, info *packet.OpcodeInfo, psn uint32) {
	r := &q.resp
	switch info.Kind {
	case packet.KindSend, packet.KindWrite:
		r.pushAck(packet.SyndromeACKUnlimited, psnAdd(r.ackPSN, psnMask))
	case packet.KindReadRequest:
		res := r.findRes(psn)
		if res == nil || res.kind != resRead {
			return
		}
		va, length := p.RETH.VA, p.RETH.Length
		end := uint64(res.va) + uint64(res.length)
		if va < res.va || length > res.length || va+uint64(length) > end || va+uint64(length) < va {
			return
		}
		if p.RETH.RKey != res.rkey {
			return
		}
		res.va = va
		if va+uint64(length) < res.end {
			// A repair: the requester kept what came after the hole, so
			// nothing queued is superseded, and the hole goes first.
			r.pushReadFront(psn, va, res.rkey, length, psn == res.firstPSN)
			return
		}
		if r.goneBack(res, psn) {
			q.supersede(psn)
		}
		r.pushRead(psn, psn, va, res.rkey, length, psn == res.firstPSN)
	case packet.KindCompareSwap, packet.KindFetchAdd:
		res := r.findRes(psn)
		if res == nil || res.kind != resAtomic {
			return
		}
		r.pushAtomicAck(psn, res.orig)
	case packet.KindAtomicWrite:
		res := r.findRes(psn)
		if res == nil || res.kind != resAtomicWrite {
			return
		}
		r.pushRead(psn, psn, 0, 0, 0, true)
	}
}
