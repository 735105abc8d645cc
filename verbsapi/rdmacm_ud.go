package verbsapi

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// UD endpoints through the connection manager's service ID resolution
// (SIDR), as rdma_cm's UDP port space: a UD QP listens on an rdma_cm UDP
// port (ListenUD), a peer resolves it (ResolveUD) and learns its QPN and
// Q_Key, with no connection kept by either side.

// UDQKey is rdma_cm's UD Q_Key (RDMA_UDP_QKEY), which a listener's QP must
// use (ModifyToInit with ConnOptions.QKey).
const UDQKey = 0x01234567

// UDPeer is a remote UD QP as SIDR resolved it.
type UDPeer struct {
	Addr      netip.AddrPort
	QPN, QKey uint32
	// PrivateData is the SIDR_REP's.
	PrivateData []byte
}

// ResolveUD asks who serves rdma_cm UDP port to.Port() at to.Addr(), as
// rdma_connect on a UDP id: the answer is the peer's QPN and Q_Key, or an
// error (ErrRejected with the SIDR status, ErrUnreachable).
func (c *Context) ResolveUD(ctx context.Context, to netip.AddrPort, pd []byte) (UDPeer, error) {
	if err := c.check("resolve UD"); err != nil {
		return UDPeer{}, err
	}
	if len(pd) > packet.CMSidrReqPrivateLen-packet.CMAHeaderLen {
		return UDPeer{}, fmt.Errorf("resolve %s: %d bytes of private data, at most %d: %w", to, len(pd),
			packet.CMSidrReqPrivateLen-packet.CMAHeaderLen, ErrInvalid)
	}
	sgid, err := c.sourceGID(to.Addr())
	if err != nil {
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, err)
	}
	gid, err := c.QueryGID(1, sgid)
	if err != nil {
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, err)
	}
	r := routerFor(c.dev)
	sport, ok := r.port(0)
	if !ok {
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, ErrPortInUse)
	}
	defer r.release(sport)
	buf := make([]byte, packet.CMAHeaderLen+len(pd))
	h := packet.CMAHeader{SrcPort: sport, Src: gid.Unmap(), Dst: to.Addr()}
	if err := h.Encode(buf); err != nil {
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, err)
	}
	copy(buf[packet.CMAHeaderLen:], pd)
	req := packet.CMSidrReq{PKey: 0xFFFF, ServiceID: packet.ServiceID(packet.PortSpaceUDP, to.Port()), PrivateData: buf}
	sink := &cmSink{ch: make(chan cm.Event, 1), done: make(chan struct{})}
	port := c.CMPort()
	id, err := port.Track(func(m *cm.Manager, now cm.Time) (cm.ConnID, error) {
		return m.SIDRRequest(now, to.Addr().Unmap(), &req)
	}, sink.put)
	if err != nil {
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, err)
	}
	select {
	case <-ctx.Done():
		port.Untrack(id)
		port.Do(func(m *cm.Manager, now cm.Time) { m.Destroy(now, id) })
		return UDPeer{}, fmt.Errorf("resolve %s: %w", to, ctx.Err())
	case e := <-sink.ch:
		switch {
		case e.Kind == cm.EventSIDRRep && e.SIDRRep.Status == packet.SIDRAccept:
			return UDPeer{Addr: to, QPN: e.SIDRRep.QPN, QKey: e.SIDRRep.QKey, PrivateData: e.SIDRRep.PrivateData}, nil
		case e.Kind == cm.EventSIDRRep:
			return UDPeer{}, fmt.Errorf("resolve %s: SIDR status %d: %w", to, e.SIDRRep.Status, ErrRejected)
		default:
			return UDPeer{}, fmt.Errorf("resolve %s: %w", to, eventErr(e))
		}
	}
}

// UDListener answers SIDR requests for an rdma_cm UDP port.
type UDListener struct {
	c    *Context
	id   cm.ListenID
	port uint16
	reqs chan cm.Event
}

// ListenUD listens on rdma_cm UDP port port (udaddy's 7174, say).
func (c *Context) ListenUD(port uint16) (*UDListener, error) {
	if err := c.check("listen UD"); err != nil {
		return nil, err
	}
	r := routerFor(c.dev)
	if port == 0 {
		return nil, fmt.Errorf("listen on rdma_cm UDP port 0: name a port: %w", ErrInvalid)
	}
	if _, ok := r.port(port); !ok {
		return nil, fmt.Errorf("listen on rdma_cm UDP port %d: %w", port, ErrPortInUse)
	}
	l := &UDListener{c: c, port: port, reqs: make(chan cm.Event, cmBacklog)}
	id, err := c.CMPort().Listen(packet.ServiceID(packet.PortSpaceUDP, port), func(e cm.Event) {
		select {
		case l.reqs <- e:
		default:
			r.refuse(e)
		}
	})
	if err != nil {
		r.release(port)
		return nil, err
	}
	l.id = id
	return l, nil
}

// UDRequest is a peer's SIDR request.
type UDRequest struct {
	l  *UDListener
	id cm.ConnID
	// Peer is the address the request came from; PrivateData follows
	// rdma_cm's header (180 bytes).
	Peer        netip.AddrPort
	PrivateData []byte
}

// Accept returns the next SIDR request.
func (l *UDListener) Accept(ctx context.Context) (*UDRequest, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-l.reqs:
			var h packet.CMAHeader
			if err := h.Decode(e.SIDRReq.PrivateData); err != nil {
				l.c.CMPort().Do(func(m *cm.Manager, now cm.Time) {
					_ = m.SIDRReply(now, e.Conn, &packet.CMSidrRep{Status: packet.SIDRReject})
				})
				continue
			}
			return &UDRequest{l: l, id: e.Conn, Peer: netip.AddrPortFrom(h.Src, h.SrcPort),
				PrivateData: e.SIDRReq.PrivateData[packet.CMAHeaderLen:]}, nil
		}
	}
}

// Reply answers with q (a UD QP using UDQKey) and private data pd.
func (r *UDRequest) Reply(q *QP, pd []byte) error {
	if q.Type() != UD {
		return fmt.Errorf("reply to %s: qp %d is %v, not UD: %w", r.Peer, q.QPN(), q.Type(), ErrInvalid)
	}
	var err error
	r.l.c.CMPort().Do(func(m *cm.Manager, now cm.Time) {
		err = m.SIDRReply(now, r.id, &packet.CMSidrRep{Status: packet.SIDRAccept, QPN: q.QPN(), QKey: UDQKey, PrivateData: pd})
	})
	if err != nil {
		return fmt.Errorf("reply to %s: %w", r.Peer, err)
	}
	return nil
}

// Close stops listening.
func (l *UDListener) Close() error {
	l.c.CMPort().Unlisten(l.id)
	routerFor(l.c.dev).release(l.port)
	return nil
}
