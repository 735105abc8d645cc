package cm_test

import (
	"io"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/require"
)

// kernelMAD is a CM MAD kernel rxe sent, with its sender.
type kernelMAD struct {
	from netip.Addr
	mad  packet.MAD
}

// kernelCM returns the CM MADs of a kernel capture in order.
func kernelCM(t *testing.T, name string) []kernelMAD {
	t.Helper()
	r, err := pcapio.Open("../testdata/pcaps/rxe/" + name)
	require.NoError(t, err)
	defer r.Close()
	var out []kernelMAD
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		var f packet.Frame
		if rec.Frame(&f) != nil {
			continue
		}
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		if mad, ok := p.MAD(); ok {
			out = append(out, kernelMAD{f.Addressing().Src, packet.MAD(append([]byte(nil), mad...))})
		}
	}
}

// sameButIDs checks that ours is the kernel's MAD with the comm IDs (and,
// when tid is false, the TID) ours to choose.
func sameButIDs(t *testing.T, kernel, ours packet.MAD, tid bool, what string) {
	t.Helper()
	k := append(packet.MAD(nil), kernel...)
	if !tid {
		k.SetTID(ours.TID())
	}
	// Both comm IDs lead every message but the SIDR ones.
	copy(k.Data()[:8], ours.Data()[:8])
	require.Equal(t, []byte(k), []byte(ours), what)
}

// TestKernelPassive plays kernel rping's client against a passive manager:
// the kernel's REQ goes in, the manager's REP must be the kernel server's
// REP byte for byte (but for the comm ID it chose), and the kernel's RTU,
// DREQ establish and disconnect it with a DREP like the kernel's.
func TestKernelPassive(t *testing.T) {
	mads := kernelCM(t, "rping.pcap")
	require.Len(t, mads, 5) // REQ REP RTU DREQ DREP
	client, server := mads[0].from, mads[1].from
	var kreq packet.CMReq
	var krep packet.CMRep
	require.NoError(t, kreq.Decode(mads[0].mad.Data()))
	require.NoError(t, krep.Decode(mads[1].mad.Data()))

	m := cm.New(cm.Config{GUID: krep.LocalCAGUID, Seed: 3, TargetACKDelay: krep.TargetACKDelay})
	_, err := m.Listen(kreq.ServiceID)
	require.NoError(t, err)
	m.Receive(0, client, mads[0].mad)
	ev := drain(m)
	require.Equal(t, []cm.EventKind{cm.EventReq}, kinds(ev))
	require.Equal(t, kreq.StartingPSN, ev[0].Req.StartingPSN)
	id := ev[0].Conn
	r := packet.CMRep{LocalQPN: krep.LocalQPN, StartingPSN: krep.StartingPSN, ResponderResources: krep.ResponderResources,
		InitiatorDepth: krep.InitiatorDepth, TargetACKDelay: krep.TargetACKDelay, RNRRetryCount: krep.RNRRetryCount,
		PrivateData: krep.PrivateData}
	require.NoError(t, m.Accept(0, id, &r))
	o, ok := m.Output()
	require.True(t, ok)
	require.Equal(t, client, o.To)
	sameButIDs(t, mads[1].mad, packet.MAD(o.MAD[:]), true, "REP")

	// The kernel's RTU and DREQ name the kernel server's comm ID; ours
	// differs, so they are patched to name ours, as a kernel client
	// talking to us would send them.
	patch := func(km packet.MAD) packet.MAD {
		p := append(packet.MAD(nil), km...)
		be := p.Data()
		be[4], be[5], be[6], be[7] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
		return p
	}
	m.Receive(1, client, patch(mads[2].mad))
	require.Equal(t, []cm.EventKind{cm.EventEstablished}, kinds(drain(m)))
	m.Receive(2, client, patch(mads[3].mad))
	require.Equal(t, []cm.EventKind{cm.EventDisconnectRequest}, kinds(drain(m)))
	require.NoError(t, m.Disconnect(2, id, nil))
	o, ok = m.Output()
	require.True(t, ok)
	sameButIDs(t, mads[4].mad, packet.MAD(o.MAD[:]), true, "DREP")
	_ = server
}

// TestKernelActive plays kernel rping's server against an active manager:
// given the REQ's fields, the manager's REQ is the kernel client's but for
// its comm ID and TID; the kernel's REP (naming our comm ID) makes an
// EventRep, Ready sends the kernel's RTU, Disconnect its DREQ, and the
// kernel's DREP ends it.
func TestKernelActive(t *testing.T) {
	mads := kernelCM(t, "rping.pcap")
	server := mads[1].from
	var kreq packet.CMReq
	require.NoError(t, kreq.Decode(mads[0].mad.Data()))
	m := cm.New(cm.Config{GUID: kreq.LocalCAGUID, Seed: 4})
	req := kreq
	id, err := m.Connect(0, server, &req)
	require.NoError(t, err)
	o, ok := m.Output()
	require.True(t, ok)
	ours := packet.MAD(o.MAD[:])
	sameButIDs(t, mads[0].mad, ours, false, "REQ")

	patch := func(km packet.MAD) packet.MAD {
		p := append(packet.MAD(nil), km...)
		d := p.Data()
		d[4], d[5], d[6], d[7] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
		p.SetTID(ours.TID())
		return p
	}
	m.Receive(1, server, patch(mads[1].mad))
	ev := drain(m)
	require.Equal(t, []cm.EventKind{cm.EventRep}, kinds(ev))
	require.NoError(t, m.Ready(1, id, nil))
	o, _ = m.Output()
	sameButIDs(t, mads[2].mad, packet.MAD(o.MAD[:]), false, "RTU")
	require.NoError(t, m.Disconnect(2, id, nil))
	o, _ = m.Output()
	dreq := packet.MAD(o.MAD[:])
	sameButIDs(t, mads[3].mad, dreq, false, "DREQ")
	drep := patch(mads[4].mad)
	drep.SetTID(dreq.TID())
	m.Receive(3, server, drep)
	require.Equal(t, []cm.EventKind{cm.EventDisconnected}, kinds(drain(m)))
	require.Equal(t, cm.StateTimewait, m.State(id))
}
