package dropin

// verbs.go: the control verbs (PD, CQ, QP, SRQ, AH), each a
// translation between proto.h's records and verbsapi on the daemon's one
// context, with the connection's handles in place of objects.

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// errnoOf maps a verbsapi error to the errno the kernel's verbs would give
// for the same mistake: EBUSY for an object in use, ENOMEM for a full queue
// or a device limit, EOPNOTSUPP for what softroce lacks and EINVAL for the
// rest (bad arguments, states, transitions, destroyed objects).
func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &en):
		return en
	case errors.Is(err, verbsapi.ErrBusy):
		return syscall.EBUSY
	case errors.Is(err, verbsapi.ErrLimit), errors.Is(err, verbsapi.ErrQueueFull):
		return syscall.ENOMEM
	case errors.Is(err, verbsapi.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, verbsapi.ErrCQOverflow):
		return syscall.EOVERFLOW
	case errors.Is(err, verbsapi.ErrClosed):
		return syscall.ENODEV
	}
	return syscall.EINVAL
}

// errnoOf is the package's errnoOf that also keeps err as the reason of
// the call's failure, for the log line the server writes about it.
func (c *conn) errnoOf(err error) syscall.Errno {
	if err != nil {
		c.reason = err
	}
	return errnoOf(err)
}

// toInt converts a count from the wire, refusing what does not fit an
// int32 (the verbs' own type for these counts).
func toInt(v uint32) (int, bool) { return int(v), v <= math.MaxInt32 }

func (c *conn) allocPD(b []byte) syscall.Errno {
	if len(b) != 0 {
		return syscall.EINVAL
	}
	pd, err := c.ctx.AllocPD()
	if err != nil {
		return c.errnoOf(err)
	}
	h := c.handle()
	c.pds[h] = pd
	c.w.put(wireHandle{h})
	return 0
}

func (c *conn) deallocPD(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.pds[h] == nil {
		return syscall.EINVAL
	}
	if err := c.pds[h].Dealloc(); err != nil {
		return c.errnoOf(err)
	}
	delete(c.pds, h)
	return 0
}

func (c *conn) createCQ(b []byte) syscall.Errno {
	var r wireCreateCQ
	if !decode(b, &r) {
		return syscall.EINVAL
	}
	cqe, ok := toInt(r.CQE)
	if !ok {
		return syscall.EINVAL
	}
	var ch *verbsapi.CompChannel
	if r.Channel != srNone {
		cc := c.chans[r.Channel]
		if cc == nil {
			return syscall.EINVAL
		}
		ch = cc.ch
	}
	ring, fd, bytes, errno := c.newRing(cqe)
	if errno != 0 {
		return errno
	}
	// comp_vector picks an interrupt vector: softroce has none to pick.
	cq, err := c.ctx.CreateRingCQ(cqe, ch, ring)
	if err != nil {
		ring.unmap()
		unix.Close(fd)
		c.releaseQueue(bytes)
		return c.errnoOf(err)
	}
	h := c.handle()
	c.cqs[h] = &connCQ{cq: cq, ring: ring, channel: r.Channel, bytes: bytes}
	c.owners.add(cq, c, h)
	c.sendFD(fd)
	c.w.put(wireCQ{Handle: h, CQE: uint32(cq.Depth())})
	return 0
}

// newRing charges the program's queue memory for a CQ of cqe entries and
// makes its shared ring (cqring.go), returning the ring, the memfd to send
// and the bytes charged (the caller releases them if the CQ is not made).
func (c *conn) newRing(cqe int) (*cqRing, int, int64, syscall.Errno) {
	max := c.ctx.QueryDevice().MaxCQE
	if cqe < 1 || cqe > max {
		return nil, -1, 0, c.refuse(syscall.EINVAL, "cq of %d entries: the device's CQs hold 1..%d", cqe, max)
	}
	bytes := verbsapi.CQQueueBytes(cqe)
	if errno := c.reserveQueue(bytes, fmt.Sprintf("a CQ of %d entries", cqe)); errno != 0 {
		return nil, -1, 0, errno
	}
	ring, fd, err := newCQRing(cqe)
	if err != nil {
		c.releaseQueue(bytes)
		c.reason = err
		return nil, -1, 0, errnoOf(err)
	}
	ring.onError = c.kickPoller
	return ring, fd, bytes, 0
}

func (c *conn) destroyCQ(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.cqs[h] == nil {
		return syscall.EINVAL
	}
	cq := c.cqs[h]
	if err := cq.cq.Destroy(); err != nil {
		return c.errnoOf(err)
	}
	cq.ring.unmap()
	c.owners.drop(cq.cq)
	delete(c.cqs, h)
	c.releaseQueue(cq.bytes)
	if cc := c.chans[cq.channel]; cc != nil {
		cc.events.remove(func(v uint32) bool { return v == h })
	}
	c.forgetAsync(elemCQ, h)
	c.w.put(wireDestroyCQResp{CompEvents: cq.compEvents, AsyncEvents: cq.asyncEvents})
	return 0
}

func (c *conn) resizeCQ(b []byte) syscall.Errno {
	var r wireResizeCQ
	if !decode(b, &r) || c.cqs[r.Handle] == nil {
		return syscall.EINVAL
	}
	cqe, ok := toInt(r.CQE)
	if !ok {
		return syscall.EINVAL
	}
	ccq := c.cqs[r.Handle]
	// The program drained the old ring before asking; what arrives until
	// the switch it reads from the old ring after the answer.
	if ccq.ring.Len() > cqe {
		return syscall.EINVAL
	}
	ring, fd, bytes, errno := c.newRing(cqe)
	if errno != 0 {
		return errno
	}
	if err := ccq.cq.ResizeRing(cqe, ring); err != nil {
		ring.unmap()
		unix.Close(fd)
		c.releaseQueue(bytes)
		return c.errnoOf(err)
	}
	ccq.ring.unmap()
	ccq.ring = ring
	c.releaseQueue(ccq.bytes)
	ccq.bytes = bytes
	c.sendFD(fd)
	c.w.put(wireCQ{Handle: r.Handle, CQE: uint32(ccq.cq.Depth())})
	return 0
}

func (c *conn) reqNotifyCQ(b []byte) syscall.Errno {
	var r wireReqNotify
	if !decode(b, &r) || c.cqs[r.Handle] == nil {
		return syscall.EINVAL
	}
	return errnoOf(c.cqs[r.Handle].cq.ReqNotify(r.SolicitedOnly != 0))
}

// QP types on the wire (enum ibv_qp_type).
const (
	ibvQPTRC = 2
	ibvQPTUC = 3
	ibvQPTUD = 4
)

func qpTypeFromWire(t uint32) (verbsapi.QPType, bool) {
	switch t {
	case ibvQPTRC:
		return verbsapi.RC, true
	case ibvQPTUC:
		return verbsapi.UC, true
	case ibvQPTUD:
		return verbsapi.UD, true
	}
	return 0, false
}

func (c *conn) createQP(b []byte) syscall.Errno {
	var r wireCreateQP
	if !decode(b, &r) {
		return syscall.EINVAL
	}
	pd, scq, rcq := c.pds[r.PD], c.cqs[r.SendCQ], c.cqs[r.RecvCQ]
	typ, ok := qpTypeFromWire(r.QPType)
	if !ok {
		return syscall.EOPNOTSUPP // RAW_PACKET, XRC, ...: a type softroce lacks, as a provider says
	}
	if pd == nil || scq == nil || rcq == nil {
		return syscall.EINVAL
	}
	init := verbsapi.QPInitAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, QPType: typ, SigAll: r.SQSigAll != 0}
	if r.SRQ != srNone {
		s := c.srqs[r.SRQ]
		if s == nil {
			return syscall.EINVAL
		}
		init.SRQ = s.srq
	}
	var oks [5]bool
	init.Cap.MaxSendWR, oks[0] = toInt(r.Cap.MaxSendWR)
	init.Cap.MaxRecvWR, oks[1] = toInt(r.Cap.MaxRecvWR)
	init.Cap.MaxSendSGE, oks[2] = toInt(r.Cap.MaxSendSGE)
	init.Cap.MaxRecvSGE, oks[3] = toInt(r.Cap.MaxRecvSGE)
	init.Cap.MaxInline, oks[4] = toInt(r.Cap.MaxInlineData)
	if oks != [5]bool{true, true, true, true, true} {
		return syscall.EINVAL
	}
	var bytes int64
	if a := c.ctx.QueryDevice(); withinDevice(max(init.Cap.MaxSendWR, init.Cap.MaxRecvWR),
		max(init.Cap.MaxSendSGE, init.Cap.MaxRecvSGE), a.MaxQPWR, a.MaxSGE) && init.Cap.MaxInline <= a.MaxInlineData {
		bytes = init.QueueBytes()
	}
	if errno := c.reserveQueue(bytes, queueWhat("a QP", max(init.Cap.MaxSendWR, init.Cap.MaxRecvWR),
		max(init.Cap.MaxSendSGE, init.Cap.MaxRecvSGE))); errno != 0 {
		return errno
	}
	q, err := pd.CreateQP(init)
	if err != nil {
		c.releaseQueue(bytes)
		return c.errnoOf(err)
	}
	// Report what the device granted (rxe rounds the send WQE up: a
	// program asking for one SGE may send 16 bytes inline).
	granted := q.InitAttr().Cap
	r.Cap.MaxSendSGE, r.Cap.MaxInlineData = uint32(granted.MaxSendSGE), uint32(granted.MaxInline)
	if init.SRQ != nil {
		// The receive queue is the SRQ's, as the kernel reports it.
		r.Cap.MaxRecvWR, r.Cap.MaxRecvSGE = 0, 0
	}
	cq := &connQP{qp: q, init: r, bytes: bytes}
	if errno := c.makeRings(cq, granted, init.SRQ != nil); errno != 0 {
		q.Destroy()
		c.releaseQueue(bytes)
		return errno
	}
	h := c.handle()
	c.qps[h] = cq
	c.owners.add(q, c, h)
	c.w.put(wireQP{Handle: h, QPNum: q.QPN(), Cap: r.Cap})
	return 0
}

// makeRings gives a new QP its send and receive rings (wqring.go), sized
// by the caps the device granted, charged to the program's queue memory
// with the QP, and sends their memfd with the answer.
func (c *conn) makeRings(q *connQP, caps verbsapi.QPCap, onSRQ bool) syscall.Errno {
	sqSlot := sendSlot(caps.MaxSendSGE, caps.MaxInline)
	rqN, rqSlot := uint32(caps.MaxRecvWR), recvSlot(caps.MaxRecvSGE)
	if onSRQ {
		rqN = 0
	}
	_, size := qpRingLayout(uint32(caps.MaxSendWR), sqSlot, rqN, rqSlot)
	if errno := c.reserveQueue(int64(size), queueWhat("a QP's rings", max(caps.MaxSendWR, caps.MaxRecvWR),
		max(caps.MaxSendSGE, caps.MaxRecvSGE))); errno != 0 {
		return errno
	}
	rings, fd, err := newQPRings(uint32(caps.MaxSendWR), sqSlot, rqN, rqSlot, c.asleep.Load())
	if err != nil {
		c.releaseQueue(int64(size))
		c.reason = err
		return errnoOf(err)
	}
	q.rings, q.bytes = rings, q.bytes+int64(size)
	c.ringQPs = append(c.ringQPs, q)
	q.qp.SetQueueWatch(queueWatch(rings))
	if rings.rq != nil {
		q.qp.SetRecvRefill(c.recvRefill(rings.rq, fmt.Sprintf("QP %d", q.qp.QPN())))
	}
	c.sendFD(fd)
	return 0
}

// maskKnown is every ibv_qp_attr_mask bit up to IBV_QP_DEST_QPN; later
// ones (rate limit) softroce does not offer.
const maskKnown = verbsapi.QPAttrMask(1<<21 - 1)

// ahFromWire converts an address from the wire. RoCE needs the GRH
// (is_global), since GIDs are its addresses. The flow label keeps its low
// 20 bits: the kernel passes all 32 to the driver, which uses only those
// (rdma_get_udp_sport in rxe, a 20-bit field in mlx5), and UCX sends
// 0xffffffff for "any".
func ahFromWire(a *wireAHAttr) (verbsapi.AHAttr, bool) {
	if a.IsGlobal == 0 || a.PortNum > 1 {
		return verbsapi.AHAttr{}, false
	}
	return verbsapi.AHAttr{DGID: netip.AddrFrom16(a.DGID), SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel & 0xFFFFF, PortNum: a.PortNum}, true
}

// qpAttrFromWire converts the attributes mask names, refusing values that
// do not fit the engine's types.
func qpAttrFromWire(a *wireQPAttr, mask verbsapi.QPAttrMask) (verbsapi.QPAttr, bool) {
	const maxState = uint32(verbsapi.QPSErr)
	if mask&verbsapi.QPAttrState != 0 && a.QPState > maxState ||
		mask&verbsapi.QPAttrCurState != 0 && a.CurQPState > maxState {
		return verbsapi.QPAttr{}, false
	}
	out := verbsapi.QPAttr{
		State: verbsapi.QPState(a.QPState), CurState: verbsapi.QPState(a.CurQPState),
		EnSQDAsyncNotify: a.EnSQDAsyncNotify != 0, AccessFlags: verbsapi.Access(a.QPAccessFlags),
		PKeyIndex: a.PKeyIndex, Port: a.PortNum, QKey: a.QKey,
		Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, MinRNRTimer: a.MinRNRTimer,
		RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic,
		DestQPN: a.DestQPNum,
	}
	if mask&verbsapi.QPAttrPathMTU != 0 {
		if a.PathMTU > 5 {
			return verbsapi.QPAttr{}, false
		}
		if out.PathMTU = verbsapi.MTU(mtuFromEnum(a.PathMTU)); out.PathMTU == 0 {
			return verbsapi.QPAttr{}, false
		}
	}
	if mask&verbsapi.QPAttrAV != 0 {
		ah, ok := ahFromWire(&a.AHAttr)
		if !ok {
			return verbsapi.QPAttr{}, false
		}
		hop := ah.HopLimit
		if hop == 0 {
			hop = 64 // as verbsapi.AHAttr: a zero hop limit would not leave the host
		}
		out.AV = verbsapi.AddressVector{DGID: ah.DGID, SGIDIndex: ah.SGIDIndex, HopLimit: hop,
			TrafficClass: ah.TrafficClass, FlowLabel: ah.FlowLabel}
	}
	return out, true
}

// mtuFromEnum converts enum ibv_mtu (1..5) to bytes, 0 if invalid.
func mtuFromEnum(e uint32) uint32 {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}

func (c *conn) modifyQP(b []byte) syscall.Errno {
	var r wireModifyQP
	if !decode(b, &r) || c.qps[r.Handle] == nil {
		return syscall.EINVAL
	}
	mask := verbsapi.QPAttrMask(r.Mask)
	if mask&^maskKnown != 0 {
		return syscall.EOPNOTSUPP
	}
	attr, ok := qpAttrFromWire(&r.Attr, mask)
	if !ok {
		return syscall.EINVAL
	}
	q := c.qps[r.Handle].qp
	if err := q.Modify(&attr, mask); err != nil {
		return errnoOf(err)
	}
	if mask&verbsapi.QPAttrAV != 0 && mask&verbsapi.QPAttrState != 0 && attr.State == verbsapi.QPSRTR {
		c.warnUnreachable(q.QPN(), attr.AV.DGID, attr.DestQPN, mask&verbsapi.QPAttrDestQPN != 0)
	}
	return 0
}

// warnUnreachable says at once, in the log, that a QP's destination is
// nowhere on the device's link, where it is knowable (the mem link, a
// network of the daemon's process): otherwise the program only learns it
// when its retries run out, which is how two `softroce run --private`
// programs used to fail.
//
// A destination that is the device's own address with a QP number the
// device does not have is named too: the peer is another device with the
// same address (another daemon's, or a --private run's), which this one
// takes for itself.
func (c *conn) warnUnreachable(qpn uint32, dgid netip.Addr, destQPN uint32, connected bool) {
	dev := c.d.Device.RXE()
	if connected && dev.GIDIndex(dgid) >= 0 {
		if dev.HasQP(destQPN) {
			return
		}
		c.d.logf("program pid %d: QP %d: its destination %s is %s's own address, where no QP %d exists: "+
			"the peer is on another device with the same address (another daemon, or softroce run --private) "+
			"and cannot be reached; start the peers through one daemon (softroce run without --private, or the same --socket)",
			c.pid, qpn, dgid.Unmap(), dev.Name(), destQPN)
		return
	}
	l, ok := dev.Link().(interface{ Reaches(netip.Addr) bool })
	if !ok || l.Reaches(dgid) {
		return
	}
	c.d.logf("program pid %d: QP %d: nothing on %s's mem link has address %s: its peer cannot answer. "+
		"A mem link reaches only the programs of one daemon; start the peers through one daemon "+
		"(softroce run without --private, or the same --socket) or put the device on --link udp",
		c.pid, qpn, dev.Name(), dgid.Unmap())
}

// qpAttrToWire is ibv_query_qp's view of the QP's attributes.
func qpAttrToWire(a verbsapi.QPAttr, cp wireQPCap) wireQPAttr {
	w := wireQPAttr{
		QPState: uint32(a.State), CurQPState: uint32(a.State), PathMTU: uint32(a.PathMTU.Enum()),
		QKey: a.QKey, RQPSN: a.RQPSN, SQPSN: a.SQPSN, DestQPNum: a.DestQPN,
		QPAccessFlags: uint32(a.AccessFlags), Cap: cp, PKeyIndex: a.PKeyIndex,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer,
		PortNum: a.Port, Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry,
	}
	if a.EnSQDAsyncNotify {
		w.EnSQDAsyncNotify = 1
	}
	if a.AV.DGID.IsValid() {
		av := &w.AHAttr
		av.DGID = a.AV.DGID.As16()
		av.FlowLabel, av.SGIDIndex, av.HopLimit, av.TrafficClass = a.AV.FlowLabel, a.AV.SGIDIndex, a.AV.HopLimit, a.AV.TrafficClass
		av.IsGlobal, av.PortNum = 1, 1
	}
	return w
}

func (c *conn) queryQP(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.qps[h] == nil {
		return syscall.EINVAL
	}
	q := c.qps[h]
	c.w.put(wireQueryQPResp{Attr: qpAttrToWire(q.qp.Query(), q.init.Cap), Init: q.init})
	return 0
}

func (c *conn) destroyQP(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.qps[h] == nil {
		return syscall.EINVAL
	}
	q := c.qps[h]
	if err := q.qp.Destroy(); err != nil {
		return c.errnoOf(err)
	}
	if q.rings != nil {
		c.dropRingQP(q)
	}
	c.owners.drop(q.qp)
	delete(c.qps, h)
	c.releaseQueue(q.bytes)
	c.forgetAsync(elemQP, h)
	c.w.put(wireDestroyQPResp{EventsReported: q.events})
	return 0
}

func (c *conn) createSRQ(b []byte) syscall.Errno {
	var r wireCreateSRQ
	if !decode(b, &r) || c.pds[r.PD] == nil {
		return syscall.EINVAL
	}
	maxWR, ok1 := toInt(r.MaxWR)
	maxSGE, ok2 := toInt(r.MaxSGE)
	limit, ok3 := toInt(r.SRQLimit)
	if !ok1 || !ok2 || !ok3 {
		return syscall.EINVAL
	}
	attr := verbsapi.SRQInitAttr{MaxWR: maxWR, MaxSGE: maxSGE, Limit: limit}
	var bytes int64
	if a := c.ctx.QueryDevice(); withinDevice(maxWR, maxSGE, a.MaxSRQWR, a.MaxSRQSGE) {
		bytes = attr.QueueBytes()
	}
	if errno := c.reserveQueue(bytes, queueWhat("an SRQ", maxWR, maxSGE)); errno != 0 {
		return errno
	}
	s, err := c.pds[r.PD].CreateSRQ(attr)
	if err != nil {
		c.releaseQueue(bytes)
		return c.errnoOf(err)
	}
	granted := s.Query()
	ring, fd, err := newSRQRing(uint32(granted.MaxWR), granted.MaxSGE)
	if err != nil {
		s.Destroy()
		c.releaseQueue(bytes)
		c.reason = err
		return errnoOf(err)
	}
	h := c.handle()
	c.srqs[h] = &connSRQ{srq: s, bytes: bytes, ring: ring}
	s.SetRecvRefill(c.recvRefill(ring, fmt.Sprintf("SRQ %d", h)))
	s.SetQueueWatch(ring.finish)
	c.owners.add(s, c, h)
	c.sendFD(fd)
	c.putSRQ(h, s)
	return 0
}

func (c *conn) putSRQ(h uint32, s *verbsapi.SRQ) {
	a := s.Query()
	c.w.put(wireSRQ{Handle: h, MaxWR: uint32(a.MaxWR), MaxSGE: uint32(a.MaxSGE), SRQLimit: uint32(a.Limit)})
}

// SRQ attribute mask bits (enum ibv_srq_attr_mask).
const (
	ibvSRQMaxWR = 1
	ibvSRQLimit = 2
)

// modifySRQ arms the limit. Resizing (IBV_SRQ_MAX_WR to another size) is
// not offered.
func (c *conn) modifySRQ(b []byte) syscall.Errno {
	var r wireModifySRQ
	if !decode(b, &r) || c.srqs[r.Handle] == nil || r.Mask&^(ibvSRQMaxWR|ibvSRQLimit) != 0 {
		return syscall.EINVAL
	}
	s := c.srqs[r.Handle].srq
	if r.Mask&ibvSRQMaxWR != 0 && r.MaxWR != uint32(s.Query().MaxWR) {
		return syscall.EOPNOTSUPP
	}
	if r.Mask&ibvSRQLimit != 0 {
		limit, ok := toInt(r.SRQLimit)
		if !ok {
			return syscall.EINVAL
		}
		return errnoOf(s.ModifyLimit(limit))
	}
	return 0
}

func (c *conn) querySRQ(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.srqs[h] == nil {
		return syscall.EINVAL
	}
	c.putSRQ(h, c.srqs[h].srq)
	return 0
}

func (c *conn) destroySRQ(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.srqs[h] == nil {
		return syscall.EINVAL
	}
	s := c.srqs[h]
	if err := s.srq.Destroy(); err != nil {
		return c.errnoOf(err)
	}
	s.unmapRing()
	c.owners.drop(s.srq)
	delete(c.srqs, h)
	c.releaseQueue(s.bytes)
	c.forgetAsync(elemSRQ, h)
	c.w.put(wireDestroySRQResp{EventsReported: s.events})
	return 0
}

func (c *conn) createAH(b []byte) syscall.Errno {
	var r wireCreateAH
	if !decode(b, &r) || c.pds[r.PD] == nil {
		return syscall.EINVAL
	}
	attr, ok := ahFromWire(&r.Attr)
	if !ok {
		return syscall.EINVAL
	}
	ah, err := c.pds[r.PD].CreateAH(attr)
	if err != nil {
		return c.errnoOf(err)
	}
	h := c.handle()
	c.ahs[h] = ah
	c.w.put(wireHandle{h})
	return 0
}

func (c *conn) destroyAH(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.ahs[h] == nil {
		return syscall.EINVAL
	}
	if err := c.ahs[h].Destroy(); err != nil {
		return c.errnoOf(err)
	}
	delete(c.ahs, h)
	return 0
}
