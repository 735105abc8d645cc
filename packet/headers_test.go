package packet_test

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBTHFields(t *testing.T) {
	tests := []struct {
		name string
		f    packet.BTHFields
		wire [packet.BTHLen]byte
	}{
		{"zero", packet.BTHFields{}, [12]byte{}},
		{"max 24-bit QPN and PSN", packet.BTHFields{Opcode: 0xFF, PKey: 0xFFFF, DestQP: 0xFFFFFF, PSN: 0xFFFFFF},
			[12]byte{0xFF, 0, 0xFF, 0xFF, 0, 0xFF, 0xFF, 0xFF, 0, 0xFF, 0xFF, 0xFF}},
		{"all flags", packet.BTHFields{SE: true, MigReq: true, PadCnt: 3, TVer: 0xF, FECN: true, BECN: true, Resv6: 0x3F, AckReq: true, Resv7: 0x7F},
			[12]byte{0, 0xFF, 0, 0, 0xFF, 0, 0, 0, 0xFF, 0, 0, 0}},
		{"SE", packet.BTHFields{SE: true}, [12]byte{1: 0x80}},
		{"MigReq", packet.BTHFields{MigReq: true}, [12]byte{1: 0x40}},
		{"PadCnt 1", packet.BTHFields{PadCnt: 1}, [12]byte{1: 0x10}},
		{"PadCnt 2", packet.BTHFields{PadCnt: 2}, [12]byte{1: 0x20}},
		{"TVer 1", packet.BTHFields{TVer: 1}, [12]byte{1: 0x01}},
		{"FECN", packet.BTHFields{FECN: true}, [12]byte{4: 0x80}},
		{"BECN", packet.BTHFields{BECN: true}, [12]byte{4: 0x40}},
		{"Resv6", packet.BTHFields{Resv6: 0x21}, [12]byte{4: 0x21}},
		{"AckReq", packet.BTHFields{AckReq: true}, [12]byte{8: 0x80}},
		{"Resv7", packet.BTHFields{Resv7: 0x41}, [12]byte{8: 0x41}},
		{"QPN 1", packet.BTHFields{DestQP: 1}, [12]byte{7: 1}},
		{"PSN 0x800000", packet.BTHFields{PSN: 0x800000}, [12]byte{9: 0x80}},
		{"rxe send", packet.BTHFields{Opcode: packet.RCSendOnly, PadCnt: 2, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0xABCDEF},
			[12]byte{0x04, 0x20, 0xFF, 0xFF, 0, 0, 0, 0x11, 0x80, 0xAB, 0xCD, 0xEF}},
		{"max QPN with flags", packet.BTHFields{FECN: true, BECN: true, Resv6: 0x3F, DestQP: 0xFFFFFF, AckReq: true, Resv7: 0x7F, PSN: 0xFFFFFF},
			[12]byte{4: 0xFF, 5: 0xFF, 6: 0xFF, 7: 0xFF, 8: 0xFF, 9: 0xFF, 10: 0xFF, 11: 0xFF}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make(packet.BTH, packet.BTHLen)
			b.Encode(&tt.f)
			assert.Equal(t, tt.wire[:], []byte(b))
			assert.Equal(t, tt.f, packet.BTH(tt.wire[:]).Fields())
			v := packet.BTH(tt.wire[:])
			assert.Equal(t, tt.f.Opcode, v.Opcode())
			assert.Equal(t, tt.f.SE, v.SE())
			assert.Equal(t, tt.f.MigReq, v.MigReq())
			assert.Equal(t, tt.f.PadCnt, v.PadCnt())
			assert.Equal(t, tt.f.TVer, v.TVer())
			assert.Equal(t, tt.f.PKey, v.PKey())
			assert.Equal(t, tt.f.FECN, v.FECN())
			assert.Equal(t, tt.f.BECN, v.BECN())
			assert.Equal(t, tt.f.DestQP, v.DestQP())
			assert.Equal(t, tt.f.AckReq, v.AckReq())
			assert.Equal(t, tt.f.PSN, v.PSN())
		})
	}
}

func TestBTHEncodeMasksOversizedFields(t *testing.T) {
	b := make(packet.BTH, packet.BTHLen)
	b.Encode(&packet.BTHFields{PadCnt: 7, TVer: 0x1F, Resv6: 0xFF, DestQP: 0xFFFFFFFF, Resv7: 0xFF, PSN: 0xFFFFFFFF})
	f := b.Fields()
	assert.Equal(t, uint8(3), f.PadCnt)
	assert.Equal(t, uint8(0xF), f.TVer)
	assert.Equal(t, uint8(0x3F), f.Resv6)
	assert.Equal(t, uint32(0xFFFFFF), f.DestQP)
	assert.Equal(t, uint8(0x7F), f.Resv7)
	assert.Equal(t, uint32(0xFFFFFF), f.PSN)
	assert.False(t, f.FECN || f.BECN || f.AckReq || f.SE || f.MigReq, "oversized fields leaked into flags")
}

func TestBTHSetPSN(t *testing.T) {
	for _, psn := range []uint32{0, 1, 0x7FFFFF, 0x800000, 0xFFFFFF, 0x1000000, 0xFFFFFFFF} {
		b := make(packet.BTH, packet.BTHLen)
		b.Encode(&packet.BTHFields{AckReq: true, Resv7: 0x55, DestQP: 0xFFFFFF})
		b.SetPSN(psn)
		assert.Equal(t, psn&0xFFFFFF, b.PSN(), "psn %#x", psn)
		assert.True(t, b.AckReq(), "psn %#x clobbered AckReq", psn)
		assert.Equal(t, uint8(0x55), b.Fields().Resv7)
		assert.Equal(t, uint32(0xFFFFFF), b.DestQP())
	}
}

func TestRETHFields(t *testing.T) {
	tests := []struct {
		f    packet.RETHFields
		wire []byte
	}{
		{packet.RETHFields{}, make([]byte, 16)},
		{packet.RETHFields{VA: 0xFFFFFFFFFFFFFFFF, RKey: 0xFFFFFFFF, Length: 0xFFFFFFFF}, []byte{
			0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{packet.RETHFields{VA: 0x0102030405060708, RKey: 0x090A0B0C, Length: 0x0D0E0F10}, []byte{
			1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{packet.RETHFields{Length: 1 << 31}, []byte{12: 0x80, 15: 0}},
	}
	for _, tt := range tests {
		b := make(packet.RETH, packet.RETHLen)
		b.Encode(&tt.f)
		assert.Equal(t, tt.wire, []byte(b))
		assert.Equal(t, tt.f, packet.RETH(tt.wire).Fields())
		assert.Equal(t, tt.f.VA, b.VA())
		assert.Equal(t, tt.f.RKey, b.RKey())
		assert.Equal(t, tt.f.Length, b.Length())
	}
}

func TestAETHFields(t *testing.T) {
	tests := []struct {
		f    packet.AETHFields
		wire []byte
	}{
		{packet.AETHFields{}, []byte{0, 0, 0, 0}},
		{packet.AETHFields{Syndrome: 0xFF, MSN: 0xFFFFFF}, []byte{0xFF, 0xFF, 0xFF, 0xFF}},
		{packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited, MSN: 0x010203}, []byte{0x1F, 1, 2, 3}},
		{packet.AETHFields{Syndrome: packet.SyndromeNAKPSNSeq, MSN: 0x800000}, []byte{0x60, 0x80, 0, 0}},
		{packet.AETHFields{Syndrome: packet.MakeRNR(31), MSN: 1}, []byte{0x3F, 0, 0, 1}},
	}
	for _, tt := range tests {
		b := make(packet.AETH, packet.AETHLen)
		b.Encode(&tt.f)
		assert.Equal(t, tt.wire, []byte(b))
		assert.Equal(t, tt.f, packet.AETH(tt.wire).Fields())
	}
	b := make(packet.AETH, packet.AETHLen)
	b.Encode(&packet.AETHFields{Syndrome: 0x12, MSN: 0xFFFFFFFF})
	assert.Equal(t, packet.AETHFields{Syndrome: 0x12, MSN: 0xFFFFFF}, b.Fields(), "MSN must not spill into the syndrome")
}

func TestAtomicETHFields(t *testing.T) {
	tests := []struct {
		f    packet.AtomicETHFields
		wire []byte
	}{
		{packet.AtomicETHFields{}, make([]byte, 28)},
		{packet.AtomicETHFields{VA: 0x0102030405060708, RKey: 0x090A0B0C, SwapAdd: 0x0D0E0F1011121314, Compare: 0x15161718191A1B1C},
			[]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28}},
		{packet.AtomicETHFields{VA: ^uint64(0), RKey: ^uint32(0), SwapAdd: ^uint64(0), Compare: ^uint64(0)},
			[]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
	}
	for _, tt := range tests {
		b := make(packet.AtomicETH, packet.AtomicETHLen)
		b.Encode(&tt.f)
		assert.Equal(t, tt.wire, []byte(b))
		assert.Equal(t, tt.f, packet.AtomicETH(tt.wire).Fields())
	}
}

func TestSmallHeaders(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x0102030405060708, 1 << 63, ^uint64(0)} {
		b := make(packet.AtomicAckETH, packet.AtomicAckETHLen)
		b.Encode(v)
		assert.Equal(t, v, b.Orig())
		assert.Equal(t, byte(v>>56), b[0], "big-endian")
	}
	for _, v := range []uint32{0, 1, 0x01020304, 1 << 31, ^uint32(0)} {
		i := make(packet.ImmDt, packet.ImmDtLen)
		i.Encode(v)
		assert.Equal(t, v, i.Imm())
		assert.Equal(t, []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}, []byte(i), "ImmDt keeps wire order")
		e := make(packet.IETH, packet.IETHLen)
		e.Encode(v)
		assert.Equal(t, v, e.RKey())
		assert.Equal(t, []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}, []byte(e))
	}
}

func TestDETHFields(t *testing.T) {
	tests := []struct {
		f    packet.DETHFields
		wire []byte
	}{
		{packet.DETHFields{}, make([]byte, 8)},
		{packet.DETHFields{QKey: 0x80010000, SrcQP: 1}, []byte{0x80, 0x01, 0, 0, 0, 0, 0, 1}},
		{packet.DETHFields{QKey: 0xFFFFFFFF, Resv: 0xFF, SrcQP: 0xFFFFFF}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{packet.DETHFields{QKey: 0x11111111, SrcQP: 0xFFFFFF}, []byte{0x11, 0x11, 0x11, 0x11, 0, 0xFF, 0xFF, 0xFF}},
		{packet.DETHFields{Resv: 0x5A, SrcQP: 0x800000}, []byte{4: 0x5A, 5: 0x80, 7: 0}},
	}
	for _, tt := range tests {
		b := make(packet.DETH, packet.DETHLen)
		b.Encode(&tt.f)
		assert.Equal(t, tt.wire, []byte(b))
		assert.Equal(t, tt.f, packet.DETH(tt.wire).Fields())
		assert.Equal(t, tt.f.QKey, b.QKey())
		assert.Equal(t, tt.f.SrcQP, b.SrcQP())
	}
	b := make(packet.DETH, packet.DETHLen)
	b.Encode(&packet.DETHFields{SrcQP: 0xFFFFFFFF})
	assert.Equal(t, byte(0), b[4], "24-bit source QP must not spill into the reserved byte")
}

// TestFETHFields checks the layout rxe uses (rxe_hdr.h FETH_PLT_MASK bits
// 3:0, FETH_SEL_MASK bits 5:4 of the big-endian word).
func TestFETHFields(t *testing.T) {
	tests := []struct {
		f    packet.FETHFields
		wire []byte
	}{
		{packet.FETHFields{}, []byte{0, 0, 0, 0}},
		{packet.FETHFields{Placement: 1}, []byte{0, 0, 0, 0x01}},
		{packet.FETHFields{Placement: 2}, []byte{0, 0, 0, 0x02}},
		{packet.FETHFields{Placement: 0xF}, []byte{0, 0, 0, 0x0F}},
		{packet.FETHFields{Selectivity: 1}, []byte{0, 0, 0, 0x10}},
		{packet.FETHFields{Selectivity: 3, Placement: 0xF}, []byte{0, 0, 0, 0x3F}},
		{packet.FETHFields{Resv: 1}, []byte{0, 0, 0, 0x40}},
		{packet.FETHFields{Resv: 0x3FFFFFF, Selectivity: 3, Placement: 0xF}, []byte{0xFF, 0xFF, 0xFF, 0xFF}},
	}
	for _, tt := range tests {
		b := make(packet.FETH, packet.FETHLen)
		b.Encode(&tt.f)
		assert.Equal(t, tt.wire, []byte(b), "%+v", tt.f)
		assert.Equal(t, tt.f, packet.FETH(tt.wire).Fields())
	}
	b := make(packet.FETH, packet.FETHLen)
	b.Encode(&packet.FETHFields{Selectivity: 0xFF, Placement: 0xFF})
	require.Equal(t, []byte{0, 0, 0, 0x3F}, []byte(b), "oversized fields must be masked")
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     packet.Syndrome
		typ   packet.AckType
		value uint8
		str   string
	}{
		{packet.SyndromeACKUnlimited, packet.AckTypeACK, 31, "ACK credits=31"},
		{packet.MakeACK(0), packet.AckTypeACK, 0, "ACK credits=0"},
		{packet.MakeACK(0xFF), packet.AckTypeACK, 31, "ACK credits=31"},
		{packet.MakeRNR(14), packet.AckTypeRNR, 14, "RNR timer=14"},
		{packet.MakeRNR(0xFF), packet.AckTypeRNR, 31, "RNR timer=31"},
		{packet.SyndromeNAKPSNSeq, packet.AckTypeNAK, 0, "NAK PSN-sequence-error"},
		{packet.SyndromeNAKInvReq, packet.AckTypeNAK, 1, "NAK invalid-request"},
		{packet.SyndromeNAKRemAccess, packet.AckTypeNAK, 2, "NAK remote-access-error"},
		{packet.SyndromeNAKRemOp, packet.AckTypeNAK, 3, "NAK remote-operational-error"},
		{packet.SyndromeNAKInvRDReq, packet.AckTypeNAK, 4, "NAK invalid-RD-request"},
		{packet.MakeNAK(9), packet.AckTypeNAK, 9, "NAK code=9"},
		{0x45, packet.AckTypeReserved, 5, "reserved 0x45"},
		{0x80 | packet.SyndromeACKUnlimited, packet.AckTypeACK, 31, "ACK credits=31"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.typ, tt.s.Type(), "%#x", uint8(tt.s))
		assert.Equal(t, tt.value, tt.s.Value())
		assert.Equal(t, tt.str, tt.s.String())
		assert.Equal(t, tt.typ == packet.AckTypeACK, tt.s.IsACK())
		assert.Equal(t, tt.typ == packet.AckTypeRNR, tt.s.IsRNR())
		assert.Equal(t, tt.typ == packet.AckTypeNAK, tt.s.IsNAK())
	}
}

func TestRNRTimerNanos(t *testing.T) {
	assert.Equal(t, int64(655_360_000), packet.RNRTimerNanos(0), "code 0 is the longest, 655.36 ms")
	assert.Equal(t, int64(10_000), packet.RNRTimerNanos(1))
	assert.Equal(t, int64(1_280_000), packet.RNRTimerNanos(14))
	assert.Equal(t, int64(491_520_000), packet.RNRTimerNanos(31))
	assert.Equal(t, packet.RNRTimerNanos(1), packet.RNRTimerNanos(33), "code is 5 bits")
	for c := uint8(2); c < 32; c++ {
		assert.Greater(t, packet.RNRTimerNanos(c), packet.RNRTimerNanos(c-1), "code %d", c)
	}
}
