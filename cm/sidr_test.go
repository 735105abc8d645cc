package cm_test

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

const udpServiceID = 0x0000000001111C06 // rdma_cm UDP port 7174

// TestSIDR resolves a UD service: first with nobody listening (status 1,
// as kernel rxe answered in udaddy.pcap), then with a listener that
// answers with its QPN and rdma_cm's Q_Key.
func TestSIDR(t *testing.T) {
	w := newWire(t)
	req := packet.CMSidrReq{PKey: 0xFFFF, ServiceID: udpServiceID, PrivateData: []byte("hdr")}
	_, err := w.a.SIDRRequest(0, addrB, &req)
	require.NoError(t, err)
	ev := w.waitA()
	require.Equal(t, []cm.EventKind{cm.EventSIDRRep}, kinds(ev))
	require.Equal(t, uint8(packet.SIDRUnsupported), ev[0].SIDRRep.Status)
	require.Equal(t, uint64(udpServiceID), ev[0].SIDRRep.ServiceID)

	l, err := w.b.Listen(udpServiceID)
	require.NoError(t, err)
	id, err := w.a.SIDRRequest(w.now, addrB, &req)
	require.NoError(t, err)
	evB := w.waitB()
	require.Equal(t, []cm.EventKind{cm.EventSIDRReq}, kinds(evB))
	require.Equal(t, l, evB[0].Listen)
	require.Equal(t, []byte("hdr"), evB[0].SIDRReq.PrivateData[:3])
	require.Equal(t, uint32(id), evB[0].SIDRReq.RequestID)
	require.NoError(t, w.b.SIDRReply(w.now, evB[0].Conn, &packet.CMSidrRep{QPN: 0x11, QKey: 0x01234567}))
	ev = w.waitA()
	require.Equal(t, []cm.EventKind{cm.EventSIDRRep}, kinds(ev))
	r := ev[0].SIDRRep
	require.Equal(t, uint8(packet.SIDRAccept), r.Status)
	require.Equal(t, uint32(0x11), r.QPN)
	require.Equal(t, uint32(0x01234567), r.QKey)
	require.Equal(t, uint64(udpServiceID), r.ServiceID)
	require.Equal(t, uint32(id), r.RequestID)
	require.Zero(t, w.a.Conns())
	require.Zero(t, w.b.Conns())
}

// TestSIDRLost: a lost SIDR_REQ is sent again; its duplicate while the
// consumer decides is dropped; with no answer at all the request is
// unreachable after 16 tries.
func TestSIDRLost(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(udpServiceID)
	require.NoError(t, err)
	w.drop = dropN(addrA, packet.CMAttrSIDRREQ, 1)
	req := packet.CMSidrReq{ServiceID: udpServiceID}
	_, err = w.a.SIDRRequest(0, addrB, &req)
	require.NoError(t, err)
	evB := w.waitB()
	require.Len(t, evB, 1)
	require.Equal(t, cm.SIDRTimeout, w.now)
	w.advance(w.now + cm.SIDRTimeout) // a duplicate arrives meanwhile
	require.Empty(t, w.takeB())
	require.Equal(t, uint64(1), w.b.Counters().Duplicates)

	w2 := newWire(t)
	w2.drop = func(netip.Addr, packet.MAD) bool { return true }
	_, err = w2.a.SIDRRequest(0, addrB, &req)
	require.NoError(t, err)
	require.Equal(t, []cm.EventKind{cm.EventUnreachable}, kinds(w2.waitA()))
	require.Len(t, w2.log, cm.MaxCMRetries+1)
}
