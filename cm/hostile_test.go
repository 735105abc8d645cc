package cm_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// TestHostileInput: what is not a CM MAD, or names no connection of its
// sender, is dropped and counted, and changes nothing.
func TestHostileInput(t *testing.T) {
	w := newWire(t)
	_, err := w.b.Listen(serviceID)
	require.NoError(t, err)
	ida, idb := w.connect(1, 2)
	evil := netip.MustParseAddr("10.0.0.66")

	good := func(a packet.CMAttr, msg packet.CMMessage) packet.MAD {
		m := packet.NewCMMAD(a, 1)
		require.NoError(t, msg.Encode(m.Data()))
		return m
	}
	for _, c := range []struct {
		name    string
		from    netip.Addr
		payload []byte
		counter func(cm.Counters) uint64
	}{
		{"short", addrA, make([]byte, 100), func(c cm.Counters) uint64 { return c.Malformed }},
		{"not CM", addrA, func() []byte { m := packet.NewCMMAD(packet.CMAttrREQ, 1); m[1] = 0x81; return m }(), func(c cm.Counters) uint64 { return c.Malformed }},
		{"DREQ from a stranger", evil, good(packet.CMAttrDREQ, &packet.CMDreq{LocalCommID: 0, RemoteCommID: uint32(idb), RemoteQPN: 2}), func(c cm.Counters) uint64 { return c.Unmatched }},
		{"DREQ for another QP", addrA, good(packet.CMAttrDREQ, &packet.CMDreq{LocalCommID: 0, RemoteCommID: uint32(idb), RemoteQPN: 3}), func(c cm.Counters) uint64 { return c.Unmatched }},
		{"RTU for nothing", addrA, good(packet.CMAttrRTU, &packet.CMRtu{LocalCommID: 9, RemoteCommID: 9}), func(c cm.Counters) uint64 { return c.Unmatched }},
		{"REJ for an established connection", addrA, good(packet.CMAttrREJ, &packet.CMRej{RemoteCommID: uint32(idb), Reason: 28}), func(c cm.Counters) uint64 { return c.Unmatched }},
		{"LAP", addrA, packet.NewCMMAD(packet.CMAttrLAP, 1), func(c cm.Counters) uint64 { return c.Unmatched }},
	} {
		before := c.counter(w.b.Counters())
		w.b.Receive(w.now, c.from, c.payload)
		require.Equal(t, before+1, c.counter(w.b.Counters()), c.name)
		require.Equal(t, cm.StateEstablished, w.b.State(idb), c.name)
		require.Empty(t, drain(w.b), c.name)
	}
	require.Equal(t, cm.StateEstablished, w.a.State(ida))
}

// TestREQFlood: a listener flooded with REQs holds at most MaxConns
// connections and refuses the rest with "no resources"; the output queue
// holds at most MaxOutputs MADs.
func TestREQFlood(t *testing.T) {
	m := cm.New(cm.Config{GUID: 0xB, MaxConns: 8, MaxOutputs: 4})
	_, err := m.Listen(serviceID)
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		req := rdmaCMReq(uint32(i), 1, nil)
		req.LocalCommID, req.LocalCAGUID = uint32(i+1), 0xA
		mad := packet.NewCMMAD(packet.CMAttrREQ, uint64(i))
		require.NoError(t, req.Encode(mad.Data()))
		m.Receive(0, addrA, mad)
	}
	require.Equal(t, 8, m.Conns())
	c := m.Counters()
	require.Equal(t, uint64(12), c.Refused)
	require.Equal(t, uint64(8), c.OutputsDropped, "12 REJs, room for 4")
	n := 0
	for o, ok := m.Output(); ok; o, ok = m.Output() {
		var rej packet.CMRej
		require.NoError(t, rej.Decode(packet.MAD(o.MAD[:]).Data()))
		require.Equal(t, packet.RejNoResources, rej.Reason)
		n++
	}
	require.Equal(t, 4, n)
}

// TestDeterministic: the same inputs give the same outputs, byte for byte,
// with many connections timing out at once.
func TestDeterministic(t *testing.T) {
	run := func() [][packet.MADLen]byte {
		m := cm.New(cm.Config{GUID: 0xA, Seed: 7})
		for i := 0; i < 50; i++ {
			req := rdmaCMReq(uint32(i), 1, nil)
			_, err := m.Connect(0, addrB, &req)
			require.NoError(t, err)
		}
		var out [][packet.MADLen]byte
		for now := cm.Time(0); now < 200_000*cm.Millisecond; now += 1000 * cm.Millisecond {
			m.Tick(now)
			for o, ok := m.Output(); ok; o, ok = m.Output() {
				out = append(out, o.MAD)
			}
		}
		return out
	}
	a, b := run(), run()
	require.Len(t, a, 50*16)
	require.Equal(t, a, b)
}

// FuzzManager feeds a listening manager arbitrary MADs from a few peers at
// advancing times, with a consumer that answers what it is asked: nothing
// panics, the connections stay bounded, and timers run out.
func FuzzManager(f *testing.F) {
	seed := func(a packet.CMAttr, msg packet.CMMessage) []byte {
		m := packet.NewCMMAD(a, 1)
		_ = msg.Encode(m.Data())
		return m
	}
	req := rdmaCMReq(1, 1, nil)
	req.LocalCommID, req.LocalCAGUID = 5, 0xA
	f.Add(seed(packet.CMAttrREQ, &req), uint8(0), uint16(10))
	f.Add(seed(packet.CMAttrDREQ, &packet.CMDreq{LocalCommID: 5, RemoteCommID: 1}), uint8(1), uint16(100))
	f.Add(seed(packet.CMAttrSIDRREQ, &packet.CMSidrReq{ServiceID: serviceID}), uint8(2), uint16(7000))
	f.Fuzz(func(t *testing.T, b []byte, who uint8, dt uint16) {
		m := cm.New(cm.Config{GUID: 0xB, MaxConns: 16, MaxOutputs: 16})
		_, _ = m.Listen(serviceID)
		peers := []netip.Addr{addrA, addrB, netip.MustParseAddr("fd00::1")}
		rng := rand.New(rand.NewPCG(uint64(len(b)), uint64(who)))
		now := cm.Time(0)
		// Each chunk of the input is a MAD's worth, with bytes of the
		// input patched into a valid REQ now and then.
		for off := 0; off < len(b) || off == 0; off += packet.MADLen {
			chunk := b[off:min(len(b), off+packet.MADLen)]
			mad := packet.NewCMMAD(packet.CMAttr(0x10+rng.IntN(10)), rng.Uint64())
			copy(mad[packet.MADHeaderLen:], chunk)
			if rng.IntN(2) == 0 {
				m.Receive(now, peers[int(who)%len(peers)], chunk)
			} else {
				m.Receive(now, peers[rng.IntN(len(peers))], mad)
			}
			for e, ok := m.Event(); ok; e, ok = m.Event() {
				switch e.Kind {
				case cm.EventReq:
					r := rep(1, 1, nil)
					_ = m.Accept(now, e.Conn, &r)
				case cm.EventDisconnectRequest:
					_ = m.Disconnect(now, e.Conn, nil)
				case cm.EventSIDRReq:
					_ = m.SIDRReply(now, e.Conn, &packet.CMSidrRep{})
				}
			}
			for _, ok := m.Output(); ok; _, ok = m.Output() {
			}
			require.LessOrEqual(t, m.Conns(), 16)
			now += cm.Time(dt) * cm.Millisecond
			m.Tick(now)
		}
		// Every timer ends: retries and timewait are finite.
		for i := 0; i < 10_000; i++ {
			d, ok := m.Deadline()
			if !ok {
				break
			}
			m.Tick(d)
			for _, ok := m.Output(); ok; _, ok = m.Output() {
			}
			for _, ok := m.Event(); ok; _, ok = m.Event() {
			}
		}
		_, ok := m.Deadline()
		require.False(t, ok)
	})
}
