package cm

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// SIDRTimeout is how long a SIDR_REQ waits for its answer per try (rdma_cm:
// its response timeout); it is tried MaxCMRetries+1 times.
var SIDRTimeout = convert(ResponseTimeout)

// SIDRRequest asks the QP 1 at to which UD QP serves req's service ID. The
// manager fills in the request ID. The answer is an EventSIDRRep or, after
// the retries, EventUnreachable.
func (m *Manager) SIDRRequest(now Time, to netip.Addr, req *packet.CMSidrReq) (ConnID, error) {
	if err := checkPrivate(req.PrivateData, packet.CMSidrReqPrivateLen); err != nil {
		return 0, fmt.Errorf("SIDR request: %w", err)
	}
	if len(m.conns) >= m.cfg.MaxConns {
		return 0, fmt.Errorf("SIDR request: %w (%d)", ErrTooMany, m.cfg.MaxConns)
	}
	c := &conn{id: m.newLocalID(), state: StateSIDRReqSent, peer: to}
	c.tid = m.tid(c.id)
	r := *req
	r.RequestID = uint32(c.id)
	m.conns[c.id] = c
	m.sendPending(now, c, packet.CMAttrSIDRREQ, &r, SIDRTimeout, MaxCMRetries)
	return c.id, nil
}

// recvSIDRReq takes a SIDR request.
func (m *Manager) recvSIDRReq(now Time, from netip.Addr, tid uint64, r *packet.CMSidrReq) {
	key := sidrKey{r.RequestID, from}
	if _, dup := m.sidrs[key]; dup {
		// The consumer is deciding; its answer will come.
		m.c.Duplicates++
		return
	}
	refuse := func(status uint8) {
		m.c.Refused++
		m.send(from, packet.CMAttrSIDRREP, tid, &packet.CMSidrRep{RequestID: r.RequestID, Status: status, ServiceID: r.ServiceID})
	}
	l, ok := m.listeners[r.ServiceID]
	if !ok {
		// As kernel rxe answers when nothing listens (udaddy.pcap).
		refuse(packet.SIDRUnsupported)
		return
	}
	if len(m.conns) >= m.cfg.MaxConns {
		refuse(packet.SIDRReject)
		return
	}
	c := &conn{id: m.newLocalID(), state: StateSIDRReqRcvd, listen: l, peer: from, tid: tid, remoteID: r.RequestID,
		serviceID: r.ServiceID}
	c.sidrKey = &key
	m.conns[c.id] = c
	m.sidrs[key] = c
	e := Event{Kind: EventSIDRReq, Conn: c.id, Listen: l, Peer: from, SIDRReq: *r}
	e.SIDRReq.PrivateData = own(r.PrivateData)
	m.emit(e)
}

// SIDRReply answers a SIDR request (EventSIDRReq): rep holds the status,
// QPN, Q_Key and private data; the manager fills in the request and
// service IDs.
func (m *Manager) SIDRReply(now Time, id ConnID, rep *packet.CMSidrRep) error {
	c := m.conns[id]
	if c == nil || c.state != StateSIDRReqRcvd {
		return fmt.Errorf("SIDR reply %d: %w", id, ErrNoConn)
	}
	if err := checkPrivate(rep.PrivateData, packet.CMSidrRepPrivateLen); err != nil {
		return fmt.Errorf("SIDR reply %d: %w", id, err)
	}
	r := *rep
	r.RequestID, r.ServiceID = c.remoteID, c.serviceID
	m.send(c.peer, packet.CMAttrSIDRREP, c.tid, &r)
	m.free(c)
	return nil
}

// recvSIDRRep takes the answer to our SIDR request.
func (m *Manager) recvSIDRRep(now Time, from netip.Addr, r *packet.CMSidrRep) {
	c := m.lookup(r.RequestID, from)
	if c == nil || c.state != StateSIDRReqSent {
		m.c.Unmatched++
		return
	}
	m.free(c)
	e := Event{Kind: EventSIDRRep, Conn: c.id, Peer: from, SIDRRep: *r}
	e.SIDRRep.PrivateData = own(r.PrivateData)
	e.SIDRRep.Info = own(r.Info)
	m.emit(e)
}
