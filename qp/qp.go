package qp

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Config fixes what a QP is at creation (struct ibv_qp_init_attr plus what
// the device supplies).
type Config struct {
	QPN    uint32
	Type   Type
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // nil: the QP has its own receive queue
	// Capacities (struct ibv_qp_cap).
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
	// SigAll makes every send WR signaled.
	SigAll bool
	// Memory resolves keys within the QP's protection domain.
	Memory Memory
	// MaxMTU is the largest path MTU Modify accepts (the port's max MTU).
	MaxMTU MTU
	// SrcPort is the UDP source port of the QP's packets (rxe: 0xC000 | hash).
	SrcPort uint16
	// Counters, shared by the device's QPs; nil gives the QP its own.
	Counters *Counters
	// Events receives asynchronous events (QP fatal, SRQ limit, ...).
	Events func(Event)
	// Congestion is the device's congestion control (ECN notification and
	// reaction points), shared by its QPs; nil: none.
	Congestion *Congestion
	// FastRecovery recovers from loss sooner than kernel rxe does (see
	// recovery.go): the requester goes back N early when an answer is a few
	// measured round trips late, and the responder NAKs a gap again when
	// the requester's go-back-N came without the packet it lacks. Off, the
	// QP retransmits and NAKs exactly when kernel rxe's would (replay needs
	// that to match a capture).
	FastRecovery bool
	// Spares, when set, are QPs done with whose memory New builds this
	// one in, if there is one.
	Spares *Spares
}

// Outgoing is a packet a QP wants sent. Pkt.Payload aliases registered memory
// or the QP's own buffers and stays valid until the next call into the QP.
type Outgoing struct {
	Pkt packet.Packet
	// AV is the destination: the QP's address vector (RC, UC) or the work
	// request's address handle (UD).
	AV *AddressVector
	// SrcPort is the UDP source port.
	SrcPort uint16
}

// Incoming is a received packet, already checked for ICRC and addressed to
// this QP. Pkt.Payload aliases the receive buffer and is read before Receive
// returns.
type Incoming struct {
	Pkt      packet.Packet
	Src, Dst netip.Addr
	// IPHeader is the packet's IP header (20 or 40 bytes); a UD receive puts
	// it in the 40-byte GRH area at the head of the receive buffer.
	IPHeader []byte
}

// QP is a queue pair: a send queue with its requester and completer, and a
// receive queue (or SRQ) with its responder.
type QP struct {
	cfg      Config
	attr     Attr
	counters *Counters

	sq   sendQueue // req.go
	req  requester // req.go
	comp completer // comp.go
	rq   recvQueue // recvqueue.go
	resp responder // resp.go
	pace pacer     // pace.go: the reaction point's rate limiter
	np   notifier  // np.go: CNPs owed for CE-marked packets

	// watch, when set, hears how many WRs each queue holds whenever some
	// leave (SetQueueWatch).
	watch func(send, recv int)
}

// SetQueueWatch sets a function the QP calls whenever WRs leave its queues
// (retired, flushed, or dropped by a reset) with how many each queue
// still holds, before any completion for them is pushed: how a poster
// that keeps its own count of free slots (the drop-in's rings) learns
// that room was made, as a provider learns it from its CQEs. nil removes
// it.
func (q *QP) SetQueueWatch(f func(send, recv int)) { q.watch = f }

// noteRetired tells the watch, if any, how full the queues are now.
func (q *QP) noteRetired() {
	if q.watch != nil {
		q.watch(q.sq.len(), q.rq.ring.n)
	}
}

// New creates a QP in the RESET state.
func New(cfg Config) (*QP, error) {
	if cfg.Type > UD {
		return nil, fmt.Errorf("create qp %d: unknown type %d", cfg.QPN, cfg.Type)
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("create qp %d: send and receive CQs are required", cfg.QPN)
	}
	if cfg.Memory == nil {
		return nil, fmt.Errorf("create qp %d: no memory", cfg.QPN)
	}
	if cfg.MaxMTU == 0 {
		cfg.MaxMTU = 4096
	}
	if cfg.MaxSendSGE < 1 {
		cfg.MaxSendSGE = 1
	}
	if cfg.MaxRecvSGE < 1 {
		cfg.MaxRecvSGE = 1
	}
	var q *QP
	var old storage
	if cfg.Spares != nil {
		q = cfg.Spares.take()
	}
	if q != nil {
		old = q.storage()
		*q = QP{cfg: cfg, counters: cfg.Counters}
	} else {
		q = &QP{cfg: cfg, counters: cfg.Counters}
	}
	if q.counters == nil {
		q.counters = new(Counters)
	}
	q.attr.State = Reset
	q.attr.PathMTU = 256
	q.initSend(&old)
	q.initRecv(&old)
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.cfg.QPN }

// Type returns the QP's transport type.
func (q *QP) Type() Type { return q.cfg.Type }

// State returns the QP's state.
func (q *QP) State() State { return q.attr.State }

// Query returns the QP's attributes.
func (q *QP) Query() Attr { return q.attr }

// Config returns the QP's creation parameters.
func (q *QP) Config() Config { return q.cfg }

// Counters returns the counters the QP updates.
func (q *QP) Counters() *Counters { return q.counters }

func (q *QP) event(t EventType) {
	if q.cfg.Events != nil {
		q.cfg.Events(Event{Type: t, QPN: q.cfg.QPN})
	}
}

// toError moves the QP to ERR and flushes every outstanding work request
// with WR_FLUSH_ERR, raising ev (if non-zero) first.
func (q *QP) toError() {
	if q.attr.State == Err {
		return
	}
	q.attr.State = Err
	q.flushSend()
	q.flushRecv()
}

// complete pushes a completion; on CQ overflow the QP goes to ERR.
func (q *QP) complete(cq *CQ, wc *WC, solicited bool) {
	wc.QPN = q.cfg.QPN
	if !cq.push(wc, solicited) {
		q.event(EventQPFatal)
		q.toError()
	}
}

// Receive hands the QP a packet addressed to it. Responses (ACK, atomic ACK,
// read responses) go to the completer, requests to the responder. A packet
// whose opcode does not belong to the QP's transport is dropped and counted.
func (q *QP) Receive(now Time, in *Incoming) {
	q.counters.RcvdPkts++
	info := in.Pkt.Info()
	if !transportMatches(q.cfg.Type, info.Transport) {
		q.counters.DropBadOpcode++
		return
	}
	q.npReceive(now, in)
	switch info.Kind {
	case packet.KindAck, packet.KindAtomicAck, packet.KindReadResponse:
		q.compReceive(now, in)
	default:
		q.respReceive(now, in)
	}
}

func transportMatches(t Type, tr packet.Transport) bool {
	switch t {
	case RC:
		return tr == packet.TransportRC
	case UC:
		return tr == packet.TransportUC
	case UD:
		return tr == packet.TransportUD
	}
	return false
}

// Transmit fills out with the next packet the QP wants sent and reports
// whether there was one. Responder output (ACKs, NAKs, read and atomic
// responses) goes before new requests, as an RNIC's responder does not wait
// behind its own requester.
func (q *QP) Transmit(now Time, out *Outgoing) bool {
	if q.npTransmit(out) || q.respTransmit(now, out) || q.reqTransmit(now, out) {
		q.counters.SentPkts++
		return true
	}
	return false
}

// TransmitAck is Transmit for a QP being destroyed: it returns only the
// acknowledgements its responder still owes the peer (ACK, NAK, atomic ACK),
// none of which reads memory, and stops at a READ response. A completion the
// program has seen may be ahead of the ACK that answers it (ACKs go out at
// the next Transmit); a real NIC has sent that ACK by then, so a QP
// destroyed right after its last completion must still send it, or the
// peer retries into a QP that is gone and fails with RETRY_EXC_ERR.
func (q *QP) TransmitAck(now Time, out *Outgoing) bool {
	if !q.AckPending() || !q.respTransmit(now, out) {
		return false
	}
	q.counters.SentPkts++
	return true
}

// AckPending reports whether TransmitAck has a packet to return.
func (q *QP) AckPending() bool {
	r := &q.resp
	return r.outN > 0 && r.out[r.outHead].kind != outRead && q.attr.State != Reset
}

// Outstanding returns how many send WRs the QP holds (posted, not yet
// retired by a completion or a flush) and how many receive WRs wait in
// its own receive queue (none when it uses an SRQ).
func (q *QP) Outstanding() (send, recv int) { return q.sq.len(), q.rq.ring.n }

// Pending reports whether Transmit may return a packet now. It can be true
// once when the next work request is about to fail locally (a bad lkey, a
// failed LOCAL_INV): Transmit then completes it in error and returns false,
// and Pending turns false.
func (q *QP) Pending(now Time) bool { return q.np.pending || q.respPending() || q.reqPending(now) }

// Resending reports whether the requester is retrying: going back after a
// timeout, a NAK or an RNR NAK, up to the newest PSN it had sent. A device
// uses it to keep QPs that retry from crowding out the ones making
// progress (rxe has no such notion; softroce's scheduler serves them at a
// bounded share).
func (q *QP) Resending() bool {
	return q.req.needRetry || q.req.rnrWait || psnDiff(q.req.psn, q.req.maxPSN) < 0
}

// RNRRetryDue reports whether the requester waits out an RNR NAK whose
// timer has run out at now: its next Tick lets it send again. A device that
// bounds how many RNR retries it starts (rxe.Config.RNRRetryRate) may
// hold the QP a little longer first; the timer is a minimum wait.
func (q *QP) RNRRetryDue(now Time) bool { return q.req.rnrWait && now >= q.req.rnrUntil }

// Tick runs the QP's timers (retransmit, RNR wait, rate control) at time
// now.
func (q *QP) Tick(now Time) {
	q.compTick(now)
	q.paceTick(now)
}

// Deadline returns when the QP next needs Tick, or Never: a timer, or the
// paced slot of a request packet waiting for it.
func (q *QP) Deadline() Time { return min(q.compDeadline(), q.paceDeadline()) }
