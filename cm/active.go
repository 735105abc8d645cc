package cm

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Values the kernel's rdma_cm puts in every REQ on RoCE (cma.c): the CM
// response timeout (4096 ms), the CM retries, the packet lifetime (1024
// ms), and the service timeout of its delayed MRAs.
const (
	ResponseTimeout = 20
	MaxCMRetries    = 15
	PacketLifetime  = 18
	MRAServiceTime  = 24
)

// Connect sends a REQ to the QP 1 at to and returns the connection. req
// holds everything the REQ says but the local comm ID and CA GUID, which
// the manager fills in. The answer is an EventRep, EventRejected or, after
// the REQ's retries, EventUnreachable.
func (m *Manager) Connect(now Time, to netip.Addr, req *packet.CMReq) (ConnID, error) {
	if err := checkPrivate(req.PrivateData, packet.CMReqPrivateLen); err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	if len(m.conns) >= m.cfg.MaxConns {
		return 0, fmt.Errorf("connect: %w (%d)", ErrTooMany, m.cfg.MaxConns)
	}
	c := &conn{id: m.newLocalID(), state: StateReqSent, peer: to, localQPN: req.LocalQPN}
	c.tid = m.tid(c.id)
	r := *req
	r.LocalCommID, r.LocalCAGUID = uint32(c.id), m.cfg.GUID
	c.timeoutExp = r.Primary.LocalACKTimeout
	// The peer has its response timeout to answer, and the REQ and the
	// answer each take a packet lifetime (cm.c: cm_send_req).
	c.connTimeout = 2*convert(lifetime(r.Primary.LocalACKTimeout)) + convert(r.RemoteCMResponseTimeout)
	c.maxRetries = int(r.MaxCMRetries)
	m.conns[c.id] = c
	m.sendPending(now, c, packet.CMAttrREQ, &r, c.connTimeout, c.maxRetries)
	return c.id, nil
}

// lifetime is the packet lifetime a local ACK timeout was formed from
// (cm_ack_timeout adds one).
func lifetime(ackTimeout uint8) uint8 {
	if ackTimeout == 0 {
		return 0
	}
	return ackTimeout - 1
}

// recvREP takes the answer to our REQ.
func (m *Manager) recvREP(now Time, from netip.Addr, r *packet.CMRep) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil {
		m.c.Unmatched++
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
	case StateMRARepSent:
		// The REP again: our consumer is slow; tell the peer to wait.
		m.c.Duplicates++
		m.send(c.peer, packet.CMAttrMRA, c.tid, &packet.CMMra{LocalCommID: uint32(c.id),
			RemoteCommID: c.remoteID, MsgMRAed: packet.CMMsgREP, ServiceTimeout: MRAServiceTime})
		return
	case StateEstablished:
		// Our RTU was lost.
		m.c.Duplicates++
		m.send(c.peer, packet.CMAttrRTU, c.tid, &packet.CMRtu{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID})
		return
	default:
		m.c.Unmatched++
		return
	}
	key := remoteKey{r.LocalQPN, r.LocalCAGUID}
	if old := m.byQPN[key]; old != nil && old != c {
		// The peer's QP is still connected to us, or in timewait: the
		// REP is stale (cm_rep_handler). Refuse it; our REQ's
		// retransmissions carry on.
		m.c.Refused++
		m.send(c.peer, packet.CMAttrREJ, c.tid, &packet.CMRej{LocalCommID: uint32(c.id),
			RemoteCommID: r.LocalCommID, MsgRejected: packet.CMMsgREP, Reason: packet.RejStaleConn})
		return
	}
	c.disarm()
	c.remoteID, c.remoteGUID, c.remoteQPN = r.LocalCommID, r.LocalCAGUID, r.LocalQPN
	m.byQPN[key], c.qpnIndexed = c, true
	// rdma_cm arms a delayed MRA as it hands the REP on (cma.c).
	c.state = StateMRARepSent
	e := Event{Kind: EventRep, Conn: c.id, Peer: c.peer, Rep: *r}
	e.Rep.PrivateData = own(r.PrivateData)
	m.emit(e)
}

// Ready answers the peer's REP with an RTU: the active side's QP is in
// RTS and the connection is established. pd is the RTU's private data.
func (m *Manager) Ready(now Time, id ConnID, pd []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("ready %d: %w", id, ErrNoConn)
	}
	if c.state != StateRepRcvd && c.state != StateMRARepSent {
		return fmt.Errorf("ready %d in %v: %w", id, c.state, ErrState)
	}
	if err := checkPrivate(pd, packet.CMRtuPrivateLen); err != nil {
		return fmt.Errorf("ready %d: %w", id, err)
	}
	c.state = StateEstablished
	m.send(c.peer, packet.CMAttrRTU, c.tid, &packet.CMRtu{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: pd})
	return nil
}

// recvMRA takes a peer's "wait longer" for our REQ or REP.
func (m *Manager) recvMRA(now Time, from netip.Addr, r *packet.CMMra) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil {
		m.c.Unmatched++
		return
	}
	switch {
	case r.MsgMRAed == packet.CMMsgREQ && c.state == StateReqSent:
		c.state = StateMRAReqRcvd
	case r.MsgMRAed == packet.CMMsgREP && c.state == StateRepSent:
		c.state = StateMRARepRcvd
	default:
		m.c.Unmatched++
		return
	}
	// The peer answers within its service timeout plus a packet lifetime
	// (cm_mra_handler); the retries left stay.
	c.every = convert(r.ServiceTimeout) + convert(lifetime(c.timeoutExp))
	c.due = now + c.every
}
