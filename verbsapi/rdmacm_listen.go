package verbsapi

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// CMListener takes connection requests on an rdma_cm TCP port of a device
// (rdma_bind_addr and rdma_listen on any address).
type CMListener struct {
	ctx  *Context
	r    *cmRouter
	id   cm.ListenID
	port uint16
	reqs chan cm.Event
}

// cmBacklog is how many requests wait for Accept before more are refused.
const cmBacklog = 64

// ListenCM listens on rdma_cm TCP port port (for example rping's 7174,
// rdma_server's 7471, perftest's 18515).
func (c *Context) ListenCM(port uint16) (*CMListener, error) {
	if err := c.check("listen"); err != nil {
		return nil, err
	}
	r := routerFor(c.dev)
	if port == 0 {
		return nil, fmt.Errorf("listen on rdma_cm port 0 of %s: name a port: %w", c.dev.Name(), ErrInvalid)
	}
	if _, ok := r.port(port); !ok {
		return nil, fmt.Errorf("listen on rdma_cm port %d of %s: %w", port, c.dev.Name(), ErrPortInUse)
	}
	l := &CMListener{ctx: c, r: r, port: port, reqs: make(chan cm.Event, cmBacklog)}
	var err error
	r.mu.Lock()
	c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, _ cm.Time) {
		l.id, err = m.Listen(packet.ServiceID(packet.PortSpaceTCP, port))
	})
	if err == nil {
		r.listeners[l.id] = l.put
		r.startLocked()
	}
	r.mu.Unlock()
	if err != nil {
		r.release(port)
		return nil, fmt.Errorf("listen on rdma_cm port %d of %s: %w", port, c.dev.Name(), err)
	}
	return l, nil
}

// put takes a request; the router calls it with its lock held. A full
// backlog refuses the request, as listen(2)'s.
func (l *CMListener) put(e cm.Event) {
	select {
	case l.reqs <- e:
	default:
		l.r.refuse(e)
	}
}

// Port returns the rdma_cm port.
func (l *CMListener) Port() uint16 { return l.port }

// Close stops listening; requests not yet accepted are refused.
func (l *CMListener) Close() error {
	l.r.mu.Lock()
	delete(l.r.listeners, l.id)
	l.ctx.dev.WithCM(l.ctx.dev.Now(), func(m *cm.Manager, now cm.Time) {
		m.Unlisten(l.id)
		for {
			select {
			case e := <-l.reqs:
				_ = m.Reject(now, e.Conn, packet.RejConsumerDefined, nil)
				continue
			default:
			}
			break
		}
	})
	l.r.mu.Unlock()
	l.r.release(l.port)
	l.r.kick()
	return nil
}

// ConnRequest is a peer's request to connect (RDMA_CM_EVENT_CONNECT_REQUEST),
// to Accept or Reject.
type ConnRequest struct {
	l   *CMListener
	id  cm.ConnID
	req packet.CMReq
	// Peer and Local are the rdma_cm addresses the peer connected from and
	// to.
	Peer, Local netip.AddrPort
	// PrivateData is the peer's, after rdma_cm's header (56 bytes).
	PrivateData []byte
	// RemoteQPN is the peer's QP.
	RemoteQPN uint32
	// ResponderResources and InitiatorDepth are what this side may use:
	// the REQ's initiator depth and responder resources, swapped.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the peer's.
	RetryCount, RNRRetryCount uint8
}

// Accept returns the next connection request, or ctx's error. A request
// whose rdma_cm header is not one (wrong version, mixed families) is
// refused as the kernel refuses it.
func (l *CMListener) Accept(ctx context.Context) (*ConnRequest, error) {
	for {
		var e cm.Event
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e = <-l.reqs:
		}
		var h packet.CMAHeader
		if err := h.Decode(e.Req.PrivateData); err != nil {
			l.ctx.dev.WithCM(l.ctx.dev.Now(), func(m *cm.Manager, now cm.Time) {
				_ = m.Reject(now, e.Conn, packet.RejConsumerDefined, nil)
			})
			continue
		}
		return &ConnRequest{l: l, id: e.Conn, req: e.Req,
			Peer: netip.AddrPortFrom(h.Src, h.SrcPort), Local: netip.AddrPortFrom(h.Dst, l.port),
			PrivateData: e.Req.PrivateData[packet.CMAHeaderLen:], RemoteQPN: e.Req.LocalQPN,
			ResponderResources: e.Req.InitiatorDepth, InitiatorDepth: e.Req.ResponderResources,
			RetryCount: e.Req.RetryCount, RNRRetryCount: e.Req.RNRRetryCount}, nil
	}
}

// Reject refuses the request (rdma_reject: REJ "consumer defined") with
// at most 148 bytes of private data.
func (r *ConnRequest) Reject(pd []byte) error {
	var err error
	r.l.ctx.dev.WithCM(r.l.ctx.dev.Now(), func(m *cm.Manager, now cm.Time) {
		err = m.Reject(now, r.id, packet.RejConsumerDefined, pd)
	})
	if err != nil {
		return fmt.Errorf("reject %s: %w", r.Peer, err)
	}
	return nil
}

// Accept connects q (an RC or UC QP of the listener's context, in RESET or
// INIT) to the peer as rdma_accept does: q goes to RTS with the REQ's
// values, the REP goes out, and Accept returns when the peer's RTU (or its
// first packet) establishes the connection, it refuses, or ctx ends.
func (r *ConnRequest) Accept(ctx context.Context, q *QP, p *CMParam) (*CMConn, error) {
	if p == nil {
		p = &CMParam{}
	}
	c := r.l.ctx
	wantType := RC
	if r.req.TransportType == packet.CMTransportUC {
		wantType = UC
	}
	if q.Type() != wantType {
		_ = r.Reject(nil)
		return nil, fmt.Errorf("accept %s: the peer connects a %v QP, qp %d is %v: %w", r.Peer, wantType, q.QPN(), q.Type(), ErrInvalid)
	}
	if len(p.PrivateData) > packet.CMRepPrivateLen {
		return nil, fmt.Errorf("accept %s: %d bytes of private data, at most %d: %w", r.Peer, len(p.PrivateData), packet.CMRepPrivateLen, ErrInvalid)
	}
	peerGID := netip.AddrFrom16(r.req.Primary.LocalGID).Unmap()
	sgid, err := c.GIDIndex(netip.AddrFrom16(r.req.Primary.RemoteGID))
	if err != nil {
		_ = r.Reject(nil)
		return nil, fmt.Errorf("accept %s: the REQ names GID %s, not this device's: %w", r.Peer,
			netip.AddrFrom16(r.req.Primary.RemoteGID).Unmap(), err)
	}
	port, err := c.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("accept %s: %w", r.Peer, err)
	}
	mtu := port.ActiveMTU
	if reqMTU := MTU(128 << r.req.PathMTU); r.req.PathMTU >= 1 && r.req.PathMTU <= 5 && reqMTU < mtu {
		mtu = reqMTU
	}
	respRes, initDepth := or(p.ResponderResources, r.ResponderResources), or(p.InitiatorDepth, r.InitiatorDepth)
	psn := RandomPSN()
	rtr := QPAttr{PathMTU: mtu, DestQPN: r.req.LocalQPN, RQPSN: psn, MaxDestRdAtomic: respRes,
		AV: AddressVector{DGID: peerGID, SGIDIndex: uint8(sgid), HopLimit: cmHopLimit,
			TrafficClass: r.req.Primary.TrafficClass, FlowLabel: r.req.Primary.FlowLabel}}
	rts := QPAttr{SQPSN: r.req.StartingPSN, Timeout: or(r.req.Primary.LocalACKTimeout, cmAckTimeout),
		RetryCnt: r.req.RetryCount, RNRRetry: r.req.RNRRetryCount, MaxRdAtomic: initDepth}
	if err := cmConnect(q, rtr, rts, respRes); err != nil {
		_ = r.Reject(nil)
		return nil, fmt.Errorf("accept %s: %w", r.Peer, err)
	}
	rep := packet.CMRep{LocalQPN: q.QPN(), StartingPSN: psn, ResponderResources: respRes, InitiatorDepth: initDepth,
		TargetACKDelay: 15, RNRRetryCount: or(p.RNRRetryCount, 7), SRQ: q.InitAttr().SRQ != nil, PrivateData: p.PrivateData}
	rt := r.l.r
	var conn *CMConn
	rt.mu.Lock()
	c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) {
		if err = m.Accept(now, r.id, &rep); err == nil {
			conn = rt.newConn(c, r.id, q)
		}
	})
	rt.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("accept %s: %w", r.Peer, err)
	}
	conn.local, conn.peer, conn.PrivateData = r.Local, r.Peer, r.PrivateData
	for {
		e, err := conn.wait(ctx)
		if err != nil {
			c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) { m.Destroy(now, conn.id) })
			return nil, fmt.Errorf("accept %s: %w", r.Peer, err)
		}
		switch e.Kind {
		case cm.EventEstablished:
			return conn, nil
		case cm.EventDisconnectRequest:
			// The peer is up and already leaving: the connection was
			// established (its DREQ stands for the lost RTU).
			return conn, nil
		default:
			return nil, fmt.Errorf("accept %s: %w", r.Peer, eventErr(e))
		}
	}
}
