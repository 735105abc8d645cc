package cm

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// recvREQ takes a connection request.
func (m *Manager) recvREQ(now Time, from netip.Addr, tid uint64, r *packet.CMReq) {
	rk := remoteKey{r.LocalCommID, r.LocalCAGUID}
	if c := m.byRemote[rk]; c != nil {
		m.c.Duplicates++
		m.dupREQ(c)
		return
	}
	refuse := func(reason packet.CMRejReason) {
		m.c.Refused++
		// A REQ refused before it has a connection is answered from it
		// alone (cm_issue_rej): no local comm ID, the REQ's transaction.
		m.send(from, packet.CMAttrREJ, tid, &packet.CMRej{RemoteCommID: r.LocalCommID,
			MsgRejected: packet.CMMsgREQ, Reason: reason})
	}
	qk := remoteKey{r.LocalQPN, r.LocalCAGUID}
	if old := m.byQPN[qk]; old != nil {
		// The peer's QP is still connected to us or in timewait: it
		// must have lost that connection. Refuse the REQ and end the old
		// connection (cm_match_req).
		refuse(packet.RejStaleConn)
		m.staleDisconnect(now, old)
		return
	}
	l, ok := m.listeners[r.ServiceID]
	if !ok {
		refuse(packet.RejInvalidServiceID)
		return
	}
	if len(m.conns) >= m.cfg.MaxConns {
		refuse(packet.RejNoResources)
		return
	}
	c := &conn{id: m.newLocalID(), listen: l, peer: from, tid: tid,
		remoteID: r.LocalCommID, remoteGUID: r.LocalCAGUID, remoteQPN: r.LocalQPN,
		timeoutExp: r.Primary.LocalACKTimeout, maxRetries: int(r.MaxCMRetries)}
	// Our REP waits the peer's response timeout (cm_req_handler).
	c.connTimeout = convert(r.LocalCMResponseTimeout)
	m.conns[c.id] = c
	m.byRemote[rk], c.remoteIndexed = c, true
	m.byQPN[qk], c.qpnIndexed = c, true
	// rdma_cm arms a delayed MRA as it hands the REQ on (cma.c).
	c.state = StateMRAReqSent
	e := Event{Kind: EventReq, Conn: c.id, Listen: l, Peer: from, Req: *r}
	e.Req.PrivateData = own(r.PrivateData)
	m.emit(e)
}

// dupREQ answers a REQ seen before (cm_dup_req_handler).
func (m *Manager) dupREQ(c *conn) {
	switch c.state {
	case StateMRAReqSent:
		m.send(c.peer, packet.CMAttrMRA, c.tid, &packet.CMMra{LocalCommID: uint32(c.id),
			RemoteCommID: c.remoteID, MsgMRAed: packet.CMMsgREQ, ServiceTimeout: MRAServiceTime})
	case StateTimewait:
		m.send(c.peer, packet.CMAttrREJ, c.tid, &packet.CMRej{LocalCommID: uint32(c.id),
			RemoteCommID: c.remoteID, MsgRejected: packet.CMMsgREQ, Reason: packet.RejStaleConn})
	}
	// Otherwise the REP's retransmissions answer it.
}

// staleDisconnect ends a connection whose peer QP connects anew: a DREQ if
// it is established, nothing more if it is already going away.
func (m *Manager) staleDisconnect(now Time, c *conn) {
	if c.state == StateEstablished {
		// The consumer hears when the DREQ is answered
		// (EventDisconnected), as the kernel's does.
		m.sendDREQ(now, c, nil)
	}
}

// Accept answers a REQ (EventReq) with a REP. rep holds everything but the
// comm IDs and the CA GUID. The passive side's QP is in RTS; the answer is
// EventEstablished, EventRejected or, after the REQ's retries,
// EventUnreachable.
func (m *Manager) Accept(now Time, id ConnID, rep *packet.CMRep) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("accept %d: %w", id, ErrNoConn)
	}
	if c.state != StateReqRcvd && c.state != StateMRAReqSent {
		return fmt.Errorf("accept %d in %v: %w", id, c.state, ErrState)
	}
	if err := checkPrivate(rep.PrivateData, packet.CMRepPrivateLen); err != nil {
		return fmt.Errorf("accept %d: %w", id, err)
	}
	r := *rep
	r.LocalCommID, r.RemoteCommID, r.LocalCAGUID = uint32(c.id), c.remoteID, m.cfg.GUID
	c.localQPN = r.LocalQPN
	c.state = StateRepSent
	m.sendPending(now, c, packet.CMAttrREP, &r, c.connTimeout, c.maxRetries)
	return nil
}

// Reject refuses the peer's REQ (EventReq) or REP (EventRep) with reason
// and private data pd; the connection is gone.
func (m *Manager) Reject(now Time, id ConnID, reason packet.CMRejReason, pd []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("reject %d: %w", id, ErrNoConn)
	}
	var what uint8
	switch c.state {
	case StateReqRcvd, StateMRAReqSent:
		what = packet.CMMsgREQ
	case StateRepRcvd, StateMRARepSent:
		what = packet.CMMsgREP
	default:
		return fmt.Errorf("reject %d in %v: %w", id, c.state, ErrState)
	}
	if err := checkPrivate(pd, packet.CMRejPrivateLen); err != nil {
		return fmt.Errorf("reject %d: %w", id, err)
	}
	m.send(c.peer, packet.CMAttrREJ, c.tid, &packet.CMRej{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID,
		MsgRejected: what, Reason: reason, PrivateData: pd})
	m.free(c)
	return nil
}

// recvRTU completes the passive side's connection.
func (m *Manager) recvRTU(now Time, from netip.Addr, r *packet.CMRtu) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil || c.remoteID != r.LocalCommID || (c.state != StateRepSent && c.state != StateMRARepRcvd) {
		m.c.Unmatched++
		return
	}
	c.disarm()
	c.state = StateEstablished
	m.emit(Event{Kind: EventEstablished, Conn: c.id, Peer: c.peer, PrivateData: own(r.PrivateData)})
}

// Establish completes the passive side's connection without an RTU: the
// QP received a packet from the peer first (IBV_EVENT_COMM_EST), so the
// RTU was lost or is late (ib_cm_notify).
func (m *Manager) Establish(now Time, id ConnID) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("establish %d: %w", id, ErrNoConn)
	}
	if c.state != StateRepSent && c.state != StateMRARepRcvd {
		return fmt.Errorf("establish %d in %v: %w", id, c.state, ErrState)
	}
	c.disarm()
	c.state = StateEstablished
	m.emit(Event{Kind: EventEstablished, Conn: c.id, Peer: c.peer})
	return nil
}

// recvREJ takes a peer's refusal of our REQ or REP, or its rejection of
// something else on an established connection.
func (m *Manager) recvREJ(now Time, from netip.Addr, r *packet.CMRej) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil {
		m.c.Unmatched++
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd, StateRepSent, StateMRARepRcvd, StateRepRcvd, StateMRARepSent:
	default:
		m.c.Unmatched++
		return
	}
	if c.remoteID != 0 && r.LocalCommID != 0 && r.LocalCommID != c.remoteID {
		m.c.Unmatched++
		return
	}
	c.disarm()
	e := Event{Kind: EventRejected, Conn: c.id, Peer: c.peer, Reason: r.Reason, PrivateData: own(r.PrivateData)}
	if r.Reason == packet.RejStaleConn {
		// The peer still knows our QP: wait out timewait before it is
		// used again (cm_rej_handler).
		m.enterTimewait(now, c)
	} else {
		m.free(c)
	}
	m.emit(e)
}
