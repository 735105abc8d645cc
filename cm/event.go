package cm

import (
	"net/netip"
	"strconv"

	"github.com/softroce/softroce/packet"
)

// EventKind says what happened.
type EventKind uint8

// The events a consumer gets.
const (
	// EventReq: a REQ arrived for a listener. Req holds it; the consumer
	// answers with Accept or Reject.
	EventReq EventKind = iota + 1
	// EventRep: the peer accepted our REQ. Rep holds its REP; the consumer
	// moves its QP to RTR and RTS and calls Ready (or Reject).
	EventRep
	// EventEstablished: the passive side's connection is up (RTU, or
	// Establish).
	EventEstablished
	// EventRejected: the peer refused (Reason; PrivateData is the REJ's).
	EventRejected
	// EventUnreachable: the peer never answered our REQ, REP or SIDR_REQ
	// within the retries; the connection is gone.
	EventUnreachable
	// EventDisconnectRequest: the peer sent a DREQ; the consumer moves its
	// QP to the error state and calls Disconnect, which answers the DREP.
	EventDisconnectRequest
	// EventDisconnected: our DREQ was answered, or never was within the
	// retries; the connection is in timewait.
	EventDisconnected
	// EventTimewaitExit: timewait ended; the connection is gone and its
	// QP may be reused with the same peer.
	EventTimewaitExit
	// EventSIDRReq: a SIDR_REQ arrived for a listener; the consumer answers
	// with SIDRReply.
	EventSIDRReq
	// EventSIDRRep: the answer to our SIDR_REQ (SIDRRep; its Status says
	// whether it was accepted). The request is gone.
	EventSIDRRep
)

var eventNames = [...]string{
	EventReq: "REQ", EventRep: "REP", EventEstablished: "ESTABLISHED", EventRejected: "REJECTED",
	EventUnreachable: "UNREACHABLE", EventDisconnectRequest: "DISCONNECT_REQUEST",
	EventDisconnected: "DISCONNECTED", EventTimewaitExit: "TIMEWAIT_EXIT",
	EventSIDRReq: "SIDR_REQ", EventSIDRRep: "SIDR_REP",
}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is something the consumer must hear about. The messages' private
// data are the event's own copies.
type Event struct {
	Kind   EventKind
	Conn   ConnID
	Listen ListenID   // EventReq, EventSIDRReq
	Peer   netip.Addr // the QP 1 the messages come from
	// Req is the REQ (EventReq); Rep the REP (EventRep).
	Req packet.CMReq
	Rep packet.CMRep
	// SIDRReq and SIDRRep are the SIDR messages (EventSIDRReq, EventSIDRRep).
	SIDRReq packet.CMSidrReq
	SIDRRep packet.CMSidrRep
	// Reason is the REJ's reason (EventRejected).
	Reason packet.CMRejReason
	// PrivateData is the REJ's, RTU's or DREQ's private data.
	PrivateData []byte
	// TimedOut marks an EventDisconnected whose DREQ was never answered.
	TimedOut bool
}
