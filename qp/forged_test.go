package qp_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// forgedSeeds are the transport bytes of a short real conversation, as
// records for forgedRun.
func forgedSeeds(t testing.TB) [][]byte {
	h := pair(t, qp.RC, defaultLink())
	h.B.postRecv(t, 100, 0, 4096)
	h.A.postSend(t, sendWR(1, 0, 1500))
	h.A.postSend(t, readWR(2, 0x8000, 0, 1500))
	h.A.postSend(t, atomicWR(3, qp.WRFetchAdd, 0x9000, 0, 1, 0))
	h.A.postSend(t, writeWR(4, 0, 0, 100))
	if err := h.Run(nil); err != nil {
		t.Fatal(err)
	}
	var seeds [][]byte
	for _, fr := range h.Frames {
		var pf packet.Frame
		if packet.ParseIP(fr.Data, &pf) != nil {
			continue
		}
		tr := pf.Transport
		if len(tr) > 255 {
			tr = tr[:255]
		}
		seeds = append(seeds, append([]byte{byte(1 - fr.From), byte(len(tr))}, tr...))
	}
	return seeds
}

// forgedRun runs a conversation between two QPs while feeding them the
// packets in, which are records of: a byte choosing the target (low bit: A
// or B; bit 1 of the first record: an RC or a UC pair), a length byte, and
// that many bytes of transport packet (BTH onwards, ICRC slot included),
// whose destination QP is then set to the target's. Hostile input must
// never panic, never make a QP transmit or spin without end, and never
// break the Pending/Transmit contract.
func forgedRun(t *testing.T, in []byte) {
	typ := qp.RC
	if len(in) > 0 && in[0]&2 != 0 {
		typ = qp.UC
	}
	l := defaultLink()
	l.Timeout, l.RetryCnt = 8, 3
	h := newHarness(t, epConfig{Type: typ, CQDepth: 64}, epConfig{Type: typ, CQDepth: 64})
	h.connect(l)
	h.MaxSteps = 20_000
	fill(h.A.local, 1)
	h.B.postRecv(t, 100, 0, 4096)
	h.A.postRecv(t, 200, 0x10000, 4096)
	h.A.postSend(t, sendWR(1, 0, 1500))
	if typ == qp.RC {
		h.A.postSend(t, readWR(2, 0x8000, 0, 1500))
		h.A.postSend(t, atomicWR(3, qp.WRFetchAdd, 0x9000, 0, 1, 0))
	}
	h.A.postSend(t, writeWR(4, 0, 0, 100))
	for len(in) >= 2 {
		ti := int(in[0] & 1)
		target := h.eps[ti]
		n := int(in[1])
		in = in[2:]
		if n > len(in) {
			n = len(in)
		}
		var p packet.Packet
		if p.Decode(in[:n]) == nil {
			p.BTH.DestQP = target.qp.QPN()
			target.qp.Receive(h.Now, &qp.Incoming{Pkt: p, Src: h.eps[1-ti].addr, Dst: target.addr,
				IPHeader: make([]byte, packet.IPv4Len)})
		}
		in = in[n:]
		// A few steps of the conversation between forgeries.
		for k := 0; k < 4; k++ {
			h.transmit(0)
			h.transmit(1)
			for len(h.queue) > 0 {
				h.deliver()
			}
		}
	}
	if err := h.Run(nil); err != nil && !errors.Is(err, errTime) {
		t.Fatalf("after forged packets: %v\n%s", err, h.Dump(30))
	}
	if len(h.Errors) > 0 {
		t.Fatalf("harness: %v", h.Errors)
	}
}

// TestForgedPackets runs forgedRun on seeded mutations of real packets:
// header bytes flipped, opcodes swapped, PSNs moved near the expected ones,
// lengths cut, several forgeries per conversation. (FuzzForgedPackets lets
// the fuzzer search further.)
func TestForgedPackets(t *testing.T) {
	seeds := forgedSeeds(t)
	n := 400
	if testing.Short() {
		n = 50
	}
	for i := 0; i < n; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 0xf0f0))
		var in []byte
		for k := 0; k < 1+r.IntN(6); k++ {
			rec := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
			tr := rec[2:]
			switch r.IntN(5) {
			case 0: // flip header bytes
				for j := 0; j < 1+r.IntN(4); j++ {
					tr[r.IntN(min(len(tr), 48))] ^= byte(1 << r.IntN(8))
				}
			case 1: // another opcode, valid or not
				tr[0] = byte(r.IntN(256))
			case 2: // a PSN near the expected ones
				psn := binary.BigEndian.Uint32(tr[8:]) & 0xFFFFFF
				psn = (psn + uint32(r.IntN(9)) - 4) & 0xFFFFFF
				binary.BigEndian.PutUint32(tr[8:], psn|uint32(tr[8]&0x80)<<24)
			case 3: // cut short
				rec = rec[:2+r.IntN(len(tr)+1)]
				rec[1] = byte(len(rec) - 2)
			default: // as is, to the other side
				rec[0] ^= 1
			}
			in = append(in, rec...)
		}
		if r.IntN(4) == 0 && len(in) > 0 {
			in[0] |= 2 // a UC pair
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { forgedRun(t, in) })
	}
}

// FuzzForgedPackets is forgedRun under the fuzzer, seeded with real packets.
func FuzzForgedPackets(f *testing.F) {
	for _, s := range forgedSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(forgedRun)
}
