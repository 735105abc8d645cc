package rxe

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// FuzzHandleFrame feeds hostile input to a device whose QPs are connected
// and have memory registered and receives posted. With fix set, the input is
// taken as a transport packet (BTH onwards) and wrapped in valid Ethernet,
// IP and UDP headers with a correct ICRC, so that it passes the device's
// checks and reaches the engine. Nothing may panic, and registered memory
// outside what the keys name is never written.
func FuzzHandleFrame(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
		db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
		a, b := connect(t, da, db, qp.RC, 8, 1024)
		u := newSide(t, db, qp.UD, 8)
		toInit(t, u.qp)
		toRTS(t, u, nil, 0)
		// Guard bytes around the registered window catch stray writes.
		backing := make([]byte, 3*4096)
		window := backing[4096 : 2*4096]
		m, err := db.RegMR(b.pd, window, rwAll)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*side{b, u} {
			for i := 0; i < 4; i++ {
				_ = s.qp.PostRecv(&qp.RecvWR{SGL: []qp.SGE{{Addr: m.Addr(), Length: 2048, LKey: m.LKey()}}})
			}
		}
		_ = a
		frame := data
		if fix {
			if len(data) < packet.BTHLen+packet.ICRCLen {
				return
			}
			// Aim at b's QPs (any of them, chosen by the input).
			tr := append([]byte(nil), data...)
			var dqp uint32 = b.qp.QPN()
			if tr[5]&1 == 1 {
				dqp = u.qp.QPN()
			}
			tr[5], tr[6], tr[7] = byte(dqp>>16), byte(dqp>>8), byte(dqp)
			addr := packet.Addressing{Src: ipA, Dst: ipB, SrcPort: 0xC000, HopLimit: 64, DF: true}
			frame = rawFrame(&addr, tr)
		}
		db.HandleFrame(1, link.Frame{Data: frame})
		n := newNet(da, db)
		n.pump(t, 1000, 50)
		for i := 0; i < 4096; i++ {
			if backing[i] != 0 || backing[2*4096+i] != 0 {
				t.Fatalf("byte outside the registered region written")
			}
		}
	})
}

func fuzzSeeds() [][]byte {
	var out [][]byte
	mk := func(p packet.Packet) {
		out = append(out, p.AppendTo(nil))
	}
	send := packet.Packet{Payload: []byte("hello")}
	send.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, PSN: 1000 + 17, AckReq: true}
	mk(send)
	w := packet.Packet{Payload: make([]byte, 64)}
	w.BTH = packet.BTHFields{Opcode: packet.RCWriteOnly, PKey: 0xFFFF, PSN: 1000 + 17}
	w.RETH = packet.RETHFields{VA: 0x1000, RKey: 0x100, Length: 64}
	mk(w)
	r := packet.Packet{}
	r.BTH = packet.BTHFields{Opcode: packet.RCReadRequest, PKey: 0xFFFF, PSN: 1000 + 17}
	r.RETH = packet.RETHFields{VA: 0x1000, RKey: 0x100, Length: 4096}
	mk(r)
	at := packet.Packet{}
	at.BTH = packet.BTHFields{Opcode: packet.RCFetchAdd, PKey: 0xFFFF, PSN: 1000 + 17}
	at.AtomicETH = packet.AtomicETHFields{VA: 0x1000, RKey: 0x100, SwapAdd: 1}
	mk(at)
	ud := packet.Packet{Payload: []byte("datagram")}
	ud.BTH = packet.BTHFields{Opcode: packet.UDSendOnly, PKey: 0xFFFF, DestQP: 1}
	ud.DETH = packet.DETHFields{QKey: testQKey, SrcQP: 5}
	mk(ud)
	ack := packet.Packet{}
	ack.BTH = packet.BTHFields{Opcode: packet.RCAcknowledge, PKey: 0xFFFF, PSN: 1000 + 18}
	ack.AETH = packet.AETHFields{Syndrome: packet.MakeACK(31), MSN: 1}
	mk(ack)
	return out
}

// rawFrame frames transport bytes (BTH through ICRC slot) as an Ethernet
// frame from macA with a correct ICRC, whatever the bytes say.
func rawFrame(a *packet.Addressing, tr []byte) []byte {
	f := make([]byte, packet.EthernetLen, packet.EthernetLen+packet.IPv6Len+packet.UDPLen+len(tr))
	copy(f[6:12], macA[:])
	f[12], f[13] = 0x08, 0x00
	ipStart := len(f)
	f = a.AppendIPUDP(f, len(tr))
	tStart := len(f)
	f = append(f, tr...)
	packet.SetICRC(f[ipStart:tStart], f[tStart:])
	return f
}
