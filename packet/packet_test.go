package packet_test

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpcodeTable checks every opcode against the layouts of IBTA vol. 1
// table 38 and rxe_opcode.c (reference §1.2): headers in wire order, total
// header length, whether payload is allowed.
func TestOpcodeTable(t *testing.T) {
	type want struct {
		name    string
		kind    packet.Kind
		pos     packet.Position
		hdrs    packet.Hdr
		hdrLen  int
		payload bool
	}
	const (
		reth = packet.HdrRETH
		aeth = packet.HdrAETH
		imm  = packet.HdrImmDt
	)
	table := map[packet.Opcode]want{
		0x00: {"RC_SEND_FIRST", packet.KindSend, packet.PosFirst, 0, 12, true},
		0x01: {"RC_SEND_MIDDLE", packet.KindSend, packet.PosMiddle, 0, 12, true},
		0x02: {"RC_SEND_LAST", packet.KindSend, packet.PosLast, 0, 12, true},
		0x03: {"RC_SEND_LAST_WITH_IMMEDIATE", packet.KindSend, packet.PosLast, imm, 16, true},
		0x04: {"RC_SEND_ONLY", packet.KindSend, packet.PosOnly, 0, 12, true},
		0x05: {"RC_SEND_ONLY_WITH_IMMEDIATE", packet.KindSend, packet.PosOnly, imm, 16, true},
		0x06: {"RC_RDMA_WRITE_FIRST", packet.KindWrite, packet.PosFirst, reth, 28, true},
		0x07: {"RC_RDMA_WRITE_MIDDLE", packet.KindWrite, packet.PosMiddle, 0, 12, true},
		0x08: {"RC_RDMA_WRITE_LAST", packet.KindWrite, packet.PosLast, 0, 12, true},
		0x09: {"RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", packet.KindWrite, packet.PosLast, imm, 16, true},
		0x0A: {"RC_RDMA_WRITE_ONLY", packet.KindWrite, packet.PosOnly, reth, 28, true},
		0x0B: {"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", packet.KindWrite, packet.PosOnly, reth | imm, 32, true},
		0x0C: {"RC_RDMA_READ_REQUEST", packet.KindReadRequest, packet.PosOnly, reth, 28, false},
		0x0D: {"RC_RDMA_READ_RESPONSE_FIRST", packet.KindReadResponse, packet.PosFirst, aeth, 16, true},
		0x0E: {"RC_RDMA_READ_RESPONSE_MIDDLE", packet.KindReadResponse, packet.PosMiddle, 0, 12, true},
		0x0F: {"RC_RDMA_READ_RESPONSE_LAST", packet.KindReadResponse, packet.PosLast, aeth, 16, true},
		0x10: {"RC_RDMA_READ_RESPONSE_ONLY", packet.KindReadResponse, packet.PosOnly, aeth, 16, true},
		0x11: {"RC_ACKNOWLEDGE", packet.KindAck, packet.PosOnly, aeth, 16, false},
		0x12: {"RC_ATOMIC_ACKNOWLEDGE", packet.KindAtomicAck, packet.PosOnly, aeth | packet.HdrAtomicAckETH, 24, false},
		0x13: {"RC_CMP_SWAP", packet.KindCompareSwap, packet.PosOnly, packet.HdrAtomicETH, 40, false},
		0x14: {"RC_FETCH_ADD", packet.KindFetchAdd, packet.PosOnly, packet.HdrAtomicETH, 40, false},
		0x16: {"RC_SEND_LAST_WITH_INVALIDATE", packet.KindSend, packet.PosLast, packet.HdrIETH, 16, true},
		0x17: {"RC_SEND_ONLY_WITH_INVALIDATE", packet.KindSend, packet.PosOnly, packet.HdrIETH, 16, true},
		0x1C: {"RC_FLUSH", packet.KindFlush, packet.PosOnly, packet.HdrFETH | reth, 32, false},
		0x1D: {"RC_ATOMIC_WRITE", packet.KindAtomicWrite, packet.PosOnly, reth, 28, true},
		0x20: {"UC_SEND_FIRST", packet.KindSend, packet.PosFirst, 0, 12, true},
		0x21: {"UC_SEND_MIDDLE", packet.KindSend, packet.PosMiddle, 0, 12, true},
		0x22: {"UC_SEND_LAST", packet.KindSend, packet.PosLast, 0, 12, true},
		0x23: {"UC_SEND_LAST_WITH_IMMEDIATE", packet.KindSend, packet.PosLast, imm, 16, true},
		0x24: {"UC_SEND_ONLY", packet.KindSend, packet.PosOnly, 0, 12, true},
		0x25: {"UC_SEND_ONLY_WITH_IMMEDIATE", packet.KindSend, packet.PosOnly, imm, 16, true},
		0x26: {"UC_RDMA_WRITE_FIRST", packet.KindWrite, packet.PosFirst, reth, 28, true},
		0x27: {"UC_RDMA_WRITE_MIDDLE", packet.KindWrite, packet.PosMiddle, 0, 12, true},
		0x28: {"UC_RDMA_WRITE_LAST", packet.KindWrite, packet.PosLast, 0, 12, true},
		0x29: {"UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", packet.KindWrite, packet.PosLast, imm, 16, true},
		0x2A: {"UC_RDMA_WRITE_ONLY", packet.KindWrite, packet.PosOnly, reth, 28, true},
		0x2B: {"UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", packet.KindWrite, packet.PosOnly, reth | imm, 32, true},
		0x64: {"UD_SEND_ONLY", packet.KindSend, packet.PosOnly, packet.HdrDETH, 20, true},
		0x65: {"UD_SEND_ONLY_WITH_IMMEDIATE", packet.KindSend, packet.PosOnly, packet.HdrDETH | imm, 24, true},
		0x81: {"CNP", packet.KindCNP, packet.PosOnly, 0, 12, true},
	}
	for i := 0; i < 256; i++ {
		op := packet.Opcode(i)
		info := op.Info()
		w, ok := table[op]
		if !ok {
			assert.False(t, info.Valid, "opcode %#02x must be unknown", i)
			assert.False(t, op.Valid())
			assert.Equal(t, "UNKNOWN", op.String())
			assert.Equal(t, packet.BTHLen, info.HdrLen)
			continue
		}
		assert.True(t, info.Valid, "opcode %#02x", i)
		assert.Equal(t, w.name, op.String())
		assert.Equal(t, w.kind, info.Kind, w.name)
		assert.Equal(t, w.pos, info.Pos, w.name)
		assert.Equal(t, w.hdrs, info.Headers, w.name)
		assert.Equal(t, w.hdrLen, info.HdrLen, w.name)
		assert.Equal(t, w.payload, info.Payload, w.name)
		assert.Equal(t, packet.Transport(i&0xE0), info.Transport, w.name)
	}
	assert.Equal(t, 8, packet.RCAtomicWrite.Info().FixedPayload)
	assert.Equal(t, 16, packet.CNP.Info().FixedPayload)
	assert.Equal(t, "unknown", packet.Kind(200).String(), "out-of-range kind must not panic")
	assert.Equal(t, "RC", packet.RCSendOnly.Transport().String())
	assert.Equal(t, "UD", packet.UDSendOnly.Transport().String())
	assert.Equal(t, "RD", packet.Opcode(0x40).Transport().String())
}

// TestDecodeEveryOpcode encodes each valid opcode with representative
// headers and payload and checks the decode gives back every field and the
// exact wire layout.
func TestDecodeEveryOpcode(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, op := range validOpcodes() {
		for _, payLen := range []int{0, 1, 2, 3, 4, 5, 64, 1024, 4096} {
			info := op.Info()
			if !info.Payload && payLen != 0 || info.FixedPayload != 0 && payLen != info.FixedPayload {
				continue
			}
			t.Run(op.String(), func(t *testing.T) {
				p := randomPacket(rng, op, 0)
				p.BTH.TVer = 0
				p.Payload = bytes.Repeat([]byte{0xA5}, payLen)
				p.BTH.PadCnt = 3 // AppendTo must fix it
				wire := p.AppendTo(nil)
				pad := (4 - payLen%4) % 4
				require.Len(t, wire, info.HdrLen+payLen+pad+packet.ICRCLen)
				require.Equal(t, len(wire), p.Len())
				require.Equal(t, uint8(pad), packet.BTH(wire).PadCnt())
				require.Equal(t, make([]byte, pad+packet.ICRCLen), wire[info.HdrLen+payLen:], "pad and ICRC slot are zero")
				require.Equal(t, p.Payload, wire[info.HdrLen:info.HdrLen+payLen])

				var q packet.Packet
				require.NoError(t, q.Decode(wire))
				require.Equal(t, p, q)
				require.Equal(t, info, q.Info())
				// Decode aliases the buffer, never copies.
				if payLen > 0 {
					require.Same(t, &wire[info.HdrLen], &q.Payload[0])
				}
				// Extension headers sit at the offsets IBTA gives, in order.
				off := packet.BTHLen
				if info.Is(packet.HdrFETH) {
					require.Equal(t, p.FETH, packet.FETH(wire[off:]).Fields())
					off += packet.FETHLen
				}
				if info.Is(packet.HdrDETH) {
					require.Equal(t, p.DETH, packet.DETH(wire[off:]).Fields())
					off += packet.DETHLen
				}
				if info.Is(packet.HdrRETH) {
					require.Equal(t, p.RETH, packet.RETH(wire[off:]).Fields())
					off += packet.RETHLen
				}
				if info.Is(packet.HdrAtomicETH) {
					require.Equal(t, p.AtomicETH, packet.AtomicETH(wire[off:]).Fields())
					off += packet.AtomicETHLen
				}
				if info.Is(packet.HdrAETH) {
					require.Equal(t, p.AETH, packet.AETH(wire[off:]).Fields())
					off += packet.AETHLen
				}
				if info.Is(packet.HdrAtomicAckETH) {
					require.Equal(t, p.AtomicAck, packet.AtomicAckETH(wire[off:]).Orig())
					off += packet.AtomicAckETHLen
				}
				if info.Is(packet.HdrImmDt) {
					require.Equal(t, p.Imm, packet.ImmDt(wire[off:]).Imm())
					off += packet.ImmDtLen
				}
				if info.Is(packet.HdrIETH) {
					require.Equal(t, p.IETH, packet.IETH(wire[off:]).RKey())
					off += packet.IETHLen
				}
				require.Equal(t, info.HdrLen, off)
			})
		}
	}
}

// unknownOpcodes are the opcodes the brief lists as unknown: RC and UC gaps,
// RD (not supported) and everything above UD but CNP.
func unknownOpcodes() []packet.Opcode {
	var out []packet.Opcode
	add := func(lo, hi int) {
		for i := lo; i <= hi; i++ {
			out = append(out, packet.Opcode(i))
		}
	}
	add(0x15, 0x15)
	add(0x18, 0x1B)
	add(0x1E, 0x1F)
	add(0x2C, 0x3F)
	add(0x40, 0x63)
	add(0x66, 0x80)
	add(0x82, 0xFF)
	return out
}

func TestDecodeUnknownOpcodes(t *testing.T) {
	ops := unknownOpcodes()
	require.Len(t, ops, 256-len(validOpcodes()), "unknown and valid opcodes must partition the byte")
	for _, op := range ops {
		for _, n := range []int{0, 1, 15, 16, 40, 100} {
			b := make([]byte, n)
			if n > 0 {
				b[0] = byte(op)
			}
			for i := 1; i < n; i++ {
				b[i] = byte(i * 7)
			}
			var p packet.Packet
			err := p.Decode(b)
			if n < packet.BTHLen+packet.ICRCLen {
				assert.ErrorIs(t, err, packet.ErrTruncated, "opcode %#02x len %d", uint8(op), n)
			} else {
				assert.ErrorIs(t, err, packet.ErrUnknownOpcode, "opcode %#02x len %d", uint8(op), n)
			}
		}
	}
}

// TestDecodeErrors checks the structural checks Decode makes on hostile input.
func TestDecodeErrors(t *testing.T) {
	build := func(op packet.Opcode, payLen int, edit func(b []byte)) []byte {
		p := packet.Packet{BTH: packet.BTHFields{Opcode: op, PKey: 0xFFFF}, Payload: make([]byte, payLen)}
		if op == packet.CNP {
			p.Payload = make([]byte, packet.CNPPadLen)
		}
		b := p.AppendTo(nil)
		if edit != nil {
			edit(b)
		}
		return b
	}
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, packet.ErrTruncated},
		{"BTH only", build(packet.RCSendOnly, 0, nil)[:packet.BTHLen], packet.ErrTruncated},
		{"BTH and 3 bytes", build(packet.RCSendOnly, 0, nil)[:packet.BTHLen+3], packet.ErrTruncated},
		{"RETH cut", build(packet.RCWriteOnly, 0, nil)[:packet.BTHLen+packet.RETHLen], packet.ErrTruncated},
		{"AtomicETH cut", build(packet.RCCompareSwap, 0, nil)[:39+packet.ICRCLen], packet.ErrTruncated},
		{"atomic ack cut", build(packet.RCAtomicAcknowledge, 0, nil)[:23+packet.ICRCLen], packet.ErrTruncated},
		{"TVer 1", build(packet.RCSendOnly, 4, func(b []byte) { b[1] |= 1 }), packet.ErrBadVersion},
		{"TVer 15", build(packet.RCSendOnly, 4, func(b []byte) { b[1] |= 0xF }), packet.ErrBadVersion},
		{"pad exceeds empty payload", build(packet.RCSendOnly, 0, func(b []byte) { b[1] |= 0x30 }), packet.ErrBadPad},
		{"pad 3 over 2 bytes", append(build(packet.RCSendOnly, 0, func(b []byte) { b[1] |= 0x30 })[:packet.BTHLen], 0, 0, 0, 0, 0, 0), packet.ErrBadPad},
		{"payload on ACK", append(build(packet.RCAcknowledge, 0, nil), 0, 0, 0, 0), packet.ErrUnexpectedPay},
		{"payload on read request", append(build(packet.RCReadRequest, 0, nil), 0, 0, 0, 0), packet.ErrUnexpectedPay},
		{"pad on ACK", append(build(packet.RCAcknowledge, 0, func(b []byte) { b[1] |= 0x10 }), 0), packet.ErrUnexpectedPay},
		{"atomic write 4 bytes", build(packet.RCAtomicWrite, 4, nil), packet.ErrPayloadLength},
		{"atomic write 12 bytes", build(packet.RCAtomicWrite, 12, nil), packet.ErrPayloadLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p packet.Packet
			assert.ErrorIs(t, p.Decode(tt.b), tt.err)
		})
	}
	cnp := build(packet.CNP, 0, nil)
	cnp = append(cnp[:packet.BTHLen+8], 0, 0, 0, 0)
	var p packet.Packet
	assert.ErrorIs(t, p.Decode(cnp), packet.ErrPayloadLength)
}

// TestDecodePadCount checks that PadCnt pad bytes come off the payload.
func TestDecodePadCount(t *testing.T) {
	for pad := 0; pad < 4; pad++ {
		b := make([]byte, packet.BTHLen+8+packet.ICRCLen)
		packet.BTH(b).Encode(&packet.BTHFields{Opcode: packet.RCSendOnly, PadCnt: uint8(pad)})
		var p packet.Packet
		require.NoError(t, p.Decode(b))
		assert.Len(t, p.Payload, 8-pad)
		assert.Equal(t, uint8(pad), p.BTH.PadCnt)
	}
}

// TestRoundTripProperty encodes random packets of every opcode, decodes
// them and checks that the decode gives the packet back and that re-encoding
// gives the same bytes.
func TestRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(20260601))
	ops := validOpcodes()
	buf := make([]byte, 0, 8192)
	for i := 0; i < 20000; i++ {
		op := ops[rng.Intn(len(ops))]
		p := randomPacket(rng, op, 4200)
		p.BTH.TVer = 0
		buf = p.AppendTo(buf[:0])
		binary.LittleEndian.PutUint32(buf[len(buf)-4:], rng.Uint32()) // any ICRC
		var q packet.Packet
		require.NoError(t, q.Decode(buf), "packet %d: %s", i, op)
		require.Equal(t, p, q, "packet %d: %s", i, op)
		again := q.AppendTo(nil)
		require.Equal(t, buf[:len(buf)-4], again[:len(again)-4], "packet %d: %s", i, op)
	}
}

// TestRoundTripFrames builds whole frames for random packets over IPv4 and
// IPv6 and checks that ParseFrame and Decode get everything back and the
// ICRC verifies.
func TestRoundTripFrames(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	ops := validOpcodes()
	for i := 0; i < 4000; i++ {
		a := testAddr4
		if i%2 == 1 {
			a = testAddr6
		}
		a.SrcPort = uint16(rng.Uint32())
		a.TrafficClass = uint8(rng.Uint32())
		a.HopLimit = uint8(rng.Uint32())
		a.DstPort = packet.UDPPort
		if a.IsIPv4() {
			a.IPID = uint16(rng.Uint32())
			a.DF = rng.Intn(2) == 1
		} else {
			a.FlowLabel = rng.Uint32() & 0xFFFFF
		}
		p := randomPacket(rng, ops[rng.Intn(len(ops))], 1500)
		p.BTH.TVer = 0
		fr := packet.AppendFrame(nil, &testEth, &a, &p)
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		require.True(t, f.ICRCOK())
		require.Equal(t, a, f.Addressing())
		require.Equal(t, a.IsIPv4(), f.IsIPv4())
		var q packet.Packet
		require.NoError(t, q.Decode(f.Transport))
		require.Equal(t, p, q)
		// AppendUDPPayload gives the same transport bytes, ICRC included.
		require.Equal(t, f.Transport, packet.AppendUDPPayload(nil, &a, &p))
		ip := packet.AppendIPPacket(nil, &a, &p)
		require.Equal(t, fr[packet.EthernetLen:], ip)
		require.NoError(t, packet.ParseIP(ip, &f))
		require.Nil(t, f.Eth)
	}
}

func TestAppendToReusesCapacity(t *testing.T) {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly}, Payload: []byte{1, 2, 3}}
	buf := make([]byte, 5, 64)
	out := p.AppendTo(buf)
	require.Same(t, &buf[0], &out[0])
	require.Len(t, out, 5+p.Len())
	// Growing keeps the prefix.
	small := []byte{9, 9}
	out = p.AppendTo(small)
	require.Equal(t, []byte{9, 9}, out[:2])
	require.Len(t, out, 2+p.Len())
}
