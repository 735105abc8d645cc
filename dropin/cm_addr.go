package dropin

// cm_addr.go: binding, address and route resolution, listening.

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// sockaddr turns a wire address into an address and port; family 0 is
// "none".
func sockaddr(a wireCMSockaddr) (netip.AddrPort, bool) {
	switch a.Family {
	case 0:
		return netip.AddrPort{}, true
	case afInet:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a.Addr[:4])), a.Port), true
	case afInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), a.Port), true
	}
	return netip.AddrPort{}, false
}

func wireSockaddr(ap netip.AddrPort) wireCMSockaddr {
	var w wireCMSockaddr
	a := ap.Addr().Unmap()
	switch {
	case a.Is4():
		w.Family = afInet
		v := a.As4()
		copy(w.Addr[:], v[:])
	case a.Is6():
		w.Family = afInet6
		w.Addr = a.As16()
	default:
		return w
	}
	w.Port = ap.Port()
	return w
}

// ownAddr reports whether a is an address of the device.
func (c *conn) ownAddr(a netip.Addr) bool {
	_, err := c.ctx.GIDIndex(a)
	return err == nil
}

// localFor returns the device address to reach dst from: the first GID
// of its family.
func (c *conn) localFor(dst netip.Addr) (netip.Addr, bool) {
	dst = dst.Unmap()
	tbl, err := c.ctx.QueryGIDTable(1)
	if err != nil {
		return netip.Addr{}, false
	}
	for i, g := range tbl {
		ip := g.GID.Unmap()
		if i > 0 && ip.Is4() == dst.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// bindPort gives id its port: want, or an ephemeral one.
func (c *conn) bindPort(id *cmID, ip netip.Addr, want uint16) syscall.Errno {
	p, ok := c.cm.port.BindPort(want)
	if !ok {
		return c.refuse(syscall.EADDRINUSE, "rdma_cm port %d is taken on %s", want, c.ctx.Name())
	}
	id.src, id.ownPort = netip.AddrPortFrom(ip, p), true
	if id.state == idIdle {
		id.state = idBound
	}
	return 0
}

func (c *conn) cmBind(b []byte) syscall.Errno {
	var a wireCMBind
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	ap, ok := sockaddr(a.Addr)
	if !ok || a.Addr.Family == 0 {
		return c.refuse(syscall.EAFNOSUPPORT, "bind: address family %d", a.Addr.Family)
	}
	if id.state != idIdle || id.ownPort {
		return syscall.EINVAL
	}
	ip := ap.Addr()
	if !ip.IsUnspecified() && !c.ownAddr(ip) {
		return c.refuse(syscall.EADDRNOTAVAIL, "bind: %s is not an address of %s", ip, c.ctx.Name())
	}
	if errno := c.bindPort(id, ip, ap.Port()); errno != 0 {
		return errno
	}
	c.w.put(c.route(id))
	return 0
}

func (c *conn) cmResolveAddr(b []byte) syscall.Errno {
	var a wireCMResolve
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	src, ok1 := sockaddr(a.Src)
	dst, ok2 := sockaddr(a.Dst)
	if !ok1 || !ok2 || a.Dst.Family == 0 {
		return syscall.EAFNOSUPPORT
	}
	if id.state != idIdle && id.state != idBound {
		return syscall.EINVAL
	}
	local, ok := c.localFor(dst.Addr())
	if ok && src.Addr().IsValid() && !src.Addr().IsUnspecified() {
		local, ok = src.Addr(), c.ownAddr(src.Addr())
	}
	if id.ownPort && !id.src.Addr().IsUnspecified() {
		local = id.src.Addr()
	}
	if !ok {
		// As the kernel when no RDMA device owns a route to dst.
		c.cm.synth(id, cmEvAddrError, -int32(syscall.ENODEV))
		return 0
	}
	if !id.ownPort {
		if errno := c.bindPort(id, local, src.Port()); errno != 0 {
			return errno
		}
	}
	id.src, id.dst, id.state = netip.AddrPortFrom(local, id.src.Port()), dst, idAddrResolved
	c.cm.synth(id, cmEvAddrResolved, 0)
	return 0
}

func (c *conn) cmResolveRoute(b []byte) syscall.Errno {
	id := cmArg(c, b, &wireHandle{})
	if id == nil {
		return syscall.EINVAL
	}
	if id.state != idAddrResolved {
		return syscall.EINVAL
	}
	// RoCE has no path records to query: the route is the addresses
	// (cma_resolve_iboe_route).
	id.state = idRouteResolved
	c.cm.synth(id, cmEvRouteResolved, 0)
	return 0
}

func (c *conn) cmQueryRoute(b []byte) syscall.Errno {
	id := cmArg(c, b, &wireHandle{})
	if id == nil {
		return syscall.EINVAL
	}
	c.w.put(c.route(id))
	return 0
}

// route describes id's addresses, device and path as librdmacm's
// QUERY_ROUTE answer does.
func (c *conn) route(id *cmID) wireCMRoute {
	r := wireCMRoute{Src: wireSockaddr(id.src), Dst: wireSockaddr(id.dst), PortNum: 1}
	ip := id.src.Addr()
	if !ip.IsValid() || ip.IsUnspecified() {
		// A wildcard listener belongs to no device until a request comes.
		r.Src.Family = familyOf(ip)
		r.Src.Port = id.src.Port()
		return r
	}
	copy(r.DevName[:], c.ctx.Name())
	binary.BigEndian.PutUint64(r.NodeGUID[:], c.ctx.QueryDevice().NodeGUID)
	sgid, err := c.ctx.GIDIndex(ip)
	if err == nil {
		r.SGIDIndex = uint8(sgid)
	}
	p := &r.Path
	p.SGID = ip.As16()
	p.PKey = 0xFFFF
	p.HopLimit = 64
	p.TrafficClass = id.tos
	p.PktLife = cm.PacketLifetime
	if port, err := c.ctx.QueryPort(1); err == nil {
		p.MTU = uint8(port.ActiveMTU.Enum())
	}
	if id.dst.Addr().IsValid() {
		r.NumPaths = 1
		p.DGID = id.dst.Addr().As16()
		p.FlowLabel = flowLabel(id.src.Port(), id.dst.Port())
	}
	return r
}

func familyOf(a netip.Addr) uint16 {
	if a.Is6() && !a.Is4In6() {
		return afInet6
	}
	return afInet
}

// flowLabel is rdma_cm's flow label between two rdma_cm ports, which rxe
// turns into the data packets' UDP source port.
func flowLabel(sport, dport uint16) uint32 { return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF }

func (c *conn) cmListen(b []byte) syscall.Errno {
	var a wireCMListen
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	if id.state == idListen {
		return 0 // rdma_listen again changes the backlog only
	}
	if id.state != idBound {
		if id.state != idIdle {
			return syscall.EINVAL
		}
		if errno := c.bindPort(id, netip.IPv4Unspecified(), 0); errno != 0 {
			return errno
		}
	}
	l, err := c.cm.port.Listen(packet.ServiceID(uint16(id.ps), id.src.Port()), c.cm.sink(id))
	if err != nil {
		return c.refuse(syscall.EADDRINUSE, "listen: %v", err)
	}
	id.listen, id.listening, id.state = l, true, idListen
	return 0
}

// serviceID is the service ID of port in id's port space.
func (id *cmID) serviceID(port uint16) uint64 { return packet.ServiceID(uint16(id.ps), port) }
