package rxe

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// buildFrame encodes p from src to dst as a complete Ethernet frame.
func buildFrame(src, dst netip.Addr, ipid uint16, p *packet.Packet) []byte {
	a := packet.Addressing{Src: src, Dst: dst, SrcPort: 0xC123, HopLimit: 64, DF: true, IPID: ipid}
	return packet.AppendFrame(nil, &packet.Ethernet{Src: macA, Dst: macB}, &a, p)
}

func TestHandleFrameDrops(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	notReady := newSide(t, db, qp.RC, 8) // stays in RESET
	u := newSide(t, db, qp.UD, 8)
	toInit(t, u.qp)
	toRTS(t, u, nil, 0)

	rcSend := func(mod func(p *packet.Packet)) packet.Packet {
		p := packet.Packet{Payload: []byte("hello")}
		p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: b.qp.QPN(),
			PSN: 1000 + a.qp.QPN(), AckReq: true}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	good := rcSend(nil)
	udSend := packet.Packet{Payload: []byte("ud")}
	udSend.BTH = packet.BTHFields{Opcode: packet.UDSendOnly, PKey: 0xFFFF, DestQP: u.qp.QPN()}
	udSend.DETH = packet.DETHFields{QKey: testQKey ^ 1, SrcQP: 77}
	cnp := packet.Packet{Payload: make([]byte, packet.CNPPadLen)}
	cnp.BTH = packet.BTHFields{Opcode: packet.CNP, PKey: 0xFFFF, DestQP: b.qp.QPN()}

	frame := func(p packet.Packet) []byte { return buildFrame(ipA, ipB, 7, &p) }
	withByte := func(f []byte, off int, v byte) []byte { f[off] = v; return f }
	const tOff = packet.EthernetLen + packet.IPv4Len + packet.UDPLen // transport offset

	tests := []struct {
		name    string
		frame   []byte
		ipidUnk bool
		counter func(c *Counters) uint64
	}{
		{"not IP (ARP)", withByte(withByte(frame(good), 12, 0x08), 13, 0x06), false, func(c *Counters) uint64 { return c.NotRoCE }},
		{"not RoCE port", func() []byte {
			f := frame(good)
			binary.BigEndian.PutUint16(f[packet.EthernetLen+packet.IPv4Len+2:], 4792)
			return f
		}(), false, func(c *Counters) uint64 { return c.NotRoCE }},
		{"truncated", frame(good)[:60], false, func(c *Counters) uint64 { return c.Malformed }},
		{"runt", frame(good)[:10], false, func(c *Counters) uint64 { return c.Malformed }},
		{"IPv4 header checksum", withByte(frame(good), packet.EthernetLen+10, 0), false, func(c *Counters) uint64 { return c.Malformed }},
		{"wrong destination IP", buildFrame(ipA, netip.MustParseAddr("10.77.0.99"), 7, &good), false,
			func(c *Counters) uint64 { return c.BadDGID }},
		{"unknown opcode", frame(rcSend(func(p *packet.Packet) { p.BTH.Opcode = 0x18 })), false,
			func(c *Counters) uint64 { return c.UnknownOpcode }},
		{"transport version", withByte(frame(good), tOff+1, 0x01), false, func(c *Counters) uint64 { return c.Malformed }},
		{"CNP", frame(cnp), false, func(c *Counters) uint64 { return c.CNP }},
		{"bad P_Key", frame(rcSend(func(p *packet.Packet) { p.BTH.PKey = 0x1234 })), false,
			func(c *Counters) uint64 { return c.BadPKey }},
		{"QPN 0", frame(rcSend(func(p *packet.Packet) { p.BTH.DestQP = 0 })), false,
			func(c *Counters) uint64 { return c.Malformed }},
		{"RC to QP 1", frame(rcSend(func(p *packet.Packet) { p.BTH.DestQP = 1 })), false,
			func(c *Counters) uint64 { return c.GSIDropped }},
		{"QP 1 with another Q_Key", frame(func() packet.Packet {
			p := udSend
			p.BTH.DestQP, p.DETH.QKey = 1, 0x1234
			return p
		}()), false, func(c *Counters) uint64 { return c.BadQKey }},

		{"unknown QP", frame(rcSend(func(p *packet.Packet) { p.BTH.DestQP = 999 })), false,
			func(c *Counters) uint64 { return c.UnknownQP }},
		{"QP in RESET", frame(rcSend(func(p *packet.Packet) { p.BTH.DestQP = notReady.qp.QPN() })), false,
			func(c *Counters) uint64 { return c.QPNotReady }},
		{"source address", buildFrame(netip.MustParseAddr("10.77.0.9"), ipB, 7, &good), false,
			func(c *Counters) uint64 { return c.AddrMismatch }},
		{"UD QKey", frame(udSend), false, func(c *Counters) uint64 { return c.BadQKey }},
		{"bad ICRC", func() []byte { f := frame(good); f[len(f)-1] ^= 0xFF; return f }(), false,
			func(c *Counters) uint64 { return c.BadICRC }},
		{"bad ICRC: payload corrupted", func() []byte { f := frame(good); f[tOff+packet.BTHLen] ^= 1; return f }(), false,
			func(c *Counters) uint64 { return c.BadICRC }},
		{"bad ICRC, IP ID unknown", func() []byte {
			f := frame(good) // sent with ID 7; the link lost it
			f[packet.EthernetLen+4], f[packet.EthernetLen+5], f[packet.EthernetLen+6] = 0, 0, 0
			fixIPv4Checksum(f)
			f[len(f)-5] ^= 0x10 // and a payload bit flipped
			return f
		}(), true, func(c *Counters) uint64 { return c.BadICRC }},
	}
	for _, tt := range tests {
		before := db.Counters()
		db.HandleFrame(0, link.Frame{Data: tt.frame, IPIDUnknown: tt.ipidUnk})
		after := db.Counters()
		assert.Equal(t, tt.counter(&before)+1, tt.counter(&after), tt.name)
		assert.Equal(t, before.RcvdPkts, after.RcvdPkts, "%s: not delivered", tt.name)
	}
	// A UD SEND to QP 1 with the GSI Q_Key is QP 1's: received, and handed
	// to the connection manager, which drops what is not a CM MAD.
	before := db.Counters()
	mad := udSend
	mad.BTH.DestQP, mad.DETH.QKey, mad.DETH.SrcQP = 1, packet.GSIQKey, 1
	db.HandleFrame(0, link.Frame{Data: frame(mad)})
	after := db.Counters()
	assert.Equal(t, before.GSI+1, after.GSI)
	assert.Equal(t, before.RcvdPkts+1, after.RcvdPkts)
	db.WithCM(0, func(m *cm.Manager, _ cm.Time) { assert.Equal(t, uint64(1), m.Counters().Malformed) })

	// The UD QKey drops (a UD QP's, QP 1's) also show in the port's
	// qkey_viol_cntr, the P_Key drop in bad_pkey_cntr.
	p, err := db.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, uint32(1), p.BadPKeyCntr)
	assert.Equal(t, uint32(2), p.QKeyViolCntr)

	// A good packet, and ones whose IP ID and DF the link lost (rebuilt as
	// zero) are delivered: the ICRC check solves for the lost bits.
	before = db.Counters()
	db.HandleFrame(0, link.Frame{Data: frame(good)})
	for i, id := range []uint16{0, 0xBEEF} {
		g := rcSend(func(p *packet.Packet) { p.BTH.PSN += uint32(i + 1) })
		f := buildFrame(ipA, ipB, id, &g)
		f[packet.EthernetLen+4], f[packet.EthernetLen+5], f[packet.EthernetLen+6] = 0, 0, 0
		fixIPv4Checksum(f)
		db.HandleFrame(0, link.Frame{Data: f, IPIDUnknown: true})
	}
	after = db.Counters()
	assert.Equal(t, before.RcvdPkts+3, after.RcvdPkts)
	assert.Equal(t, before.ICRCIDUnknown+2, after.ICRCIDUnknown)
	assert.Equal(t, before.BadICRC, after.BadICRC)

	// A link that checked the ICRC itself (the simulator, for a frame no
	// fault touched) is believed: the device does not check it again. Its
	// other checks still apply.
	before = db.Counters()
	f := frame(rcSend(func(p *packet.Packet) { p.BTH.PSN += 3 }))
	f[len(f)-1] ^= 0xFF
	db.HandleFrame(0, link.Frame{Data: f, ICRCChecked: true})
	db.HandleFrame(0, link.Frame{Data: frame(rcSend(func(p *packet.Packet) { p.BTH.PKey = 0x1234 })), ICRCChecked: true})
	after = db.Counters()
	assert.Equal(t, before.RcvdPkts+1, after.RcvdPkts)
	assert.Equal(t, before.BadICRC, after.BadICRC)
	assert.Equal(t, before.BadPKey+1, after.BadPKey)
	require.NoError(t, b.qp.PostRecv(&qp.RecvWR{}))

	allocs := testing.AllocsPerRun(100, func() {
		db.HandleFrame(0, link.Frame{Data: tests[len(tests)-2].frame})
		db.HandleFrame(0, link.Frame{Data: tests[len(tests)-1].frame, IPIDUnknown: true})
		db.HandleFrame(0, link.Frame{Data: tests[5].frame})
	})
	assert.Zero(t, allocs, "the drop paths do not allocate")
}

// fixIPv4Checksum recomputes the IPv4 header checksum of an Ethernet frame
// after a test changed the header.
func fixIPv4Checksum(f []byte) {
	ip := f[packet.EthernetLen : packet.EthernetLen+packet.IPv4Len]
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < len(ip); i += 2 {
		s += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
}

func TestUDGRHGetsRecoveredIPv4ID(t *testing.T) {
	// A UDP-socket link loses the sender's IPv4 ID and DF; the ICRC check
	// recovers them, and the UD receive's GRH area shows the header the
	// sender sent, as it would on rxe.
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	u := newSide(t, db, qp.UD, 8)
	toInit(t, u.qp)
	toRTS(t, u, nil, 0)
	buf := make([]byte, 40+64)
	m, _ := db.RegMR(u.pd, buf, qp.AccessLocalWrite)
	require.NoError(t, u.qp.PostRecv(&qp.RecvWR{SGL: []qp.SGE{{Addr: m.Addr(), Length: uint32(len(buf)), LKey: m.LKey()}}}))
	p := packet.Packet{Payload: []byte("datagram")}
	p.BTH = packet.BTHFields{Opcode: packet.UDSendOnly, PKey: 0xFFFF, DestQP: u.qp.QPN()}
	p.DETH = packet.DETHFields{QKey: testQKey, SrcQP: 33}
	sent := buildFrame(ipA, ipB, 0xBEEF, &p)
	lost := append([]byte(nil), sent...)
	lost[packet.EthernetLen+4], lost[packet.EthernetLen+5], lost[packet.EthernetLen+6] = 0, 0, 0
	fixIPv4Checksum(lost)
	db.HandleFrame(0, link.Frame{Data: lost, IPIDUnknown: true})
	wcs := make([]qp.WC, 1)
	require.Equal(t, 1, u.rcq.Poll(wcs))
	require.Equal(t, qp.WCSuccess, wcs[0].Status)
	assert.Equal(t, sent[packet.EthernetLen:packet.EthernetLen+packet.IPv4Len], buf[20:40],
		"the GRH area holds the sender's IPv4 header, ID, DF and checksum included")
	assert.Equal(t, "datagram", string(buf[40:48]))
}
