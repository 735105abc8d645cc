package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/sim/netsim"
)

// hostRT is what the workload keeps per host: its device objects and the
// QPs it serves, by QPN.
type hostRT struct {
	h      *host
	info   hostInfo
	dev    *rxeDevice
	pd     *rxe.PD
	cq     *rxe.CQ
	ends   []flowEnd // by QPN: the device hands them out from 17 up, in order
	wcs    []qp.WC
	nextVA uint64
	run    *runState
	// The flows the connection manager connects: by service ID where
	// the host listens, by connection where it requested.
	cmListen map[uint64]*flow
	cmConns  map[cm.ConnID]*flow
	// bulk* are the regions flows workloads share: the source on the
	// sending host, the sink and an unused receive buffer on the other.
	bulkSrc, bulkSink, bulkRecv *rxe.MR
}

// bulkRegions returns the shared regions of bulk flows from hr to b, of
// size bytes, registering them on first use (the largest size asked
// first wins; flows of one workload all ask the same).
func (hr *hostRT) bulkRegions(b *hostRT, size int) (src, recv, sink *rxe.MR, err error) {
	if hr.bulkSrc == nil {
		if hr.bulkSrc, err = hr.reg(size, qp.AccessLocalWrite); err != nil {
			return nil, nil, nil, err
		}
	}
	if b.bulkSink == nil {
		access := qp.AccessLocalWrite | qp.AccessRemoteWrite
		if b.bulkSink, err = b.reg(size, access); err != nil {
			return nil, nil, nil, err
		}
		if b.bulkRecv, err = b.reg(size, qp.AccessLocalWrite); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(hr.bulkSrc.Bytes()) < size || len(b.bulkSink.Bytes()) < size {
		return nil, nil, nil, fmt.Errorf("bulk regions of %d bytes, flows of another chunk size asked for %d", len(b.bulkSink.Bytes()), size)
	}
	return hr.bulkSrc, b.bulkRecv, b.bulkSink, nil
}

// flowEnd says which side of which flow a QP is.
type flowEnd struct {
	f         *flow
	requester bool
}

// setEnd records which flow, and which end of it, QP qpn is.
func (hr *hostRT) setEnd(qpn uint32, e flowEnd) {
	if int(qpn) >= len(hr.ends) {
		hr.ends = append(hr.ends, make([]flowEnd, int(qpn)+1-len(hr.ends))...)
	}
	hr.ends[qpn] = e
}

// endOf returns the flow end QP qpn is, or nil for a QP no flow has.
func (hr *hostRT) endOf(qpn uint32) *flowEnd {
	if int(qpn) < len(hr.ends) && hr.ends[qpn].f != nil {
		return &hr.ends[qpn]
	}
	return nil
}

// opRec is one posted operation and what it must produce.
type opRec struct {
	kind     opKind
	size     int
	off      uint64 // offset in the remote region
	postedAt netsim.Time
	expect   []byte // READ: the bytes the reference model says it returns
	orig     uint64 // CAS/FADD: the original value the model says it returns
	msg      int    // index in flow.msgs of the message it sends, if any
	done     bool
}

// msgRec is a message the responder should receive, in posting order.
type msgRec struct {
	seq  uint32
	size int
	kind opKind
	got  int
}

// flow is one QP pair running a workload's operations from a to b.
type flow struct {
	id    int
	name  string
	wl    *wlSpec
	typ   qp.Type
	a, b  *hostRT
	qa    *rxe.QP
	qb    *rxe.QP
	ah    *rxe.AH
	mtu   qp.MTU
	rng   *fault.Rand
	slot  int // bytes per local slot (one per window position)
	local *rxe.MR
	// Responder memory: the region WRITE/READ/atomics target, and the
	// receive buffers.
	remote *rxe.MR
	model  *refModel
	recv   *rxe.MR
	rslot  int
	rdepth int

	ops         []opRec
	posted      int
	completed   int // send completions seen
	outstanding int
	backlog     int // rate mode: operations due but held by the window
	msgs        []msgRec
	recvNext    int
	failed      bool
	finished    bool
	firstErr    qp.WCStatus
	bytesDone   uint64      // payload of operations completed successfully
	lastDone    netsim.Time // the last send completion
	// A flows workload's flow: the bytes it moves, how many are posted,
	// and when it arrives (its operations start then, not at the
	// workload's start).
	total, queued int64
	startAt       netsim.Time
	// bulk: the flow's regions are its hosts' shared ones and its bytes
	// are not checked (flows workloads).
	bulk bool
	sge  [1]qp.SGE

	// connected: the QPs are in RTS; started: the start time has come.
	// Operations begin when both hold (cm.go).
	connected, started bool
	cm                 flowCM
}

// alloc carves an address range for a region on a host.
func (hr *hostRT) alloc(n int) uint64 {
	va := hr.nextVA
	hr.nextVA += (uint64(n) + regionAlign - 1) / regionAlign * regionAlign
	hr.nextVA += regionAlign // a guard gap: off-by-one addresses miss
	return va
}

// reg registers n zeroed bytes of the run's.
func (hr *hostRT) reg(n int, access qp.Access) (*rxe.MR, error) {
	return hr.regBytes(hr.run.mem.bytes(n), access)
}

func (hr *hostRT) regBytes(b []byte, access qp.Access) (*rxe.MR, error) {
	return hr.dev.d.RegMRIOVA(hr.pd, b, hr.alloc(len(b)), access)
}

// setupHost creates the workload's per-host objects.
func (run *runState) setupHost(h *host, info hostInfo, cqDepth int) (*hostRT, error) {
	dev := h.dev.(*rxeDevice)
	pd, err := dev.d.AllocPD()
	if err != nil {
		return nil, err
	}
	cq, err := dev.d.CreateCQ(min(max(cqDepth, 64), rxe.MaxCQE))
	if err != nil {
		return nil, err
	}
	hr := &hostRT{h: h, info: info, dev: dev, pd: pd, cq: cq,
		cmListen: map[uint64]*flow{}, cmConns: map[cm.ConnID]*flow{},
		wcs: make([]qp.WC, 64), nextVA: iovaBase + uint64(info.Index)<<32, run: run}
	h.poll = hr.poll
	h.polled = func() bool { return cq.Len() > 0 }
	return hr, nil
}

// newFlow creates and connects a QP pair for workload w from a to b: the
// k-th of the pair's QPs, or, for a flows workload, the flow that arrives
// as fa (k is then its number in the run).
func (run *runState) newFlow(w *wlSpec, a, b *hostRT, k int, fa *flowArrival) (*flow, error) {
	f := &flow{
		id: len(run.flows), wl: w, typ: w.typ, a: a, b: b,
		name:    w.Name + "/" + a.info.Name + "->" + b.info.Name + "/" + strconv.Itoa(k),
		startAt: netsim.Time(w.Start),
	}
	count := w.Count
	if fa != nil {
		f.total, f.startAt = fa.size, fa.at
		count = int((fa.size + int64(w.maxSize) - 1) / int64(w.maxSize))
	}
	f.rng = fault.Stream(run.w.seed, "flow/"+f.name)
	pathMTU := min(rxe.ActiveMTU(a.info.MTU), rxe.ActiveMTU(b.info.MTU))
	if w.MTU != 0 {
		m := qp.MTU(w.MTU)
		if !m.Valid() || m > pathMTU {
			return nil, fmt.Errorf("workload %s: path MTU %d is not an IB MTU the hosts carry (max %d)", w.Name, w.MTU, pathMTU)
		}
		pathMTU = m
	}
	f.mtu = pathMTU
	maxSize := w.maxSize
	if f.typ == qp.UD {
		maxSize = min(maxSize, int(pathMTU))
	}
	f.slot = (maxSize + 7) &^ 7
	f.rdepth = w.RecvDepth
	f.rslot = f.slot
	if f.typ == qp.UD {
		f.rslot += grhLen
	}
	var err error
	if fa != nil {
		// A flows workload moves bulk bytes: its flows share each host's
		// source and sink regions, and the bytes are not checked (a run
		// of thousands of flows and gigabytes would not fit in memory
		// otherwise); the transport's invariants still hold them.
		f.bulk = true
		f.rdepth = 1
		if f.local, f.recv, f.remote, err = a.bulkRegions(b, f.slot); err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.name, err)
		}
	} else {
		// The source buffer need not start cleared: post writes each
		// message's bytes, a READ's poison or an atomic's marker before
		// the WR is posted, and the WR reaches no further. The receive
		// buffer does: its bytes are checked, and a responder that
		// placed nothing must not pass on what an identical earlier run
		// left there. (Bulk regions are cleared: their bytes are sent
		// as they are.)
		if f.local, err = a.regBytes(run.mem.overwritten(f.slot*w.Window), qp.AccessLocalWrite); err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.name, err)
		}
		if f.rdepth > 0 {
			if f.recv, err = b.reg(f.rslot*f.rdepth, qp.AccessLocalWrite); err != nil {
				return nil, fmt.Errorf("flow %s: %w", f.name, err)
			}
		}
	}
	if f.typ != qp.UD && !f.bulk {
		size := max(4*f.slot, 4096)
		access := qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
		// Start from a known pattern so that READs return something
		// distinguishable from zeros: it overwrites the region whole, as
		// the model's copy of it does.
		if f.remote, err = b.regBytes(run.mem.overwritten(size), access); err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.name, err)
		}
		fillPattern(f.remote.Bytes(), uint32(f.id), initialSeq)
		f.model = newRefModel(uint32(f.id), &run.models, run.mem.overwritten(size))
	}
	caps := rxe.QPCap{MaxSendWR: w.Window + 1, MaxRecvWR: f.rdepth + 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	if f.qa, err = a.dev.d.CreateQP(a.pd, rxe.QPInit{Type: f.typ, SendCQ: a.cq, RecvCQ: a.cq, Cap: caps}); err != nil {
		return nil, fmt.Errorf("flow %s: %w", f.name, err)
	}
	if f.qb, err = b.dev.d.CreateQP(b.pd, rxe.QPInit{Type: f.typ, SendCQ: b.cq, RecvCQ: b.cq, Cap: caps}); err != nil {
		return nil, fmt.Errorf("flow %s: %w", f.name, err)
	}
	// Start PSNs anywhere in the 24-bit space, a quarter of them just
	// below the wrap, so that PSN arithmetic modulo 2^24 is exercised.
	psnA, psnB := f.drawPSN(), f.drawPSN()
	if w.Connect == "cm" {
		// The connection manager connects them (cm.go); the responder's
		// QP waits in INIT with its receives posted.
		if err := f.cmSetup(psnA, psnB); err != nil {
			return nil, err
		}
	} else {
		if err := f.connect(f.qa, a, b, f.qb.QPN(), psnA, psnB); err != nil {
			return nil, err
		}
		if err := f.connect(f.qb, b, a, f.qa.QPN(), psnB, psnA); err != nil {
			return nil, err
		}
		f.connected = true
	}
	if f.typ == qp.UD {
		av := qp.AddressVector{DGID: b.info.IP, SGIDIndex: uint8(a.dev.d.GIDIndex(a.info.IP)), HopLimit: 64,
			TrafficClass: f.trafficClass()}
		if f.ah, err = a.dev.d.CreateAH(a.pd, av); err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.name, err)
		}
	}
	run.w.rec.flow(f.name, f.typ.String(), f.qa.QPN(), f.qb.QPN(), psnA, psnB, int(f.mtu))
	f.ops = make([]opRec, count)
	a.setEnd(f.qa.QPN(), flowEnd{f: f, requester: true})
	b.setEnd(f.qb.QPN(), flowEnd{f: f})
	for i := 0; i < f.rdepth; i++ {
		if err := f.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *flow) drawPSN() uint32 {
	if f.rng.IntN(4) == 0 {
		return 0xFFFFFF - uint32(f.rng.IntN(64))
	}
	return uint32(f.rng.Uint64()) & 0xFFFFFF
}

// trafficClass is the traffic class of the flow's address vectors: the
// workload's DSCP, ECN bits clear (the device sets ECT when ECN is on).
func (f *flow) trafficClass() uint8 { return intAttr(f.wl.DSCP, 0) << 2 }

func intAttr(p *int, def int) uint8 {
	if p == nil {
		return uint8(def)
	}
	return uint8(*p)
}

// connect walks a QP through INIT, RTR and RTS towards the peer QP.
func (f *flow) connect(x *rxe.QP, self, peer *hostRT, peerQPN, sqPSN, rqPSN uint32) error {
	w := f.wl
	at := func(step string, a *qp.Attr, mask qp.AttrMask) error {
		if err := x.Modify(a, mask|qp.AttrState); err != nil {
			return fmt.Errorf("flow %s: qp %d to %s: %w", f.name, x.QPN(), step, err)
		}
		return nil
	}
	a := qp.Attr{State: qp.Init, Port: 1}
	mask := qp.AttrPKeyIndex | qp.AttrPort
	if f.typ == qp.UD {
		a.QKey = udQKey
		mask |= qp.AttrQKey
	} else {
		a.AccessFlags = qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
		mask |= qp.AttrAccessFlags
	}
	if err := at("INIT", &a, mask); err != nil {
		return err
	}
	a = qp.Attr{State: qp.RTR}
	mask = 0
	if f.typ != qp.UD {
		a.AV = qp.AddressVector{DGID: peer.info.IP, SGIDIndex: uint8(self.dev.d.GIDIndex(self.info.IP)), HopLimit: 64,
			TrafficClass: f.trafficClass()}
		a.PathMTU = f.mtu
		a.DestQPN = peerQPN
		a.RQPSN = rqPSN
		mask = qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
		if f.typ == qp.RC {
			a.MaxDestRdAtomic = intAttr(w.MaxRdAtomic, 16)
			a.MinRNRTimer = intAttr(w.MinRNRTimer, 1)
			mask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		}
	}
	if err := at("RTR", &a, mask); err != nil {
		return err
	}
	a = qp.Attr{State: qp.RTS, SQPSN: sqPSN}
	mask = qp.AttrSQPSN
	if f.typ == qp.RC {
		a.Timeout = intAttr(w.Timeout, 14)
		a.RetryCnt = intAttr(w.RetryCnt, 7)
		a.RNRRetry = intAttr(w.RNRRetry, 7)
		a.MaxRdAtomic = intAttr(w.MaxRdAtomic, 16)
		mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	return at("RTS", &a, mask)
}

// postRecv posts receive slot i.
func (f *flow) postRecv(i uint64) error {
	f.sge[0] = qp.SGE{Addr: f.recv.Addr() + i*uint64(f.rslot), Length: uint32(f.rslot), LKey: f.recv.LKey()}
	wr := qp.RecvWR{ID: i, SGL: f.sge[:]} // PostRecv copies the SGL
	if err := f.qb.PostRecv(&wr); err != nil {
		return fmt.Errorf("flow %s: post recv: %w", f.name, err)
	}
	return nil
}

// fillPattern writes the content of message seq of flow id: the flow and
// sequence number in the first 8 bytes (when they fit), then bytes that
// depend on both and on the position, so that a misplaced, stale, shifted
// or corrupted byte shows. Byte j is byte j%8 of a mixed (id, seq) word
// (little-endian) XOR the low byte of j/8, so whole 8-byte words are written
// at once, and the bytes repeat every patternPeriod: past the first period
// the rest is copied, which is several times faster than computing it.
func fillPattern(b []byte, id, seq uint32) {
	j := 0
	if len(b) >= 8 {
		binary.BigEndian.PutUint32(b, id)
		binary.BigEndian.PutUint32(b[4:], seq)
		j = 8
	}
	x := patternWord(id, seq)
	end := min(len(b), 8+patternPeriod)
	if j == 8 {
		// The words: x and the masks of patternMasks, four at a time.
		w := b[8:end]
		m := patternMasks[:len(w)/8]
		i := 0
		for ; i+4 <= len(m); i += 4 {
			q, mm := w[8*i:8*i+32], m[i:i+4]
			binary.LittleEndian.PutUint64(q[0:], x^mm[0])
			binary.LittleEndian.PutUint64(q[8:], x^mm[1])
			binary.LittleEndian.PutUint64(q[16:], x^mm[2])
			binary.LittleEndian.PutUint64(q[24:], x^mm[3])
		}
		for ; i < len(m); i++ {
			binary.LittleEndian.PutUint64(w[8*i:], x^m[i])
		}
		j = 8 + 8*len(m)
	}
	for ; j < end; j++ {
		b[j] = patternByte(x, j)
	}
	// The rest repeats b[8:end], one period: copied a period at a time from
	// there, which stays in the L1 cache (copying ever longer stretches of
	// b, from caches farther out, took half as long again for a 1 MiB
	// message).
	for k := end; k < len(b); k += patternPeriod {
		copy(b[k:], b[8:end])
	}
}

// patternPeriod is the period of fillPattern's bytes after the first 8:
// byte j depends on j%8 and on the low byte of j/8.
const patternPeriod = 256 * 8

// patternWord is the mixed (id, seq) word fillPattern repeats.
func patternWord(id, seq uint32) uint64 {
	x := uint64(id)<<32 | uint64(seq)
	return (x ^ x>>30) * 0xBF58476D1CE4E5B9
}

// patternMasks holds patternMask of the period's words, from j = 8.
var patternMasks = func() (m [patternPeriod / 8]uint64) {
	for i := range m {
		m[i] = patternMask(8 + 8*i)
	}
	return m
}()

// patternByte is byte j of a message whose mixed word is x (past the
// header, or of a message too short for one).
func patternByte(x uint64, j int) byte { return byte(x>>(8*(j&7))) ^ byte(j>>3) }

// patternMask is the low byte of j/8 in every byte of a word.
func patternMask(j int) uint64 { return uint64(byte(j>>3)) * 0x0101010101010101 }

// checkPattern reports whether b is message seq of flow id. It compares
// the first period word by word without building the expected bytes, and
// the rest as a repeat of it.
func checkPattern(b []byte, id, seq uint32) bool {
	j := 0
	if len(b) >= 8 {
		if binary.BigEndian.Uint32(b) != id || binary.BigEndian.Uint32(b[4:]) != seq {
			return false
		}
		j = 8
	}
	x := patternWord(id, seq)
	end := min(len(b), 8+patternPeriod)
	for ; j+8 <= end; j += 8 {
		if binary.LittleEndian.Uint64(b[j:]) != x^patternMask(j) {
			return false
		}
	}
	for ; j < end; j++ {
		if b[j] != patternByte(x, j) {
			return false
		}
	}
	return end == len(b) || bytes.Equal(b[end:], b[8:len(b)-patternPeriod])
}

// patternRange writes bytes [from, from+len(dst)) of message seq of flow
// id, size bytes long, as fillPattern writes them, to dst.
func patternRange(dst []byte, id, seq uint32, size, from int) {
	j, i := from, 0
	if size >= 8 && j < 8 {
		var h [8]byte
		binary.BigEndian.PutUint32(h[:], id)
		binary.BigEndian.PutUint32(h[4:], seq)
		n := copy(dst, h[j:])
		i, j = n, j+n
	}
	x := patternWord(id, seq)
	for ; i < len(dst) && j&7 != 0; i, j = i+1, j+1 {
		dst[i] = patternByte(x, j)
	}
	for ; i+8 <= len(dst); i, j = i+8, j+8 {
		binary.LittleEndian.PutUint64(dst[i:], x^patternMask(j))
	}
	for ; i < len(dst); i, j = i+1, j+1 {
		dst[i] = patternByte(x, j)
	}
}
