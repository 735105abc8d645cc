package verbsapi

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// DialCM connects q (an RC or UC QP in RESET or INIT) to whoever listens on
// rdma_cm TCP port to.Port() at to.Addr(), as rdma_resolve_addr,
// rdma_resolve_route and rdma_connect do: it sends a REQ from an ephemeral
// rdma_cm port, and on the peer's REP moves q to RTS with what the REP says
// and answers with an RTU. It returns when the connection is up, the peer
// refused (a *RejectError), or ctx ends. The REQ is retried as the kernel
// retries it (every 6.1 s, for about 98 s: ErrUnreachable).
func (c *Context) DialCM(ctx context.Context, q *QP, to netip.AddrPort, p *CMParam) (*CMConn, error) {
	if p == nil {
		p = &CMParam{}
	}
	if err := c.check("dial"); err != nil {
		return nil, err
	}
	if q.Type() != RC && q.Type() != UC {
		return nil, fmt.Errorf("dial %s: qp %d is %v; rdma_cm connects RC and UC QPs: %w", to, q.QPN(), q.Type(), ErrInvalid)
	}
	if len(p.PrivateData) > packet.CMReqPrivateLen-packet.CMAHeaderLen {
		return nil, fmt.Errorf("dial %s: %d bytes of private data, at most %d: %w", to, len(p.PrivateData),
			packet.CMReqPrivateLen-packet.CMAHeaderLen, ErrInvalid)
	}
	sgid, err := c.sourceGID(to.Addr())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	gid, err := c.QueryGID(1, sgid)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	port, err := c.QueryPort(1)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	r := routerFor(c.dev)
	sport, ok := r.port(0)
	if !ok {
		return nil, fmt.Errorf("dial %s: no ephemeral rdma_cm port left: %w", to, ErrPortInUse)
	}
	local := netip.AddrPortFrom(gid.Unmap(), sport)
	psn := RandomPSN()
	respRes, initDepth := or(p.ResponderResources, 16), or(p.InitiatorDepth, 16)
	req := packet.CMReq{
		ServiceID: packet.ServiceID(packet.PortSpaceTCP, to.Port()), LocalQPN: q.QPN(),
		ResponderResources: respRes, InitiatorDepth: initDepth,
		RemoteCMResponseTimeout: cm.ResponseTimeout, TransportType: packet.CMTransportRC, StartingPSN: psn,
		LocalCMResponseTimeout: cm.ResponseTimeout, RetryCount: or(p.RetryCount, 7), PKey: 0xFFFF,
		PathMTU: uint8(port.ActiveMTU.Enum()), RNRRetryCount: or(p.RNRRetryCount, 7), MaxCMRetries: cm.MaxCMRetries,
		SRQ: q.InitAttr().SRQ != nil,
		Primary: packet.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: gid.As16(), RemoteGID: to.Addr().As16(),
			FlowLabel: flowLabel(sport, to.Port()), HopLimit: cmHopLimit, LocalACKTimeout: cmAckTimeout},
	}
	if q.Type() == UC {
		req.TransportType = packet.CMTransportUC
	}
	pd := make([]byte, packet.CMAHeaderLen+len(p.PrivateData))
	h := packet.CMAHeader{SrcPort: sport, Src: local.Addr(), Dst: to.Addr()}
	if err := h.Encode(pd); err != nil {
		r.release(sport)
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	copy(pd[packet.CMAHeaderLen:], p.PrivateData)
	req.PrivateData = pd

	var conn *CMConn
	r.mu.Lock()
	c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) {
		var id cm.ConnID
		if id, err = m.Connect(now, to.Addr().Unmap(), &req); err == nil {
			conn = r.newConn(c, id, q)
		}
	})
	r.mu.Unlock()
	if err != nil {
		r.release(sport)
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	conn.local, conn.peer, conn.ownPort = local, to, true
	fail := func(err error) (*CMConn, error) {
		c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) { m.Destroy(now, conn.id) })
		conn.release()
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	e, err := conn.wait(ctx)
	if err != nil {
		return fail(err)
	}
	if e.Kind != cm.EventRep {
		conn.release()
		return nil, fmt.Errorf("dial %s: %w", to, eventErr(e))
	}
	rep := &e.Rep
	conn.PrivateData = rep.PrivateData
	rtr := QPAttr{PathMTU: port.ActiveMTU, DestQPN: rep.LocalQPN, RQPSN: psn, MaxDestRdAtomic: rep.InitiatorDepth,
		AV: AddressVector{DGID: to.Addr(), SGIDIndex: uint8(sgid), HopLimit: cmHopLimit, FlowLabel: req.Primary.FlowLabel}}
	rts := QPAttr{SQPSN: rep.StartingPSN, Timeout: cmAckTimeout, RetryCnt: req.RetryCount, RNRRetry: rep.RNRRetryCount,
		MaxRdAtomic: rep.ResponderResources}
	if err := cmConnect(q, rtr, rts, respRes); err != nil {
		// The kernel's rdma_cm rejects the REP when the QP cannot take it.
		c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) {
			_ = m.Reject(now, conn.id, packet.RejConsumerDefined, nil)
		})
		conn.release()
		return nil, fmt.Errorf("dial %s: %w", to, err)
	}
	c.dev.WithCM(c.dev.Now(), func(m *cm.Manager, now cm.Time) { err = m.Ready(now, conn.id, nil) })
	if err != nil {
		return fail(err)
	}
	return conn, nil
}
