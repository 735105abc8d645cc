package dropin

// cm_conn.go: connecting, accepting, rejecting, disconnecting, the QP
// attributes a connection implies, and events.

import (
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"syscall"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// rdma_cm's UD Q_Key (RDMA_UDP_QKEY).
const udpQKey = 0x01234567

// deviceMaxRdAtomic is what 0xFF ("the device's maximum") becomes.
const deviceMaxRdAtomic = 128

func randomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xFFFFFF
}

func (c *conn) cmConnect(b []byte) syscall.Errno {
	var a wireCMConn
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	if id.state != idRouteResolved {
		return c.refuse(syscall.EINVAL, "connect: resolve the address and the route first")
	}
	p := &a.Param
	if p.PrivateDataLen > uint8(len(p.PrivateData)) {
		return syscall.EINVAL
	}
	pd := p.PrivateData[:p.PrivateDataLen]
	hdr := packet.CMAHeader{SrcPort: id.src.Port(), Src: id.src.Addr(), Dst: id.dst.Addr()}
	s := c.cm
	if id.qpType == qpTypeUD {
		if len(pd) > packet.CMSidrReqPrivateLen-packet.CMAHeaderLen {
			return c.refuse(syscall.EINVAL, "connect: %d bytes of private data, at most %d", len(pd), packet.CMSidrReqPrivateLen-packet.CMAHeaderLen)
		}
		buf := make([]byte, packet.CMAHeaderLen+len(pd))
		if err := hdr.Encode(buf); err != nil {
			return c.errnoOf(err)
		}
		copy(buf[packet.CMAHeaderLen:], pd)
		req := packet.CMSidrReq{PKey: 0xFFFF, ServiceID: id.serviceID(id.dst.Port()), PrivateData: buf}
		conn, err := s.port.Track(func(m *cm.Manager, now cm.Time) (cm.ConnID, error) {
			return m.SIDRRequest(now, id.dst.Addr(), &req)
		}, s.sink(id))
		if err != nil {
			return c.errnoOf(err)
		}
		id.conn, id.tracked, id.state = conn, true, idConnect
		return 0
	}
	if len(pd) > packet.CMReqPrivateLen-packet.CMAHeaderLen {
		return c.refuse(syscall.EINVAL, "connect: %d bytes of private data, at most %d", len(pd), packet.CMReqPrivateLen-packet.CMAHeaderLen)
	}
	resp, init := rdAtomic(p.ResponderResources), rdAtomic(p.InitiatorDepth)
	port, err := c.ctx.QueryPort(1)
	if err != nil {
		return c.errnoOf(err)
	}
	id.psn, id.respRes, id.initDepth, id.retry = randomPSN(), resp, init, p.RetryCount&7
	buf := make([]byte, packet.CMAHeaderLen+len(pd))
	if err := hdr.Encode(buf); err != nil {
		return c.errnoOf(err)
	}
	copy(buf[packet.CMAHeaderLen:], pd)
	id.req = packet.CMReq{
		ServiceID: id.serviceID(id.dst.Port()), LocalQPN: p.QPNum & 0xFFFFFF,
		ResponderResources: resp, InitiatorDepth: init, RemoteCMResponseTimeout: cm.ResponseTimeout,
		TransportType: packet.CMTransportRC, StartingPSN: id.psn, LocalCMResponseTimeout: cm.ResponseTimeout,
		RetryCount: id.retry, PKey: 0xFFFF, PathMTU: uint8(port.ActiveMTU.Enum()), RNRRetryCount: p.RNRRetryCount & 7,
		MaxCMRetries: cm.MaxCMRetries, SRQ: p.SRQ != 0,
		Primary: packet.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: id.src.Addr().As16(), RemoteGID: id.dst.Addr().As16(),
			FlowLabel: flowLabel(id.src.Port(), id.dst.Port()), TrafficClass: id.tos, HopLimit: 64,
			LocalACKTimeout: cmAckTimeout},
		PrivateData: buf,
	}
	if id.qpType == qpTypeUC {
		id.req.TransportType = packet.CMTransportUC
	}
	conn, err := s.port.Track(func(m *cm.Manager, now cm.Time) (cm.ConnID, error) {
		return m.Connect(now, id.dst.Addr(), &id.req)
	}, s.sink(id))
	if err != nil {
		return c.errnoOf(err)
	}
	id.conn, id.tracked, id.state = conn, true, idConnect
	return 0
}

// rdAtomic turns a conn_param's resource count into what goes on the wire:
// 0xFF means the device's maximum.
func rdAtomic(v uint8) uint8 {
	if v == 0xFF {
		return deviceMaxRdAtomic
	}
	return v
}

func (c *conn) cmAccept(b []byte) syscall.Errno {
	var a wireCMConn
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	p := &a.Param
	if p.PrivateDataLen > uint8(len(p.PrivateData)) {
		return syscall.EINVAL
	}
	pd := p.PrivateData[:p.PrivateDataLen]
	s := c.cm
	var err error
	switch {
	case id.state == idRequest && id.qpType == qpTypeUD:
		if len(pd) > packet.CMSidrRepPrivateLen {
			return syscall.EINVAL
		}
		s.port.Do(func(m *cm.Manager, now cm.Time) {
			err = m.SIDRReply(now, id.conn, &packet.CMSidrRep{Status: packet.SIDRAccept, QPN: p.QPNum & 0xFFFFFF,
				QKey: udpQKey, PrivateData: pd})
		})
		id.tracked = false // the exchange is over
		id.state = idConnected
	case id.state == idRequest:
		if len(pd) > packet.CMRepPrivateLen {
			return syscall.EINVAL
		}
		id.respRes, id.initDepth = rdAtomic(p.ResponderResources), rdAtomic(p.InitiatorDepth)
		rep := packet.CMRep{LocalQPN: p.QPNum & 0xFFFFFF, StartingPSN: id.psn, ResponderResources: id.respRes,
			InitiatorDepth: id.initDepth, TargetACKDelay: 15, RNRRetryCount: p.RNRRetryCount & 7, SRQ: p.SRQ != 0,
			PrivateData: pd}
		s.port.Do(func(m *cm.Manager, now cm.Time) { err = m.Accept(now, id.conn, &rep) })
		id.state = idAccepted
	case id.state == idResponded:
		// The active side's QP is in RTS: the RTU (librdmacm's ACCEPT
		// after CONNECT_RESPONSE).
		s.port.Do(func(m *cm.Manager, now cm.Time) { err = m.Ready(now, id.conn, nil) })
		id.state = idConnected
	default:
		return c.refuse(syscall.EINVAL, "accept: id %d has no request to accept", id.handle)
	}
	if err != nil {
		return c.errnoOf(err)
	}
	return 0
}

func (c *conn) cmEstablish(b []byte) syscall.Errno {
	id := cmArg(c, b, &wireHandle{})
	if id == nil || id.state != idResponded {
		return syscall.EINVAL
	}
	var err error
	c.cm.port.Do(func(m *cm.Manager, now cm.Time) { err = m.Ready(now, id.conn, nil) })
	if err != nil {
		return c.errnoOf(err)
	}
	// No event follows: the program had CONNECT_RESPONSE, and librdmacm
	// reports ESTABLISHED to an active side only when it moved the id's
	// own QP itself (UCX and pyverbs' external-QP test wait for none).
	id.state = idConnected
	return 0
}

func (c *conn) cmReject(b []byte) syscall.Errno {
	var a wireCMReject
	id := cmArg(c, b, &a)
	if id == nil || a.PrivateDataLen > uint8(len(a.PrivateData)) {
		return syscall.EINVAL
	}
	pd := a.PrivateData[:a.PrivateDataLen]
	var err error
	switch {
	case id.state == idRequest && id.qpType == qpTypeUD:
		c.cm.port.Do(func(m *cm.Manager, now cm.Time) {
			err = m.SIDRReply(now, id.conn, &packet.CMSidrRep{Status: packet.SIDRReject, PrivateData: pd})
		})
	case id.state == idRequest || id.state == idResponded:
		c.cm.port.Do(func(m *cm.Manager, now cm.Time) {
			err = m.Reject(now, id.conn, packet.RejConsumerDefined, pd)
		})
	default:
		return syscall.EINVAL
	}
	id.state = idDisconnected
	if id.tracked {
		c.cm.port.Untrack(id.conn)
		id.tracked = false
	}
	if err != nil {
		return c.errnoOf(err)
	}
	return 0
}

func (c *conn) cmDisconnect(b []byte) syscall.Errno {
	id := cmArg(c, b, &wireHandle{})
	if id == nil || !id.tracked {
		return syscall.EINVAL
	}
	var err error
	c.cm.port.Do(func(m *cm.Manager, now cm.Time) { err = m.Disconnect(now, id.conn, nil) })
	if err != nil {
		return c.errnoOf(err)
	}
	id.state = idDisconnected
	return 0
}

// cmGetEvent takes the oldest event of a channel and turns it into
// librdmacm's.
func (c *conn) cmGetEvent(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok {
		return syscall.EINVAL
	}
	s := c.cmSession()
	s.mu.Lock()
	ch := s.chans[h]
	if ch == nil {
		s.mu.Unlock()
		return syscall.EINVAL
	}
	p, ok := ch.q.pop()
	s.mu.Unlock()
	if !ok {
		return syscall.EAGAIN
	}
	if p.synth {
		c.w.put(p.ev)
		return 0
	}
	id := s.ids[p.id]
	if id == nil {
		return syscall.EAGAIN
	}
	ev, ok := c.cmEvent(id, p.cm)
	if !ok {
		return syscall.EAGAIN // consumed here (a request refused, say)
	}
	c.w.put(ev)
	return 0
}

// cmEvent turns a connection manager event about id into librdmacm's,
// updating id. It reports false for an event the program does not see.
func (c *conn) cmEvent(id *cmID, e cm.Event) (wireCMEvent, bool) {
	ev := wireCMEvent{ID: id.handle, ListenID: srNone}
	setPD := func(pd []byte) {
		ev.Conn.PrivateDataLen = uint8(copy(ev.Conn.PrivateData[:], pd))
	}
	switch e.Kind {
	case cm.EventReq, cm.EventSIDRReq:
		child, ok := c.cmChild(id, e)
		if !ok {
			return ev, false
		}
		ev.ID, ev.ListenID, ev.Event = child.handle, id.handle, cmEvConnectRequest
		ev.Route = c.route(child)
		if e.Kind == cm.EventReq {
			r := &e.Req
			setPD(r.PrivateData[packet.CMAHeaderLen:])
			ev.Conn.ResponderResources, ev.Conn.InitiatorDepth = r.InitiatorDepth, r.ResponderResources
			ev.Conn.RetryCount, ev.Conn.RNRRetryCount, ev.Conn.QPNum = r.RetryCount, r.RNRRetryCount, r.LocalQPN
			if r.SRQ {
				ev.Conn.SRQ = 1
			}
		} else {
			setPD(e.SIDRReq.PrivateData[packet.CMAHeaderLen:])
		}
	case cm.EventRep:
		id.rep, id.state = e.Rep, idResponded
		r := &e.Rep
		setPD(r.PrivateData)
		ev.Event = cmEvConnectResponse
		ev.Conn.ResponderResources, ev.Conn.InitiatorDepth = r.ResponderResources, r.InitiatorDepth
		ev.Conn.RNRRetryCount, ev.Conn.QPNum = r.RNRRetryCount, r.LocalQPN
		if r.SRQ {
			ev.Conn.SRQ = 1
		}
	case cm.EventEstablished:
		id.state = idConnected
		ev.Event = cmEvEstablished
	case cm.EventRejected:
		id.tracked, id.state = false, idDisconnected
		ev.Event, ev.Status = cmEvRejected, int32(e.Reason)
		setPD(e.PrivateData)
	case cm.EventUnreachable:
		id.tracked, id.state = false, idDisconnected
		ev.Event, ev.Status = cmEvUnreachable, -int32(syscall.ETIMEDOUT)
	case cm.EventDisconnectRequest, cm.EventDisconnected:
		id.state = idDisconnected
		ev.Event = cmEvDisconnected
	case cm.EventTimewaitExit:
		id.tracked = false
		ev.Event = cmEvTimewaitExit
	case cm.EventSIDRRep:
		id.tracked = false
		r := &e.SIDRRep
		if r.Status != packet.SIDRAccept {
			ev.Event, ev.Status = cmEvUnreachable, int32(r.Status)
			break
		}
		id.state, id.udQPN, id.udQKey = idConnected, r.QPN, r.QKey
		ev.Event = cmEvEstablished
		setPD(r.PrivateData)
		ev.UD.QPNum, ev.UD.QKey = r.QPN, r.QKey
		ev.UD.AHAttr = c.ahTo(id)
	default:
		return ev, false
	}
	return ev, true
}

// cmChild makes the id a request creates on its listener's channel, with
// the addresses its rdma_cm header names. A request whose header is not
// rdma_cm's is refused, as the kernel refuses it.
func (c *conn) cmChild(l *cmID, e cm.Event) (*cmID, bool) {
	s := c.cm
	var hdr packet.CMAHeader
	pd := e.Req.PrivateData
	if e.Kind == cm.EventSIDRReq {
		pd = e.SIDRReq.PrivateData
	}
	if err := hdr.Decode(pd); err != nil || len(s.ids) >= maxCMIDs {
		s.port.Do(func(m *cm.Manager, now cm.Time) {
			if e.Kind == cm.EventSIDRReq {
				_ = m.SIDRReply(now, e.Conn, &packet.CMSidrRep{Status: packet.SIDRReject})
			} else {
				_ = m.Reject(now, e.Conn, packet.RejConsumerDefined, nil)
			}
		})
		return nil, false
	}
	h := c.handle()
	child := &cmID{handle: h, channel: l.channel, ps: l.ps, qpType: l.qpType, state: idRequest, child: true,
		src: netip.AddrPortFrom(hdr.Dst, l.src.Port()), dst: netip.AddrPortFrom(hdr.Src, hdr.SrcPort),
		conn: e.Conn, tos: l.tos, ackTimeout: l.ackTimeout, psn: randomPSN()}
	if e.Kind == cm.EventReq {
		child.req = e.Req
		child.retry = e.Req.RetryCount
		child.src = netip.AddrPortFrom(netip.AddrFrom16(e.Req.Primary.RemoteGID).Unmap(), l.src.Port())
		child.tos = e.Req.Primary.TrafficClass
		if e.Req.TransportType == packet.CMTransportUC {
			child.qpType = qpTypeUC
		}
	}
	s.ids[h] = child
	if e.Kind == cm.EventReq {
		// A SIDR exchange ends with the reply; a connection's events
		// follow it.
		_, _ = s.port.Track(func(*cm.Manager, cm.Time) (cm.ConnID, error) { return e.Conn, nil }, s.sink(child))
		child.tracked = true
	} else {
		child.tracked = true // for rdma_reject and rdma_accept
	}
	return child, true
}

// ahTo is the address handle attributes to reach id's peer.
func (c *conn) ahTo(id *cmID) wireAHAttr {
	a := wireAHAttr{DGID: id.dst.Addr().As16(), HopLimit: 64, TrafficClass: id.tos, IsGlobal: 1, PortNum: 1,
		FlowLabel: flowLabel(id.src.Port(), id.dst.Port())}
	if i, err := c.ctx.GIDIndex(id.src.Addr()); err == nil {
		a.SGIDIndex = uint8(i)
	}
	return a
}
