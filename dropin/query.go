package dropin

// query.go: the query calls (device list, device, port, GID, P_Key),
// which need no objects.

import (
	"encoding/binary"
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

// query answers the query ops. Their body is a struct sr_query; LIST may
// also come without one.
func (c *conn) query(op uint32, b []byte) syscall.Errno {
	var q wireQuery
	if op == opList {
		var h wireHello
		switch {
		case decode(b, &h) && h.Version != srProtoVersion:
			return syscall.EPROTONOSUPPORT
		case len(b) != 0 && binary.Size(h) != len(b) && !decode(b, &q):
			return syscall.EINVAL
		}
	} else if !decode(b, &q) {
		return syscall.EINVAL
	}
	if op != opList && q.Dev != 0 {
		return c.refuse(syscall.ENODEV, "device %d: the server serves one device, 0", q.Dev)
	}
	switch op {
	case opList:
		var e wireDevEntry
		copy(e.Name[:len(e.Name)-1], c.ctx.Name())
		binary.BigEndian.PutUint64(e.NodeGUID[:], c.ctx.QueryDevice().NodeGUID)
		c.w.put(e)
	case opQueryDevice:
		c.w.put(wireDevice(c.ctx.QueryDevice()))
	case opQueryPort:
		p, err := c.ctx.QueryPort(int(q.Port))
		if err != nil {
			return c.refuse(syscall.EINVAL, "query port %d: the device has port 1 only", q.Port)
		}
		c.w.put(wirePort(p))
	case opQueryGID:
		return c.queryGID(q)
	case opQueryPKey:
		if q.Port != 1 || q.Index != 0 {
			return syscall.EINVAL
		}
		c.w.put(uint16(0xffff))
	}
	return 0
}

// queryGID reads one GID table entry; an unpopulated index inside the
// table is an all-zero GID, as the kernel reports it.
func (c *conn) queryGID(q wireQuery) syscall.Errno {
	p, err := c.ctx.QueryPort(int(q.Port))
	if err != nil || q.Index >= uint32(p.GIDTblLen) {
		return syscall.EINVAL
	}
	var g wireGID
	if addr, err := c.ctx.QueryGID(int(q.Port), int(q.Index)); err == nil {
		g.GID = addr.As16()
		g.Type = 2 // softroce speaks RoCE v2 only
	}
	c.w.put(g)
	return 0
}

func wireDevice(a verbsapi.DeviceAttr) wireDeviceAttr {
	w := wireDeviceAttr{
		MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer, DeviceCapFlags: a.DeviceCapFlags,
		MaxQP: int32(a.MaxQP), MaxQPWR: int32(a.MaxQPWR), MaxSGE: int32(a.MaxSGE), MaxSGERd: int32(a.MaxSGERd),
		MaxCQ: int32(a.MaxCQ), MaxCQE: int32(a.MaxCQE), MaxMR: int32(a.MaxMR), MaxPD: int32(a.MaxPD),
		MaxQPRdAtom: int32(a.MaxQPRdAtom), MaxEERdAtom: int32(a.MaxEECRdAtom), MaxResRdAtom: int32(a.MaxResRdAtom),
		MaxQPInitRdAtom: int32(a.MaxQPInitRdAtom), MaxEEInitRdAtom: int32(a.MaxEECInitRdAtom), AtomicCap: int32(a.AtomicCap),
		MaxEE: int32(a.MaxEE), MaxRDD: int32(a.MaxRDD), MaxMW: int32(a.MaxMW),
		MaxRawIPv6QP: int32(a.MaxRawIPv6QP), MaxRawEthyQP: int32(a.MaxRawEthyQP),
		MaxMcastGrp: int32(a.MaxMcastGrp), MaxMcastQPAttach: int32(a.MaxMcastQPAttach), MaxTotalMcastQPAt: int32(a.MaxTotalMcastQPAttach),
		MaxAH: int32(a.MaxAH), MaxFMR: int32(a.MaxFMR), MaxMapPerFMR: int32(a.MaxMapPerFMR),
		MaxSRQ: int32(a.MaxSRQ), MaxSRQWR: int32(a.MaxSRQWR), MaxSRQSGE: int32(a.MaxSRQSGE),
		MaxPKeys: uint16(a.MaxPKeys), LocalCAAckDelay: uint8(a.LocalCAAckDelay), PhysPortCnt: uint8(a.PhysPortCnt),
	}
	copy(w.FWVer[:len(w.FWVer)-1], a.FWVer)
	binary.BigEndian.PutUint64(w.NodeGUID[:], a.NodeGUID)
	binary.BigEndian.PutUint64(w.SysImageGUID[:], a.SysImageGUID)
	return w
}

func wirePort(p verbsapi.PortAttr) wirePortAttr {
	return wirePortAttr{
		State: uint32(p.State), MaxMTU: uint32(p.MaxMTU.Enum()), ActiveMTU: uint32(p.ActiveMTU.Enum()),
		GIDTblLen: int32(p.GIDTblLen), PortCapFlags: p.PortCapFlags, MaxMsgSz: p.MaxMsgSz,
		BadPKeyCntr: p.BadPKeyCntr, QKeyViolCntr: p.QKeyViolCntr,
		PKeyTblLen: uint16(p.PKeyTblLen), LID: p.LID, SMLID: p.SMLID,
		LMC: p.LMC, MaxVLNum: p.MaxVLNum, SMSL: p.SMSL, SubnetTimeout: p.SubnetTimeout, InitTypeReply: p.InitTypeReply,
		ActiveWidth: p.ActiveWidth, ActiveSpeed: p.ActiveSpeed, PhysState: p.PhysState, LinkLayer: p.LinkLayer,
	}
}
