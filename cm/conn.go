package cm

import (
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// State is a connection's state, named as the kernel's enum ib_cm_state.
type State uint8

// The connection states. MRA_REQ_SENT and MRA_REP_SENT are the kernel's
// "delayed MRA" states: the consumer has the REQ (REP) and a duplicate is
// answered with an MRA.
const (
	StateIdle State = iota
	StateReqSent
	StateReqRcvd
	StateMRAReqSent
	StateMRAReqRcvd
	StateRepSent
	StateRepRcvd
	StateMRARepSent
	StateMRARepRcvd
	StateEstablished
	StateDreqSent
	StateDreqRcvd
	StateTimewait
	StateSIDRReqSent
	StateSIDRReqRcvd
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT",
	"REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT",
	"SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(?)"
}

// conn is one connection (or one SIDR exchange).
type conn struct {
	id     ConnID
	state  State
	listen ListenID
	peer   netip.Addr
	tid    uint64 // the REQ's (or SIDR_REQ's) transaction, then our DREQ's
	// dreqTID is the peer's DREQ's transaction, which our DREP answers in.
	dreqTID uint64

	remoteID   uint32 // the peer's comm ID, once known
	remoteGUID uint64
	localQPN   uint32
	serviceID  uint64 // a SIDR request's
	remoteQPN  uint32
	// remoteIndexed and qpnIndexed say the conn is in byRemote / byQPN.
	remoteIndexed, qpnIndexed bool
	sidrKey                   *sidrKey
	// orphan: the consumer destroyed the connection; it waits out
	// timewait without events.
	orphan bool

	// timeoutExp is the connection's ACK timeout exponent (timewait);
	// connTimeout and retries are the REQ's (DREQ retransmission).
	timeoutExp  uint8
	connTimeout Time
	maxRetries  int

	// The message being retransmitted, if any.
	timer   bool
	due     Time
	every   Time
	left    int // retransmissions left
	pending [packet.MADLen]byte
}

// sendPending builds the connection's retransmitted message into pending,
// queues it, and arms the timer: every span, retries times at most.
func (m *Manager) sendPending(now Time, c *conn, a packet.CMAttr, msg packet.CMMessage, every Time, retries int) {
	build(&c.pending, a, c.tid, msg)
	m.queue(c.peer, &c.pending)
	c.timer, c.due, c.every, c.left = true, now+every, every, retries
}

// disarm stops the retransmission.
func (c *conn) disarm() { c.timer = false }
