package qp_test

// Seeded randomized workloads through the scripted wire with loss,
// duplication, reordering and corruption. Each seed builds a workload (RC
// mostly, some UC; SEND, SEND_IMM, WRITE, WRITE_IMM, READ, CMP_SWAP,
// FETCH_ADD; sizes 0..20000 with MTU edge cases; scatter/gather lists,
// inline data, unsignaled WRs, receives posted late (RNR), an SRQ, traffic
// in both directions at once), runs it and checks it against a reference
// model of both memories and of the completions.
//
// Reproduce one seed with
//
//	SOFTROCE_QP_SEED=<seed> go test ./qp/ -run 'TestRandomWorkloads$' -v

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/softroce/softroce/qp"
)

// regressionSeeds are seeds beyond the first randomWorkloads that once
// found engine bugs (in runs of 80,000 seeds); they always run. They replay
// the same workload only while genWorkload and the fault model draw the
// same random numbers: change either and pick new ones.
var regressionSeeds = []uint64{2556, 14747, 23239, 49534}

const (
	randomWorkloads = 1000
	// local: the requester's own buffers below reqArea, receive buffers
	// from recvBase.
	reqArea  = 0x1E000
	recvBase = 0x20000
	recvArea = 0x1F000
	// remote: WRITE targets from 0, atomic slots at slotBase, READ
	// sources (never written) from readBase.
	slotBase = 0x1F000
	nSlots   = 4
	readBase = 0x20000
)

// piece is a part of a buffer: an offset into an endpoint's local memory.
type piece struct {
	off uint64
	n   uint32
}

type rop struct {
	op        qp.WROpcode
	size      uint32
	local     []piece // SGL: source (SEND/WRITE), destination (READ, atomic result)
	roff      uint64  // peer's remote: target (WRITE, atomic) or source (READ)
	cmp, swap uint64
	imm       uint32
	inline    bool
	signaled  bool
	recv      int     // index of the receive it consumes at the peer, or -1
	recvBuf   []piece // the receive's SGL at the peer
	late      bool    // the receive is posted late (RNR)
	wantOrig  uint64
}

type workload struct {
	seed     uint64
	typ      qp.Type
	link     link
	ops      [2][]rop // requests of A (to B) and of B (to A)
	srq      bool     // the responders take receives from an SRQ
	lateAt   qp.Time  // when late receives are posted
	pLoss    float64
	pDup     float64
	pReorder float64
	pCorrupt float64
}

// sizeFor picks a message size with the MTU edges well represented.
func sizeFor(r *rand.Rand, mtu uint32) uint32 {
	switch r.IntN(8) {
	case 0:
		return 0
	case 1:
		return uint32(r.IntN(3)) + 1
	case 2:
		return mtu - 1 + uint32(r.IntN(3)) // MTU-1, MTU, MTU+1
	case 3:
		k := uint32(r.IntN(4)) + 2
		return k*mtu - 1 + uint32(r.IntN(3))
	case 4:
		return uint32(r.IntN(20001))
	default:
		return uint32(r.IntN(3000))
	}
}

// carve allocates n bytes in up to three pieces with small gaps, from the
// cursor *cur, and reports false when limit would be passed.
func carve(r *rand.Rand, cur *uint64, n uint32, limit uint64, single bool) ([]piece, bool) {
	k := 1
	if !single && n >= 3 {
		k = 1 + r.IntN(3)
	}
	var ps []piece
	left := n
	for i := 0; i < k; i++ {
		m := left
		if i < k-1 {
			m = uint32(r.IntN(int(left))) + 1
			if left-m < uint32(k-1-i) {
				m = 1
			}
		}
		if m == 0 && i > 0 {
			break
		}
		if *cur+uint64(m)+16 > limit {
			return nil, false
		}
		ps = append(ps, piece{*cur, m})
		*cur = (*cur + uint64(m) + uint64(r.IntN(16)) + 8) &^ 7
		left -= m
	}
	return ps, true
}

func genOps(r *rand.Rand, w *workload, maxOps int) []rop {
	mtu := uint32(w.link.MTU)
	n := 1 + r.IntN(maxOps)
	var ops []rop
	var lcur, rcur uint64
	bcur := uint64(recvBase)
	nrecv := 0
	for len(ops) < n {
		o := rop{recv: -1, signaled: r.IntN(10) != 0}
		k := r.IntN(10)
		if w.typ == qp.UC {
			k = r.IntN(5)
		}
		switch k {
		case 0, 1:
			o.op = qp.WRSend
		case 2:
			o.op = qp.WRSendImm
		case 3:
			o.op = qp.WRWrite
		case 4:
			o.op = qp.WRWriteImm
		case 5, 6:
			o.op = qp.WRRead
		case 7, 8:
			o.op = qp.WRFetchAdd
		default:
			o.op = qp.WRCmpSwap
		}
		atomic := o.op == qp.WRFetchAdd || o.op == qp.WRCmpSwap
		if atomic {
			o.size = 8
			o.roff = slotBase + 8*uint64(r.IntN(nSlots))
			o.cmp, o.swap = uint64(r.IntN(4)), r.Uint64()
			if o.op == qp.WRFetchAdd {
				o.cmp = r.Uint64() >> uint(r.IntN(64))
			}
		} else {
			o.size = sizeFor(r, mtu)
		}
		local, ok := carve(r, &lcur, o.size, reqArea, atomic)
		if !ok || rcur+uint64(o.size) > slotBase {
			break
		}
		o.local = local
		if (o.op == qp.WRSend || o.op == qp.WRSendImm || o.op == qp.WRWrite || o.op == qp.WRWriteImm) &&
			o.size <= 256 && r.IntN(5) == 0 {
			o.inline = true
		}
		switch o.op {
		case qp.WRWrite, qp.WRWriteImm:
			o.roff = rcur
			rcur = (rcur + uint64(o.size) + 7) &^ 7
		case qp.WRRead:
			o.roff = readBase + uint64(r.IntN(0x1F000-int(o.size)+1))
		}
		if o.op == qp.WRSend || o.op == qp.WRSendImm || o.op == qp.WRWriteImm {
			recvLen := o.size + uint32(r.IntN(64))
			buf, ok := carve(r, &bcur, recvLen, recvBase+recvArea, false)
			if !ok {
				break
			}
			o.recv = nrecv
			o.recvBuf = buf
			nrecv++
		}
		if o.op == qp.WRSendImm || o.op == qp.WRWriteImm {
			o.imm = r.Uint32()
		}
		ops = append(ops, o)
	}
	if len(ops) > 0 {
		ops[len(ops)-1].signaled = true
	}
	if w.typ == qp.UC {
		// A UC message lost to a gap leaves its receive WQE to the next
		// message, so every UC receive buffer must hold the largest one.
		var m uint32
		for _, o := range ops {
			m = max(m, o.size)
		}
		bcur = recvBase
		for i := range ops {
			if ops[i].recv < 0 {
				continue
			}
			if bcur+uint64(m) > recvBase+recvArea {
				return ops[:i]
			}
			ops[i].recvBuf = []piece{{bcur, m}}
			bcur = (bcur + uint64(m) + 8) &^ 7
		}
	}
	return ops
}

func genWorkload(seed uint64) *workload {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &workload{seed: seed, typ: qp.RC}
	if r.IntN(5) == 0 {
		w.typ = qp.UC
	}
	l := defaultLink()
	l.MTU = []qp.MTU{256, 512, 1024, 1024, 2048, 4096}[r.IntN(6)]
	l.Timeout = uint8(6 + r.IntN(9))
	l.MaxRdAtomic = []uint8{1, 2, 4, 16}[r.IntN(4)]
	l.MinRNRTimer = uint8(1 + r.IntN(5))
	l.APSN = r.Uint32() & 0xFFFFFF
	if r.IntN(4) == 0 {
		l.APSN = 0xFFFFFF - uint32(r.IntN(40))
	}
	l.BPSN = r.Uint32() & 0xFFFFFF
	w.link = l
	maxP := 0.3
	w.pLoss = r.Float64() * maxP
	w.pDup = r.Float64() * maxP
	w.pReorder = r.Float64() * maxP
	if r.IntN(3) == 0 {
		w.pCorrupt = r.Float64() * 0.05
	}
	if w.typ == qp.UC && r.IntN(2) == 0 {
		// UC has no duplicate detection and starts a new message at any
		// FIRST/ONLY, so only a wire that loses but neither duplicates
		// nor reorders promises in-order delivery.
		w.pDup, w.pReorder = 0, 0
	}
	w.ops[0] = genOps(r, w, 12)
	if r.IntN(2) == 0 {
		w.ops[1] = genOps(r, w, 6)
	}
	if w.typ == qp.RC {
		w.srq = r.IntN(4) == 0
		if r.IntN(4) == 0 {
			// Some receives come late: RNR NAKs, then retries.
			// Receives keep their posting order: from a random one on,
			// all are posted at lateAt.
			w.lateAt = qp.Time(r.IntN(3_000_000))
			for d := range w.ops {
				cut := r.IntN(len(w.ops[d]) + 1)
				for i := range w.ops[d] {
					w.ops[d][i].late = i >= cut && w.ops[d][i].recv >= 0
				}
			}
		}
	}
	return w
}

func (w *workload) String() string {
	s := fmt.Sprintf("%v mtu=%d timeout=%d max_rd_atomic=%d psn=%#x/%#x srq=%v late=%d loss=%.2f dup=%.2f reorder=%.2f corrupt=%.3f",
		w.typ, w.link.MTU, w.link.Timeout, w.link.MaxRdAtomic, w.link.APSN, w.link.BPSN, w.srq, w.lateAt,
		w.pLoss, w.pDup, w.pReorder, w.pCorrupt)
	for d, ops := range w.ops {
		s += fmt.Sprintf(" %s:", "AB"[d:d+1])
		for i, o := range ops {
			s += fmt.Sprintf(" %d:%v/%d", i, o.op, o.size)
			if o.inline {
				s += "/inline"
			}
			if !o.signaled {
				s += "/unsignaled"
			}
			if len(o.local) > 1 {
				s += fmt.Sprintf("/sge%d", len(o.local))
			}
			if o.late {
				s += "/late"
			}
		}
	}
	return s
}

var wcOpcodeOf = map[qp.WROpcode]qp.WCOpcode{
	qp.WRSend: qp.WCSend, qp.WRSendImm: qp.WCSend, qp.WRWrite: qp.WCRDMAWrite, qp.WRWriteImm: qp.WCRDMAWrite,
	qp.WRRead: qp.WCRDMARead, qp.WRFetchAdd: qp.WCFetchAdd, qp.WRCmpSwap: qp.WCCompSwap,
}

func gather(mem []byte, ps []piece) []byte {
	var b []byte
	for _, p := range ps {
		b = append(b, mem[p.off:p.off+uint64(p.n)]...)
	}
	return b
}

func scatter(mem []byte, ps []piece, data []byte) {
	for _, p := range ps {
		n := copy(mem[p.off:p.off+uint64(p.n)], data)
		data = data[n:]
	}
}

func sgl(ps []piece) []qp.SGE {
	var s []qp.SGE
	for _, p := range ps {
		if p.n > 0 {
			s = append(s, qp.SGE{Addr: localVA + p.off, Length: p.n, LKey: localKey})
		}
	}
	return s
}

// model is the expected state of one endpoint after a workload.
type model struct {
	local, remote []byte
}

// runWorkload runs one workload and returns what went wrong, if anything.
func runWorkload(t *testing.T, w *workload) (h *Harness, err error) {
	var srqs [2]*qp.SRQ
	cfg := [2]epConfig{{Type: w.typ}, {Type: w.typ}}
	if w.srq {
		for i := range srqs {
			srqs[i] = qp.NewSRQ(256, 4, nil)
			cfg[i].SRQ = srqs[i]
		}
	}
	h = newHarness(t, cfg[0], cfg[1])
	h.connect(w.link)
	h.MaxSteps = 400_000
	fr := rand.New(rand.NewPCG(w.seed, 0xfa11))
	// Liveness: the fourth and later copies of a packet (same direction,
	// PSN and opcode) always get through, so that random loss alone never
	// exhausts retry_cnt (tested deterministically in TestRetryExhaustion)
	// and a RETRY_EXC_ERR here is an engine failure.
	type key struct {
		from int
		psn  uint32
		op   uint8
	}
	copies := map[key]int{}
	h.Fault = func(f *Frame) (Action, int) {
		k := key{f.From, f.PSN(), uint8(f.Op())}
		copies[k]++
		if copies[k] > 3 {
			return Deliver, 0
		}
		x := fr.Float64()
		switch {
		case x < w.pLoss:
			return Drop, 0
		case x < w.pLoss+w.pDup:
			return Duplicate, 0
		case x < w.pLoss+w.pDup+w.pReorder:
			return Hold, 1 + fr.IntN(4)
		case x < w.pLoss+w.pDup+w.pReorder+w.pCorrupt:
			return Corrupt, fr.IntN(f.Pkt.Len())
		}
		return Deliver, 0
	}
	le := binary.LittleEndian
	var want [2]model
	for i, ep := range h.eps {
		fill(ep.local, int(w.seed)*4+i)
		fill(ep.remote, int(w.seed)*4+2+i)
		for k := uint64(0); k < nSlots; k++ {
			le.PutUint64(ep.remote[slotBase+8*k:], k%3) // small, so CMP_SWAP sometimes matches
		}
		want[i] = model{append([]byte(nil), ep.local...), append([]byte(nil), ep.remote...)}
	}
	initRemote := [2][]byte{append([]byte(nil), h.A.remote...), append([]byte(nil), h.B.remote...)}
	nrecv := [2]int{}
	for d := 0; d < 2; d++ {
		req, resp := h.eps[d], h.eps[1-d]
		wq, wr := &want[d], &want[1-d]
		slots := map[uint64]uint64{}
		for k := uint64(0); k < nSlots; k++ {
			slots[slotBase+8*k] = le.Uint64(resp.remote[slotBase+8*k:])
		}
		for i := range w.ops[d] {
			o := &w.ops[d][i]
			src := gather(req.local, o.local)
			switch o.op {
			case qp.WRWrite, qp.WRWriteImm:
				copy(wr.remote[o.roff:], src)
			case qp.WRSend, qp.WRSendImm:
				scatter(wr.local, o.recvBuf, src)
			case qp.WRRead:
				scatter(wq.local, o.local, resp.remote[o.roff:o.roff+uint64(o.size)])
			case qp.WRFetchAdd:
				o.wantOrig = slots[o.roff]
				slots[o.roff] += o.cmp
			case qp.WRCmpSwap:
				o.wantOrig = slots[o.roff]
				if slots[o.roff] == o.cmp {
					slots[o.roff] = o.swap
				}
			}
			if o.op == qp.WRFetchAdd || o.op == qp.WRCmpSwap {
				le.PutUint64(wq.local[o.local[0].off:], o.wantOrig)
			}
			if o.recv < 0 {
				continue
			}
			nrecv[1-d]++
			rwr := qp.RecvWR{ID: 1000 + uint64(o.recv), SGL: sgl(o.recvBuf)}
			post := func() {
				var err error
				if srqs[1-d] != nil {
					err = srqs[1-d].Post(&rwr)
				} else {
					err = resp.qp.PostRecv(&rwr)
				}
				if err != nil {
					h.errorf("post recv %d at %s: %v", rwr.ID, resp.name, err)
				}
			}
			if o.late {
				h.At(w.lateAt, post)
			} else {
				post()
			}
		}
		for off, v := range slots {
			le.PutUint64(wr.remote[off:], v)
		}
	}
	for d := 0; d < 2; d++ {
		for i, o := range w.ops[d] {
			wr := qp.SendWR{ID: uint64(i + 1), Opcode: o.op, Imm: o.imm, SGL: sgl(o.local),
				RemoteAddr: remoteVA + o.roff, RKey: remoteKey, CompareAdd: o.cmp, Swap: o.swap}
			if o.signaled {
				wr.Flags |= qp.SendSignaled
			}
			if o.inline {
				wr.Flags |= qp.SendInline
				wr.Inline = gather(h.eps[d].local, o.local)
				wr.SGL = nil
			}
			if err := h.eps[d].qp.PostSend(&wr); err != nil {
				return h, fmt.Errorf("%s post send %d: %w", h.eps[d].name, i+1, err)
			}
		}
	}
	nsig := [2]int{}
	for d := range w.ops {
		for _, o := range w.ops[d] {
			if o.signaled {
				nsig[d]++
			}
		}
	}
	if w.typ == qp.RC {
		err = h.Run(func() bool {
			return len(h.A.sendWCs) == nsig[0] && len(h.B.sendWCs) == nsig[1] &&
				len(h.A.recvWCs) == nrecv[0] && len(h.B.recvWCs) == nrecv[1]
		})
		if err == nil {
			err = h.Run(nil)
		}
	} else {
		err = h.Run(nil)
	}
	if err != nil {
		return h, err
	}
	if len(h.Errors) > 0 {
		return h, fmt.Errorf("harness: %v", h.Errors)
	}
	for d := 0; d < 2; d++ {
		req, resp := h.eps[d], h.eps[1-d]
		if err := checkSendWCs(req, w.ops[d]); err != nil {
			return h, err
		}
		// The requester area: sources untouched, READ and atomic results.
		if !bytes.Equal(req.local[:reqArea], want[d].local[:reqArea]) {
			return h, fmt.Errorf("%s requester memory (READ/atomic results) differs at %d", req.name,
				firstDiff(req.local[:reqArea], want[d].local[:reqArea]))
		}
		if w.typ == qp.RC {
			err = checkRC(resp, w.ops[d], want[1-d])
		} else {
			err = checkUC(resp, w.ops[d], want[1-d].remote, initRemote[1-d], h.eps[d].local,
				w.pDup == 0 && w.pReorder == 0)
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}

// TestRandomWorkloads runs randomWorkloads seeded workloads (100 with
// -short) and the regression seeds, or only SOFTROCE_QP_SEED.
func TestRandomWorkloads(t *testing.T) {
	seeds := make([]uint64, 0, randomWorkloads)
	if s := os.Getenv("SOFTROCE_QP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("SOFTROCE_QP_SEED=%q: %v", s, err)
		}
		seeds = append(seeds, v)
	} else {
		n := randomWorkloads
		if testing.Short() {
			n = 100
		}
		for i := 0; i < n; i++ {
			seeds = append(seeds, uint64(i))
		}
		seeds = append(seeds, regressionSeeds...)
	}
	single := len(seeds) == 1
	failures := 0
	var frames, dropped, rnr, naks, uc, bidi, srq, late int
	for _, seed := range seeds {
		w := genWorkload(seed)
		h, err := runWorkload(t, w)
		frames += len(h.Frames)
		dropped += len(h.Select(func(f *Frame) bool { return f.Fate == "dropped" || f.Fate == "corrupted" }))
		rnr += len(h.Select(RNR()))
		naks += len(h.Select(NAK()))
		if w.typ == qp.UC {
			uc++
		}
		if len(w.ops[1]) > 0 {
			bidi++
		}
		if w.srq {
			srq++
		}
		if w.lateAt != 0 {
			late++
		}
		if err == nil {
			continue
		}
		failures++
		dump := ""
		if single {
			dump = "\n" + h.Dump(200)
		}
		t.Errorf("seed %d: %v\n  workload: %v\n  reproduce: SOFTROCE_QP_SEED=%d go test ./qp/ -run 'TestRandomWorkloads$' -v%s",
			seed, err, w, seed, dump)
		if failures >= 5 {
			t.Fatalf("stopping after %d failing seeds", failures)
		}
	}
	t.Logf("%d workloads (%d UC, %d both ways, %d SRQ, %d late receives): %d frames, %d lost or corrupted, %d NAKs (%d RNR)",
		len(seeds), uc, bidi, srq, late, frames, dropped, naks, rnr)
}
