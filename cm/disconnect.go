package cm

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Disconnect ends an established connection: a DREQ if the peer has not
// asked (the answer is EventDisconnected), the DREP if it has
// (EventDisconnectRequest came). Either way the connection goes to
// timewait and ends with EventTimewaitExit. pd is the message's private
// data, which the kernel's rdma_cm never delivers.
func (m *Manager) Disconnect(now Time, id ConnID, pd []byte) error {
	c := m.conns[id]
	if c == nil {
		return fmt.Errorf("disconnect %d: %w", id, ErrNoConn)
	}
	switch c.state {
	case StateEstablished, StateRepSent, StateMRARepRcvd:
		// A passive side still waiting for the RTU may disconnect too.
		if err := checkPrivate(pd, packet.CMDreqPrivateLen); err != nil {
			return fmt.Errorf("disconnect %d: %w", id, err)
		}
		m.sendDREQ(now, c, pd)
	case StateDreqRcvd:
		if err := checkPrivate(pd, packet.CMDrepPrivateLen); err != nil {
			return fmt.Errorf("disconnect %d: %w", id, err)
		}
		m.sendDREP(c, pd)
		m.enterTimewait(now, c)
	default:
		return fmt.Errorf("disconnect %d in %v: %w", id, c.state, ErrState)
	}
	return nil
}

// sendDREQ sends a DREQ, retransmitted on the connection's timeout.
func (m *Manager) sendDREQ(now Time, c *conn, pd []byte) {
	c.state = StateDreqSent
	// A DREQ is its sender's transaction.
	c.tid = m.tid(c.id)
	m.sendPending(now, c, packet.CMAttrDREQ, &packet.CMDreq{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID,
		RemoteQPN: c.remoteQPN, PrivateData: pd}, c.connTimeout, c.maxRetries)
}

// sendDREP answers the peer's DREQ, in the peer's transaction.
func (m *Manager) sendDREP(c *conn, pd []byte) {
	m.send(c.peer, packet.CMAttrDREP, c.dreqTID, &packet.CMDrep{LocalCommID: uint32(c.id), RemoteCommID: c.remoteID, PrivateData: pd})
}

// recvDREQ takes the peer's disconnect request.
func (m *Manager) recvDREQ(now Time, from netip.Addr, tid uint64, r *packet.CMDreq) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil || c.remoteID != r.LocalCommID {
		// Nothing to disconnect: say it is done (cm_issue_drep), so the
		// peer stops asking.
		m.c.Unmatched++
		m.send(from, packet.CMAttrDREP, tid, &packet.CMDrep{LocalCommID: r.RemoteCommID, RemoteCommID: r.LocalCommID})
		return
	}
	if r.RemoteQPN != c.localQPN {
		// Not for our QP: dropped (cm_dreq_handler).
		m.c.Unmatched++
		return
	}
	c.dreqTID = tid
	switch c.state {
	case StateRepSent, StateMRARepRcvd, StateEstablished:
		c.disarm()
		c.state = StateDreqRcvd
		m.emit(Event{Kind: EventDisconnectRequest, Conn: c.id, Peer: c.peer, PrivateData: own(r.PrivateData)})
	case StateDreqSent:
		// Both sides disconnect at once: answer, and ours is answered
		// too as far as we care.
		c.disarm()
		m.sendDREP(c, nil)
		m.enterTimewait(now, c)
		m.emit(Event{Kind: EventDisconnected, Conn: c.id, Peer: c.peer})
	case StateTimewait:
		// Our DREP was lost.
		m.c.Duplicates++
		m.sendDREP(c, nil)
	case StateDreqRcvd:
		m.c.Duplicates++
	default:
		m.c.Unmatched++
	}
}

// recvDREP takes the answer to our DREQ.
func (m *Manager) recvDREP(now Time, from netip.Addr, r *packet.CMDrep) {
	c := m.lookup(r.RemoteCommID, from)
	if c == nil || c.remoteID != r.LocalCommID || c.state != StateDreqSent {
		m.c.Unmatched++
		return
	}
	c.disarm()
	m.enterTimewait(now, c)
	m.emit(Event{Kind: EventDisconnected, Conn: c.id, Peer: c.peer})
}

// Destroy forgets a connection its consumer no longer wants, telling the
// peer as the kernel does when an id is destroyed (cm_destroy_id): a REJ
// to a request still being set up, a DREQ (unanswered from here on) to an
// established connection. No more events come for it.
func (m *Manager) Destroy(now Time, id ConnID) {
	c := m.conns[id]
	if c == nil {
		return
	}
	switch c.state {
	case StateReqSent, StateMRAReqRcvd:
		m.send(c.peer, packet.CMAttrREJ, c.tid, &packet.CMRej{LocalCommID: uint32(c.id),
			MsgRejected: packet.CMMsgREQ, Reason: packet.RejTimeout})
	case StateReqRcvd, StateMRAReqSent, StateRepRcvd, StateMRARepSent:
		_ = m.Reject(now, id, packet.RejConsumerDefined, nil)
		return
	case StateRepSent, StateMRARepRcvd, StateEstablished, StateDreqSent, StateDreqRcvd:
		// The peer's QP stays known through timewait, so that it cannot
		// connect to a QP we may reuse before it has noticed.
		if c.state == StateDreqRcvd {
			m.sendDREP(c, nil)
		} else if c.state != StateDreqSent {
			m.sendDREQ(now, c, nil)
		}
		c.orphan = true
		m.enterTimewait(now, c)
		return
	case StateTimewait:
		c.orphan = true
		return
	}
	m.free(c)
}
