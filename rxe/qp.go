package rxe

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/qp"
)

// QPN allocation, as rxe's pool: index 16 goes to the GSI QP (which answers
// as QPN 1), so user QPs start at 17 and are handed out cyclically up to
// 2^20, skipping numbers in use.
const (
	firstQPN = 17
	lastQPN  = 1 << 20
)

// QPCap is struct ibv_qp_cap: the QP's queue capacities.
type QPCap struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
}

// QPInit is struct ibv_qp_init_attr.
type QPInit struct {
	Type   qp.Type
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // nil: the QP has its own receive queue
	Cap    QPCap
	// SigAll makes every send WR signaled.
	SigAll bool
}

// QP is a queue pair on the device: the engine's QP plus what the device
// keeps for it (its PD, CQs, UDP source port and the addresses the receive
// path checks).
type QP struct {
	d      *Device
	q      *qp.QP
	pd     *PD
	init   QPInit
	qpn    uint32
	handle uint32
	sport  uint16
	// From the last Modify that set them: the AV's addresses, unmapped (for
	// rxe's check_addr) and the UD QKey.
	local, remote netip.Addr
	qkey          uint32
	queued        bool // in the device's ready list
	listIdx       int  // position in qpList
	dlIdx         int  // position in the device's timers, -1: not there
	dlAt          qp.Time
	rnrSlot       qp.Time // its RNR retry waits for this slot (0: none booked)
	dead          bool
	flushAcks     bool // dead, with acknowledgements still to send (DestroyQP)
	ctx           any
	mem           memory // the PD's memory as this QP sees it (type 2 windows)
}

// grantSendCaps sizes the send queue's WQEs as rxe does (rxe_init_sq): a
// WQE holds max(max_send_sge SGEs, max_inline_data bytes), and both are
// granted whatever that size allows. A program asking for one SGE may so
// send 16 bytes inline, as rdma_xclient does on kernel rxe.
func grantSendCaps(c *QPCap) {
	const sgeSize = 16 // sizeof(struct ib_sge)
	wqe := max(c.MaxSendSGE*sgeSize, c.MaxInline)
	c.MaxInline = min(wqe, MaxInline)
	c.MaxSendSGE = max(c.MaxSendSGE, min(wqe/sgeSize, MaxSGE))
}

// CreateQP creates a queue pair in pd (ibv_create_qp). Capacities are
// checked against the device limits; the QP starts in RESET.
func (d *Device) CreateQP(pd *PD, init QPInit) (*QP, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	if err := d.checkQPInit(pd, &init); err != nil {
		return nil, fmt.Errorf("create %s qp in pd %d: %w", init.Type, pd.handle, err)
	}
	if d.qps.len() >= MaxQP {
		return nil, fmt.Errorf("create %s qp in pd %d: %w", init.Type, pd.handle, ErrLimit)
	}
	grantSendCaps(&init.Cap)
	qpn := d.allocQPN()
	x := &QP{d: d, pd: pd, init: init, qpn: qpn, handle: d.nextHandle(), sport: createSrcPort(qpn), dlIdx: -1}
	x.mem = memory{d: d, pd: pd, qp: x}
	var srq *qp.SRQ
	if init.SRQ != nil {
		srq = init.SRQ.srq
	}
	eq, err := qp.New(qp.Config{
		QPN: qpn, Type: init.Type, SendCQ: init.SendCQ.cq, RecvCQ: init.RecvCQ.cq, SRQ: srq,
		MaxSendWR: init.Cap.MaxSendWR, MaxRecvWR: init.Cap.MaxRecvWR,
		MaxSendSGE: init.Cap.MaxSendSGE, MaxRecvSGE: init.Cap.MaxRecvSGE, MaxInline: init.Cap.MaxInline,
		SigAll: init.SigAll, Memory: &x.mem, MaxMTU: d.port.MaxMTU, SrcPort: x.sport,
		Counters: &d.qpCnt, Congestion: &d.cc.Engine, FastRecovery: d.fastRecovery, Spares: d.qpSpares,
		Events: func(e qp.Event) { d.raise(AsyncEvent{Type: e.Type, QP: x}) },
	})
	if err != nil {
		return nil, fmt.Errorf("create %s qp in pd %d: %w", init.Type, pd.handle, err)
	}
	x.q = eq
	d.qps.put(qpn, x)
	x.listIdx = len(d.qpList)
	d.qpList = append(d.qpList, x)
	pd.users++
	init.SendCQ.users++
	init.RecvCQ.users++
	if init.SRQ != nil {
		init.SRQ.users++
	}
	return x, nil
}

func (d *Device) checkQPInit(pd *PD, init *QPInit) error {
	if init.Type > qp.UD {
		return fmt.Errorf("unknown QP type %d: %w", init.Type, ErrInvalid)
	}
	if err := d.checkCQ(init.SendCQ); err != nil {
		return fmt.Errorf("send %w", err)
	}
	if err := d.checkCQ(init.RecvCQ); err != nil {
		return fmt.Errorf("recv %w", err)
	}
	if s := init.SRQ; s != nil {
		switch {
		case s.d != d:
			return fmt.Errorf("srq %d: %w", s.handle, ErrWrongDevice)
		case s.dead:
			return fmt.Errorf("srq %d: %w", s.handle, ErrDestroyed)
		case s.pd != pd:
			return fmt.Errorf("srq %d is in another pd: %w", s.handle, ErrInvalid)
		}
	}
	c := &init.Cap
	switch {
	case c.MaxSendWR < 0 || c.MaxSendWR > MaxQPWR:
		return fmt.Errorf("max_send_wr %d outside 0..%d: %w", c.MaxSendWR, MaxQPWR, ErrInvalid)
	case c.MaxRecvWR < 0 || c.MaxRecvWR > MaxQPWR:
		return fmt.Errorf("max_recv_wr %d outside 0..%d: %w", c.MaxRecvWR, MaxQPWR, ErrInvalid)
	case c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE:
		return fmt.Errorf("max_send_sge %d outside 0..%d: %w", c.MaxSendSGE, MaxSGE, ErrInvalid)
	case c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE:
		return fmt.Errorf("max_recv_sge %d outside 0..%d: %w", c.MaxRecvSGE, MaxSGE, ErrInvalid)
	case c.MaxInline < 0 || c.MaxInline > MaxInline:
		return fmt.Errorf("max_inline_data %d outside 0..%d: %w", c.MaxInline, MaxInline, ErrInvalid)
	}
	return nil
}

// allocQPN returns the next free QPN, cyclically. Called with mu held and
// fewer than MaxQP QPs live.
func (d *Device) allocQPN() uint32 {
	for {
		n := d.qpNext
		d.qpNext++
		if d.qpNext > lastQPN {
			d.qpNext = firstQPN
		}
		if d.qps.get(n) == nil {
			return n
		}
	}
}

// QPN returns the QP number.
func (x *QP) QPN() uint32 { return x.qpn }

// Handle returns the QP's handle, unique among the device's objects.
func (x *QP) Handle() uint32 { return x.handle }

// Type returns the QP's transport type.
func (x *QP) Type() qp.Type { return x.init.Type }

// Init returns the creation attributes.
func (x *QP) Init() QPInit { return x.init }

// PD returns the QP's protection domain.
func (x *QP) PD() *PD { return x.pd }

// SetContext attaches a caller value to the QP; Context returns it.
func (x *QP) SetContext(v any) { x.d.mu.Lock(); x.ctx = v; x.d.mu.Unlock() }

// Context returns the value SetContext attached.
func (x *QP) Context() any { x.d.mu.Lock(); defer x.d.mu.Unlock(); return x.ctx }

// SrcPort returns the UDP source port the QP's packets carry (before any
// FixedSrcPort override).
func (x *QP) SrcPort() uint16 {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return x.sport
}

// State returns the QP's state.
func (x *QP) State() qp.State {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return x.q.State()
}

// Query returns the QP's attributes (ibv_query_qp).
func (x *QP) Query() qp.Attr {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return x.q.Query()
}

// Modify changes the QP's attributes and state (ibv_modify_qp). An address
// vector is checked against the GID table; setting one gives the QP rxe's
// UDP source port for the flow, rdma_get_udp_sport(flow label, QPN, dest QPN).
func (x *QP) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	d := x.d
	d.mu.Lock()
	err := x.modifyLocked(attr, mask)
	d.mu.Unlock()
	d.notify()
	return err
}

func (x *QP) modifyLocked(attr *qp.Attr, mask qp.AttrMask) error {
	d := x.d
	if x.dead {
		return fmt.Errorf("modify qp %d: %w", x.qpn, ErrDestroyed)
	}
	if mask&qp.AttrAV != 0 {
		if err := d.checkAV(&attr.AV); err != nil {
			return fmt.Errorf("modify qp %d: %w", x.qpn, err)
		}
	}
	if mask&qp.AttrPort != 0 && attr.Port != 1 {
		return fmt.Errorf("modify qp %d: port %d: only port 1 exists: %w", x.qpn, attr.Port, ErrInvalid)
	}
	if mask&qp.AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return fmt.Errorf("modify qp %d: pkey index %d: the table has one entry: %w", x.qpn, attr.PKeyIndex, ErrInvalid)
	}
	if err := x.q.Modify(attr, mask); err != nil {
		return err
	}
	a := x.q.Query()
	if mask&qp.AttrAV != 0 {
		x.remote = a.AV.DGID.Unmap()
		x.local = d.gidIPs[a.AV.SGIDIndex]
		if x.init.Type != qp.UD {
			x.sport = UDPSourcePort(a.AV.FlowLabel, x.qpn, a.DestQPN)
		}
	}
	x.qkey = a.QKey
	d.markReady(x)
	d.noteDeadline(x)
	return nil
}

// PostSend queues a send work request (ibv_post_send); the WR is copied.
func (x *QP) PostSend(wr *qp.SendWR) error {
	d := x.d
	d.mu.Lock()
	if x.dead {
		d.mu.Unlock()
		return fmt.Errorf("post send on qp %d: %w", x.qpn, ErrDestroyed)
	}
	err := x.q.PostSend(wr)
	if err == nil {
		d.markReady(x)
	}
	d.mu.Unlock()
	if err == nil {
		d.sendPosted()
	}
	return err
}

// Outstanding returns how many send WRs the QP holds, not yet retired,
// and how many receive WRs wait in its receive queue.
func (x *QP) Outstanding() (send, recv int) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return x.q.Outstanding()
}

// SetRecvRefill sets the function the QP calls, under the device's lock,
// when it finds its receive queue empty: it posts WRs waiting elsewhere
// with post (see qp.QP.SetRecvRefill). It must not call the device.
func (x *QP) SetRecvRefill(f func(post func(*qp.RecvWR) error)) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	x.q.SetRecvRefill(f)
}

// SetQueueWatch sets the function the QP calls, under the device's lock,
// whenever WRs leave its queues (see qp.QP.SetQueueWatch). It must not
// call the device.
func (x *QP) SetQueueWatch(f func(send, recv int)) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	x.q.SetQueueWatch(f)
}

// RefillRecv calls the refill function now (see SetRecvRefill).
func (x *QP) RefillRecv() {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if !x.dead {
		x.q.RefillRecv()
	}
}

// PostRecv queues a receive work request (ibv_post_recv); the WR is copied.
func (x *QP) PostRecv(wr *qp.RecvWR) error {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.dead {
		return fmt.Errorf("post recv on qp %d: %w", x.qpn, ErrDestroyed)
	}
	// A receive can unblock nothing on the send side: no output to schedule.
	return x.q.PostRecv(wr)
}

// Discard hands the engines of the device's QPs to Config.QPSpares, for
// another device's QPs to be built in: the end of a simulated run, whose
// devices are dropped whole. Nothing may use the device, or anything it
// made, afterwards; its QPs no longer have an engine, so a call that
// reaches one fails loudly rather than touching a later run's QP.
// Destroyed QPs are left alone (acknowledgements may still have been on
// their way out). Without QPSpares it does nothing.
func (d *Device) Discard() {
	if d.qpSpares == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.qpList {
		d.qpSpares.Put(x.q)
		x.q = nil
	}
	d.qpList = nil
}

// DestroyQP destroys a queue pair. Outstanding work is dropped without
// completions, as ibv_destroy_qp does.
func (d *Device) DestroyQP(x *QP) error {
	flush, err := d.destroyQP(x)
	if flush {
		d.notify()
	}
	return err
}

// destroyQP is DestroyQP under the lock; flush reports that acknowledgements
// are still to go out.
func (d *Device) destroyQP(x *QP) (flush bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case x == nil:
		return false, fmt.Errorf("destroy qp: nil: %w", ErrInvalid)
	case x.d != d:
		return false, fmt.Errorf("destroy qp %d: %w", x.qpn, ErrWrongDevice)
	case x.dead:
		return false, fmt.Errorf("destroy qp %d: %w", x.qpn, ErrDestroyed)
	}
	x.dead = true
	if x.q.AckPending() {
		// Acknowledgements owed for what the program has already seen
		// complete still go out (qp.QP.TransmitAck); nothing else does.
		x.flushAcks = true
		d.markReady(x)
	}
	d.qps.remove(x.qpn)
	d.dropDeadline(x)
	last := d.qpList[len(d.qpList)-1]
	d.qpList[x.listIdx] = last
	last.listIdx = x.listIdx
	d.qpList[len(d.qpList)-1] = nil
	d.qpList = d.qpList[:len(d.qpList)-1]
	x.pd.users--
	x.init.SendCQ.users--
	x.init.RecvCQ.users--
	if x.init.SRQ != nil {
		x.init.SRQ.users--
	}
	return x.flushAcks, nil
}
