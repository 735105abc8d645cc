package packet_test

import (
	"fmt"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// benchSizes are the payload sizes benchmarked: a small message and a
// 4 KiB MTU packet.
var benchSizes = []int{64, 4096}

func benchPacket(n int) packet.Packet {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i)
	}
	return packet.Packet{
		BTH:     packet.BTHFields{Opcode: packet.RCWriteOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x123456},
		RETH:    packet.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, Length: uint32(n)},
		Payload: payload,
	}
}

func BenchmarkAppendTo(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := benchPacket(n)
			buf := make([]byte, 0, p.Len())
			b.SetBytes(int64(p.Len()))
			b.ReportAllocs()
			for b.Loop() {
				buf = p.AppendTo(buf[:0])
			}
		})
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := benchPacket(n)
			a := testAddr4
			buf := make([]byte, 0, packet.EthernetLen+a.HeaderLen()+p.Len())
			b.SetBytes(int64(cap(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = packet.AppendFrame(buf[:0], &testEth, &a, &p)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := benchPacket(n)
			wire := p.AppendTo(nil)
			var q packet.Packet
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Decode(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := benchPacket(n)
			fr := packet.AppendFrame(nil, &testEth, &testAddr4, &p)
			var f packet.Frame
			b.SetBytes(int64(len(fr)))
			b.ReportAllocs()
			for b.Loop() {
				if err := packet.ParseFrame(fr, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkComputeICRC(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			p := benchPacket(n)
			fr := packet.AppendFrame(nil, &testEth, &testAddr4, &p)
			var f packet.Frame
			require.NoError(b, packet.ParseFrame(fr, &f))
			ipudp, tr := f.IPUDP(), f.Transport[:len(f.Transport)-packet.ICRCLen]
			b.SetBytes(int64(len(ipudp) + len(tr)))
			b.ReportAllocs()
			var sink uint32
			for b.Loop() {
				sink += packet.ComputeICRC(ipudp, tr)
			}
			_ = sink
		})
	}
}

// TestHotPathAllocs asserts the data path does not allocate: decoding,
// parsing frames (ICRC check included) and encoding into a buffer with room.
func TestHotPathAllocs(t *testing.T) {
	for _, n := range []int{0, 64, 4096} {
		p := benchPacket(n)
		wire := p.AppendTo(nil)
		fr := packet.AppendFrame(nil, &testEth, &testAddr6, &p)
		var q packet.Packet
		var f packet.Frame
		buf := make([]byte, 0, len(fr))
		a := testAddr6
		allocs := map[string]float64{
			"Decode":     testing.AllocsPerRun(100, func() { _ = q.Decode(wire) }),
			"ParseFrame": testing.AllocsPerRun(100, func() { _ = packet.ParseFrame(fr, &f) }),
			"ICRCOK":     testing.AllocsPerRun(100, func() { _ = f.ICRCOK() }),
			"AppendTo":   testing.AllocsPerRun(100, func() { buf = p.AppendTo(buf[:0]) }),
			"AppendFrame": testing.AllocsPerRun(100, func() {
				buf = packet.AppendFrame(buf[:0], &testEth, &a, &p)
			}),
			"AppendUDPPayload": testing.AllocsPerRun(100, func() { buf = packet.AppendUDPPayload(buf[:0], &a, &p) }),
		}
		for name, v := range allocs {
			require.Zero(t, v, "%s with %d-byte payload allocates", name, n)
		}
		require.NoError(t, q.Decode(wire))
		require.NoError(t, packet.ParseFrame(fr, &f))
		require.True(t, f.ICRCOK())
	}
}
