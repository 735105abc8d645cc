package cm

import (
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Receive hands the manager the payload of a UD SEND that arrived on QP 1
// from the QP 1 at from. Anything but a CM MAD this stack speaks is dropped
// and counted.
func (m *Manager) Receive(now Time, from netip.Addr, payload []byte) {
	mad, err := packet.ParseCMMAD(payload)
	if err != nil || mad.Method() != packet.MADMethodSend {
		m.c.Malformed++
		return
	}
	a := mad.AttrID()
	m.c.Received[attrIndex(a)]++
	d := mad.Data()
	switch a {
	case packet.CMAttrREQ:
		var r packet.CMReq
		_ = r.Decode(d)
		m.recvREQ(now, from, mad.TID(), &r)
	case packet.CMAttrREP:
		var r packet.CMRep
		_ = r.Decode(d)
		m.recvREP(now, from, &r)
	case packet.CMAttrRTU:
		var r packet.CMRtu
		_ = r.Decode(d)
		m.recvRTU(now, from, &r)
	case packet.CMAttrREJ:
		var r packet.CMRej
		_ = r.Decode(d)
		m.recvREJ(now, from, &r)
	case packet.CMAttrMRA:
		var r packet.CMMra
		_ = r.Decode(d)
		m.recvMRA(now, from, &r)
	case packet.CMAttrDREQ:
		var r packet.CMDreq
		_ = r.Decode(d)
		m.recvDREQ(now, from, mad.TID(), &r)
	case packet.CMAttrDREP:
		var r packet.CMDrep
		_ = r.Decode(d)
		m.recvDREP(now, from, &r)
	case packet.CMAttrSIDRREQ:
		var r packet.CMSidrReq
		_ = r.Decode(d)
		m.recvSIDRReq(now, from, mad.TID(), &r)
	case packet.CMAttrSIDRREP:
		var r packet.CMSidrRep
		_ = r.Decode(d)
		m.recvSIDRRep(now, from, &r)
	default:
		// ClassPortInfo, LAP, APR: not served on RoCE.
		m.c.Unmatched++
	}
}

// lookup returns the connection a message names by our comm ID, if it
// came from the connection's peer.
func (m *Manager) lookup(id uint32, from netip.Addr) *conn {
	c := m.conns[ConnID(id)]
	if c == nil || c.peer != from {
		return nil
	}
	return c
}
