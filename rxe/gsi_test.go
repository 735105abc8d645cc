package rxe

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

const rpingSID = 0x0000000001061C06

// cmEvents takes the connection manager's events, as a consumer woken by
// CMReady would.
func cmEvents(d *Device, now qp.Time) []cm.Event {
	var out []cm.Event
	select {
	case <-d.CMReady():
	default:
		return nil
	}
	d.WithCM(now, func(m *cm.Manager, _ cm.Time) {
		for e, ok := m.Event(); ok; e, ok = m.Event() {
			out = append(out, e)
		}
	})
	return out
}

// rpingREQ returns kernel rping's REQ from rping.pcap, decoded, and the
// frame that carried it.
func rpingREQ(t *testing.T) (packet.CMReq, []byte) {
	t.Helper()
	r, err := pcapio.Open(filepath.Join("..", "testdata", "pcaps", "rxe", "rping.pcap"))
	require.NoError(t, err)
	defer r.Close()
	for {
		rec, err := r.Next()
		require.NotEqual(t, io.EOF, err, "no REQ in rping.pcap")
		require.NoError(t, err)
		var f packet.Frame
		if rec.Frame(&f) != nil {
			continue
		}
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		if mad, ok := p.MAD(); ok && mad.AttrID() == packet.CMAttrREQ {
			var req packet.CMReq
			require.NoError(t, req.Decode(mad.Data()))
			req.PrivateData = append([]byte(nil), req.PrivateData...)
			return req, append([]byte(nil), rec.Data...)
		}
	}
}

// cmRequest has db listen on rping's service ID and da send it kernel
// rping's REQ (from ipA to ipB), delivered; it returns da's connection and
// db's events.
func cmRequest(t *testing.T, n *net, da, db *Device) (cm.ConnID, []cm.Event) {
	t.Helper()
	db.WithCM(n.now, func(m *cm.Manager, _ cm.Time) {
		_, err := m.Listen(rpingSID)
		require.NoError(t, err)
	})
	req, _ := rpingREQ(t)
	req.Primary.LocalGID, req.Primary.RemoteGID = ipA.As16(), ipB.As16()
	var ida cm.ConnID
	da.WithCM(n.now, func(m *cm.Manager, now cm.Time) {
		var err error
		ida, err = m.Connect(now, ipB, &req)
		require.NoError(t, err)
	})
	n.deliver(t)
	return ida, cmEvents(db, n.now)
}

// TestGSIConnect connects two devices with the connection manager over QP
// 1 and checks every MAD on the wire is framed as kernel rxe frames it.
func TestGSIConnect(t *testing.T) {
	da := newDev(t, "a", macA, ipA, ip6A, 1500)
	db := newDev(t, "b", macB, ipB, ip6B, 1500)
	n := newNet(da, db)
	var frames []packet.Frame
	n.filter = func(from, to *Device, f []byte) bool {
		var fr packet.Frame
		require.NoError(t, packet.ParseFrame(append([]byte(nil), f...), &fr))
		frames = append(frames, fr)
		return true
	}
	ida, evB := cmRequest(t, n, da, db)
	require.Len(t, evB, 1)
	require.Equal(t, cm.EventReq, evB[0].Kind)
	require.Equal(t, ipA, evB[0].Peer)
	db.WithCM(n.now, func(m *cm.Manager, now cm.Time) {
		rep := packet.CMRep{LocalQPN: 0x11, StartingPSN: 5, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7}
		require.NoError(t, m.Accept(now, evB[0].Conn, &rep))
	})
	n.deliver(t)
	evA := cmEvents(da, n.now)
	require.Len(t, evA, 1)
	require.Equal(t, cm.EventRep, evA[0].Kind)
	require.Equal(t, uint64(db.QueryDevice().NodeGUID), evA[0].Rep.LocalCAGUID)
	da.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Ready(now, ida, nil)) })
	n.deliver(t)
	evB = cmEvents(db, n.now)
	require.Len(t, evB, 1)
	require.Equal(t, cm.EventEstablished, evB[0].Kind)

	require.Len(t, frames, 3) // REQ, REP, RTU
	psn := map[[6]byte]uint32{}
	for i, fr := range frames {
		a := fr.Addressing()
		require.Equal(t, uint16(gsiSrcPort), a.SrcPort, "frame %d", i)
		require.Equal(t, uint8(64), a.HopLimit)
		require.True(t, fr.ICRCOK())
		var p packet.Packet
		require.NoError(t, p.Decode(fr.Transport))
		require.Equal(t, packet.UDSendOnly, p.BTH.Opcode)
		require.Equal(t, uint32(packet.GSIQPN), p.BTH.DestQP)
		require.Equal(t, packet.DETHFields{QKey: packet.GSIQKey, SrcQP: packet.GSIQPN}, p.DETH)
		require.Len(t, p.Payload, packet.MADLen)
		src := [6]byte(fr.Eth[6:12])
		require.Equal(t, psn[src], p.BTH.PSN, "QP 1's PSNs count from 0")
		psn[src]++
	}
	require.Equal(t, uint64(2), db.Counters().GSI)
	require.Equal(t, uint64(1), da.Counters().GSI)
}

// TestGSIKernelREQ: kernel rping's REQ frame, as captured, is accepted by a
// listening device, which answers with a REP; and a device sending the
// same REQ frames it as the kernel did, field for field.
func TestGSIKernelREQ(t *testing.T) {
	req, kframe := rpingREQ(t)
	var kf packet.Frame
	require.NoError(t, packet.ParseFrame(kframe, &kf))
	ka := kf.Addressing()

	// Kernel rping's client is 10.77.0.3 (ipB), its server 10.77.0.2 (ipA).
	server := newDev(t, "srv", macA, ipA, ip6A, 1500)
	server.WithCM(0, func(m *cm.Manager, _ cm.Time) {
		_, err := m.Listen(rpingSID)
		require.NoError(t, err)
	})
	server.HandleFrame(0, link.Frame{Data: kframe})
	ev := cmEvents(server, 0)
	require.Len(t, ev, 1)
	require.Equal(t, cm.EventReq, ev[0].Kind)
	require.Equal(t, req.StartingPSN, ev[0].Req.StartingPSN)

	client := newDev(t, "cli", macB, ipB, ip6B, 1500)
	client.WithCM(0, func(m *cm.Manager, now cm.Time) {
		_, err := m.Connect(now, ipA, &req)
		require.NoError(t, err)
	})
	out := make([]link.Frame, 4)
	k, _ := client.Output(0, out)
	require.Equal(t, 1, k)
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(out[0].Data, &f))
	a := f.Addressing()
	a.IPID, ka.IPID = 0, 0
	require.Equal(t, ka, a, "IP and UDP as the kernel's")
	var kp, p packet.Packet
	require.NoError(t, kp.Decode(kf.Transport))
	require.NoError(t, p.Decode(f.Transport))
	require.Equal(t, kp.BTH, p.BTH)
	require.Equal(t, kp.DETH, p.DETH)
	kmad, mad := packet.MAD(kp.Payload), packet.MAD(p.Payload)
	kmad = append(packet.MAD(nil), kmad...)
	kmad.SetTID(mad.TID())
	copy(kmad.Data()[:4], mad.Data()[:4])       // local comm ID
	copy(kmad.Data()[16:24], mad.Data()[16:24]) // CA GUID: this device's
	require.Equal(t, []byte(kmad), []byte(mad), "the MAD as the kernel's but for IDs")
}

// deliver moves frames between the devices until none has output, without
// letting time pass.
func (n *net) deliver(t *testing.T) {
	for busy := true; busy; {
		busy = false
		for _, d := range n.devs {
			for {
				k, more := d.Output(n.now, n.frames)
				for i := 0; i < k; i++ {
					if to := n.route(d, n.frames[i].Data); to != nil && (n.filter == nil || n.filter(d, to, n.frames[i].Data)) {
						to.HandleFrame(n.now, n.frames[i])
					}
				}
				busy = busy || k > 0
				if !more {
					break
				}
			}
		}
	}
}
