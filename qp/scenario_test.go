package qp_test

// Scenario tests: one test per transport rule of the "transport engine"
// issue, each a scripted run of two QPs over the harness wire.

import (
	"encoding/binary"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// ackTimeout is the local ACK timeout an attribute value asks for:
// 4.096 us * 2^t.
func ackTimeout(t uint8) qp.Time { return qp.Time(4096) << t }

// psnAdd adds modulo 2^24.
func psnAdd(p, n uint32) uint32 { return (p + n) & 0xFFFFFF }

// multiSize is a message of FIRST, MIDDLE, MIDDLE, LAST at MTU 1024.
const multiSize = 3*1024 + 100

// TestLossOfPacketPosition drops the FIRST, MIDDLE, LAST or ONLY packet of
// the second of three SEND or WRITE messages, or of the second of three
// READs' responses, and checks that go-back-N recovers: every message
// completes once, in order, with the right bytes.
func TestLossOfPacketPosition(t *testing.T) {
	type opDef struct {
		name                   string
		first, mid, last, only packet.Opcode
		responses              bool // the dropped packet is a response from B
	}
	ops := []opDef{
		{"SEND", packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLast, packet.RCSendOnly, false},
		{"WRITE", packet.RCWriteFirst, packet.RCWriteMiddle, packet.RCWriteLast, packet.RCWriteOnly, false},
		{"READ", packet.RCReadResponseFirst, packet.RCReadResponseMid, packet.RCReadResponseLast, packet.RCReadResponseOnly, true},
	}
	for _, o := range ops {
		for _, pos := range []string{"FIRST", "MIDDLE", "LAST", "ONLY"} {
			t.Run(o.name+"/"+pos, func(t *testing.T) {
				h := pair(t, qp.RC, defaultLink())
				size := uint32(multiSize)
				var op packet.Opcode
				nth := 2 // the second message's packet
				switch pos {
				case "FIRST":
					op = o.first
				case "MIDDLE":
					op, nth = o.mid, 3 // two MIDDLEs per message
				case "LAST":
					op = o.last
				case "ONLY":
					op, size = o.only, 700
				}
				dir := FromA()
				if o.responses {
					dir = FromB()
				}
				rule := h.Drop(All(dir, Op(op)), nth)
				fill(h.A.local, 1)
				fill(h.B.remote, 2)
				for i := uint64(0); i < 3; i++ {
					switch o.name {
					case "SEND":
						h.B.postRecv(t, 100+i, i*8192, 8192)
						h.A.postSend(t, sendWR(1+i, i*8192, size))
					case "WRITE":
						h.A.postSend(t, writeWR(1+i, i*8192, i*8192, size))
					case "READ":
						h.A.postSend(t, readWR(1+i, 0x20000+i*8192, i*8192, size))
					}
				}
				h.MustRun(func() bool { return len(h.A.sendWCs) == 3 && (o.name != "SEND" || len(h.B.recvWCs) == 3) })
				h.MustRun(nil) // and then the wire goes quiet: no stray retransmissions
				require.Equal(t, 1, rule.Fired, "the script dropped a packet\n%s", h.Dump(40))
				requireWCs(t, h.A.sendWCs, []uint64{1, 2, 3}, qp.WCSuccess)
				for i := uint64(0); i < 3; i++ {
					switch o.name {
					case "SEND":
						require.Equal(t, qp.WCRecv, h.B.recvWCs[i].Opcode)
						require.Equal(t, size, h.B.recvWCs[i].ByteLen)
						require.Equal(t, h.A.local[i*8192:i*8192+uint64(size)], h.B.local[i*8192:i*8192+uint64(size)], "message %d", i)
					case "WRITE":
						require.Equal(t, qp.WCRDMAWrite, h.A.sendWCs[i].Opcode)
						require.Equal(t, h.A.local[i*8192:i*8192+uint64(size)], h.B.remote[i*8192:i*8192+uint64(size)], "message %d", i)
					case "READ":
						require.Equal(t, qp.WCRDMARead, h.A.sendWCs[i].Opcode)
						require.Equal(t, size, h.A.sendWCs[i].ByteLen)
						require.Equal(t, h.B.remote[i*8192:i*8192+uint64(size)], h.A.local[0x20000+i*8192:0x20000+i*8192+uint64(size)], "read %d", i)
					}
				}
				if o.name == "SEND" {
					requireWCs(t, h.B.recvWCs, []uint64{100, 101, 102}, qp.WCSuccess)
				} else {
					require.Empty(t, h.B.recvWCs)
				}
				// The lost PSN was carried again and delivered.
				var lost *Frame
				for _, f := range h.Frames {
					if f.Fate == "dropped" {
						lost = f
					}
				}
				require.NotNil(t, lost)
				again := h.Select(func(f *Frame) bool {
					return f.Seq > lost.Seq && f.From == lost.From && f.PSN() == lost.PSN() && f.Delivered > 0
				})
				require.NotEmpty(t, again, "PSN %#x never delivered after the loss\n%s", lost.PSN(), h.Dump(60))
			})
		}
	}
}

// TestLossOfACKs: a lost ACK of the only outstanding message is recovered by
// a timeout retransmission that the responder treats as a duplicate (no
// second receive completion); lost ACKs followed by a later ACK are covered
// by it (ACKs are cumulative) without any retransmission.
func TestLossOfACKs(t *testing.T) {
	t.Run("only ACK lost", func(t *testing.T) {
		l := defaultLink()
		l.Timeout = 12
		h := pair(t, qp.RC, l)
		h.Drop(All(FromB(), Op(packet.RCAcknowledge)), 1)
		fill(h.A.local, 3)
		h.B.postRecv(t, 100, 0, 4096)
		h.B.postRecv(t, 101, 4096, 4096)
		h.A.postSend(t, sendWR(1, 0, 2000))
		h.MustRun(h.sendsDone(h.A, 1))
		h.MustRun(nil)
		requireWCs(t, h.A.sendWCs, []uint64{1}, qp.WCSuccess)
		requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
		require.Equal(t, h.A.local[:2000], h.B.local[:2000])
		require.NotZero(t, h.B.qp.Counters().DuplicateRequest, "responder saw the retransmission as a duplicate")
		last := h.Select(FromA(), Op(packet.RCSendLast))
		require.Len(t, last, 2, "SEND_LAST sent twice\n%s", h.Dump(20))
		first := h.Select(FromA(), Op(packet.RCSendFirst))
		require.Len(t, first, 2, "the whole message went again")
		require.GreaterOrEqual(t, first[1].Time-first[0].Time, ackTimeout(l.Timeout), "retransmitted before the ACK timeout")
		acks := h.Select(FromB(), Op(packet.RCAcknowledge))
		require.Len(t, acks, 2, "the duplicate was re-ACKed")
		require.Equal(t, acks[0].PSN(), acks[1].PSN())
	})
	t.Run("earlier ACKs lost", func(t *testing.T) {
		h := pair(t, qp.RC, defaultLink())
		h.Drop(All(FromB(), Op(packet.RCAcknowledge)), 1)
		h.Drop(All(FromB(), Op(packet.RCAcknowledge)), 2)
		h.Drop(All(FromB(), Op(packet.RCAcknowledge)), 3)
		fill(h.A.local, 4)
		for i := uint64(0); i < 4; i++ {
			h.B.postRecv(t, 100+i, i*4096, 4096)
		}
		// One SEND at a time, each posted once the responder has ACKed the
		// one before (an ACK the wire then drops), all within microseconds,
		// long before the 67 ms ACK timeout: the fourth ACK covers all.
		for i := uint64(0); i < 4; i++ {
			h.A.postSend(t, sendWR(1+i, i*4096, 500))
			n := int(i) + 1
			require.NoError(t, h.Run(func() bool { return len(h.Select(FromB())) == n }))
		}
		h.MustRun(h.sendsDone(h.A, 4))
		h.MustRun(nil)
		requireWCs(t, h.A.sendWCs, []uint64{1, 2, 3, 4}, qp.WCSuccess)
		requireWCs(t, h.B.recvWCs, []uint64{100, 101, 102, 103}, qp.WCSuccess)
		require.Len(t, h.Select(FromA()), 4, "no retransmission:\n%s", h.Dump(20))
	})
	t.Run("atomic ACK and read response lost", func(t *testing.T) {
		h := pair(t, qp.RC, defaultLink())
		h.Drop(All(FromB(), Op(packet.RCAtomicAcknowledge)), 1)
		h.Drop(All(FromB(), Op(packet.RCReadResponseOnly)), 1)
		binary.LittleEndian.PutUint64(h.B.remote[0:], 40)
		fill(h.B.remote[64:128], 5)
		h.A.postSend(t, atomicWR(1, qp.WRFetchAdd, 0, 0, 2, 0))
		h.A.postSend(t, readWR(2, 64, 64, 64))
		h.MustRun(h.sendsDone(h.A, 2))
		requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
		require.Equal(t, uint64(42), binary.LittleEndian.Uint64(h.B.remote[0:]), "fetch-add executed once")
		require.Equal(t, uint64(40), binary.LittleEndian.Uint64(h.A.local[0:]), "original value returned")
		require.Equal(t, h.B.remote[64:128], h.A.local[64:128])
	})
}

// TestDuplicatedPackets delivers every packet of one direction twice.
func TestDuplicatedPackets(t *testing.T) {
	for _, dir := range []string{"requests", "responses"} {
		t.Run(dir, func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			if dir == "requests" {
				h.Dup(FromA(), 0)
			} else {
				h.Dup(FromB(), 0)
			}
			fill(h.A.local, 6)
			fill(h.B.remote, 7)
			binary.LittleEndian.PutUint64(h.B.remote[0x8000:], 1000)
			h.B.postRecv(t, 100, 0x10000, 8192)
			h.B.postRecv(t, 101, 0x12000, 8192)
			h.A.postSend(t, sendWR(1, 0, multiSize))
			h.A.postSend(t, writeWR(2, 0x2000, 0x4000, 2500))
			h.A.postSend(t, readWR(3, 0x10000, 0x1000, 3000))
			h.A.postSend(t, atomicWR(4, qp.WRFetchAdd, 0x18000, 0x8000, 5, 0))
			h.A.postSend(t, sendWR(5, 0x3000, 10))
			h.MustRun(func() bool { return len(h.A.sendWCs) == 5 && len(h.B.recvWCs) == 2 })
			h.MustRun(nil)
			requireWCs(t, h.A.sendWCs, seq(1, 5), qp.WCSuccess)
			requireWCs(t, h.B.recvWCs, []uint64{100, 101}, qp.WCSuccess)
			require.Equal(t, h.A.local[:multiSize], h.B.local[0x10000:0x10000+multiSize])
			require.Equal(t, h.A.local[0x3000:0x3000+10], h.B.local[0x12000:0x12000+10])
			require.Equal(t, h.A.local[0x2000:0x2000+2500], h.B.remote[0x4000:0x4000+2500])
			require.Equal(t, h.B.remote[0x1000:0x1000+3000], h.A.local[0x10000:0x10000+3000])
			require.Equal(t, uint64(1005), binary.LittleEndian.Uint64(h.B.remote[0x8000:]), "fetch-add once")
			require.Equal(t, uint64(1000), binary.LittleEndian.Uint64(h.A.local[0x18000:]))
			if dir == "requests" {
				require.NotZero(t, h.B.qp.Counters().DuplicateRequest)
			}
		})
	}
}

// TestReorderedPackets holds one packet back behind later ones: the
// responder NAKs the PSN gap (sequence error) and the requester goes back.
func TestReorderedPackets(t *testing.T) {
	for _, c := range []struct {
		name  string
		match Pred
		nth   int
	}{
		{"SEND_FIRST", Op(packet.RCSendFirst), 2},
		{"SEND_MIDDLE", Op(packet.RCSendMiddle), 1},
		{"WRITE_LAST", Op(packet.RCWriteLast), 1},
		{"READ_RESPONSE_FIRST", Op(packet.RCReadResponseFirst), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			h.Reorder(c.match, c.nth, 2)
			fill(h.A.local, 8)
			fill(h.B.remote, 9)
			for i := uint64(0); i < 3; i++ {
				h.B.postRecv(t, 100+i, 0x10000+i*8192, 8192)
			}
			h.A.postSend(t, sendWR(1, 0, multiSize))
			h.A.postSend(t, sendWR(2, 0x2000, multiSize))
			h.A.postSend(t, writeWR(3, 0x4000, 0x4000, multiSize))
			h.A.postSend(t, readWR(4, 0x8000, 0x8000, multiSize))
			h.A.postSend(t, sendWR(5, 0x6000, 100))
			h.MustRun(func() bool { return len(h.A.sendWCs) == 5 && len(h.B.recvWCs) == 3 })
			h.MustRun(nil)
			requireWCs(t, h.A.sendWCs, seq(1, 5), qp.WCSuccess)
			requireWCs(t, h.B.recvWCs, []uint64{100, 101, 102}, qp.WCSuccess)
			require.Equal(t, h.A.local[:multiSize], h.B.local[0x10000:0x10000+multiSize])
			require.Equal(t, h.A.local[0x2000:0x2000+multiSize], h.B.local[0x12000:0x12000+multiSize])
			require.Equal(t, h.A.local[0x6000:0x6000+100], h.B.local[0x14000:0x14000+100])
			require.Equal(t, h.A.local[0x4000:0x4000+multiSize], h.B.remote[0x4000:0x4000+multiSize])
			require.Equal(t, h.B.remote[0x8000:0x8000+multiSize], h.A.local[0x8000:0x8000+multiSize])
			if c.name != "READ_RESPONSE_FIRST" {
				naks := h.Select(FromB(), NAK())
				require.NotEmpty(t, naks, "responder NAKs the gap\n%s", h.Dump(40))
				require.Equal(t, packet.SyndromeNAKPSNSeq, naks[0].Pkt.AETH.Syndrome)
				held := h.Select(func(f *Frame) bool { return f.Fate == "held" })
				require.Len(t, held, 1)
				require.Equal(t, held[0].PSN(), naks[0].PSN(), "the NAK names the PSN the responder expects")
				require.NotZero(t, h.B.qp.Counters().OutOfSeqRequest)
			}
		})
	}
}

// TestCorruptedICRC flips a byte of one packet: the receiver's ICRC check
// drops it and retransmission recovers.
func TestCorruptedICRC(t *testing.T) {
	for _, c := range []struct {
		name  string
		match Pred
		off   int
	}{
		{"SEND_MIDDLE payload", All(FromA(), Op(packet.RCSendMiddle)), 100},
		{"SEND_FIRST BTH opcode", All(FromA(), Op(packet.RCSendFirst)), 0},
		{"ACK AETH", All(FromB(), Op(packet.RCAcknowledge)), packet.BTHLen + 1},
		{"READ_RESPONSE_LAST payload", All(FromB(), Op(packet.RCReadResponseLast)), 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			r := h.CorruptAt(c.match, 1, c.off)
			fill(h.A.local, 10)
			fill(h.B.remote, 11)
			h.B.postRecv(t, 100, 0x10000, 8192)
			h.A.postSend(t, sendWR(1, 0, multiSize))
			h.A.postSend(t, readWR(2, 0x8000, 0, multiSize))
			h.MustRun(func() bool { return len(h.A.sendWCs) == 2 && len(h.B.recvWCs) == 1 })
			h.MustRun(nil)
			require.Equal(t, 1, r.Fired)
			require.Equal(t, 1, h.ICRCDrops, "the corrupted packet failed its ICRC check")
			requireWCs(t, h.A.sendWCs, []uint64{1, 2}, qp.WCSuccess)
			requireWCs(t, h.B.recvWCs, []uint64{100}, qp.WCSuccess)
			require.Equal(t, h.A.local[:multiSize], h.B.local[0x10000:0x10000+multiSize])
			require.Equal(t, h.B.remote[:multiSize], h.A.local[0x8000:0x8000+multiSize])
		})
	}
}
