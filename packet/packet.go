package packet

import "errors"

// Decoding errors. They are sentinel values so that decoding never allocates.
var (
	ErrTruncated     = errors.New("roce: packet truncated")
	ErrUnknownOpcode = errors.New("roce: unknown opcode")
	ErrBadPad        = errors.New("roce: pad count exceeds payload")
	ErrBadVersion    = errors.New("roce: BTH transport version is not 0")
	ErrUnexpectedPay = errors.New("roce: payload on an opcode that carries none")
	ErrPayloadLength = errors.New("roce: payload length does not fit the opcode")
)

// Packet is a decoded InfiniBand transport packet: the BTH, the extension
// headers its opcode calls for, and the payload. Only the headers named by
// BTH.Opcode.Info().Headers are meaningful; the others are left as they were.
// Payload aliases the buffer it was decoded from (or, when encoding, the
// memory it is copied from), so a Packet carries no payload bytes of its own.
type Packet struct {
	BTH       BTHFields
	RETH      RETHFields
	AETH      AETHFields
	AtomicETH AtomicETHFields
	AtomicAck uint64 // AtomicAckETH: the original remote value
	Imm       uint32 // ImmDt, in wire order
	IETH      uint32 // rkey to invalidate
	DETH      DETHFields
	FETH      FETHFields
	Payload   []byte // excludes pad and ICRC
}

// Info returns the description of the packet's opcode.
func (p *Packet) Info() *OpcodeInfo { return p.BTH.Opcode.Info() }

// Pad returns the number of pad bytes the payload needs to reach a multiple of 4.
func (p *Packet) Pad() int { return (4 - len(p.Payload)&3) & 3 }

// Len returns the encoded length: headers, payload, pad and ICRC.
func (p *Packet) Len() int { return p.Info().HdrLen + len(p.Payload) + p.Pad() + ICRCLen }

// Decode parses the transport part of a RoCE v2 packet (the UDP payload:
// BTH through ICRC). It checks structure only; the ICRC is verified separately
// because it covers the IP and UDP headers. Payload aliases b. On error the
// fields of p are unspecified.
//
// Like rxe, Decode takes PadCnt bytes off the end of the payload without
// requiring payload plus pad to be a multiple of four; such a packet
// re-encodes with the pad its payload length calls for.
func (p *Packet) Decode(b []byte) error {
	if len(b) < BTHLen+ICRCLen {
		return ErrTruncated
	}
	bth := BTH(b)
	p.BTH = bth.Fields()
	info := p.BTH.Opcode.Info()
	if !info.Valid {
		return ErrUnknownOpcode
	}
	if p.BTH.TVer != 0 {
		return ErrBadVersion
	}
	end := len(b) - ICRCLen
	if end < info.HdrLen {
		return ErrTruncated
	}
	off := BTHLen
	for _, e := range hdrOrder {
		if info.Headers&e.h == 0 {
			continue
		}
		h := b[off : off+e.len]
		switch e.h {
		case HdrFETH:
			p.FETH = FETH(h).Fields()
		case HdrDETH:
			p.DETH = DETH(h).Fields()
		case HdrRETH:
			p.RETH = RETH(h).Fields()
		case HdrAtomicETH:
			p.AtomicETH = AtomicETH(h).Fields()
		case HdrAETH:
			p.AETH = AETH(h).Fields()
		case HdrAtomicAckETH:
			p.AtomicAck = AtomicAckETH(h).Orig()
		case HdrImmDt:
			p.Imm = ImmDt(h).Imm()
		case HdrIETH:
			p.IETH = IETH(h).RKey()
		}
		off += e.len
	}
	pad := int(p.BTH.PadCnt)
	if end-off < pad {
		return ErrBadPad
	}
	p.Payload = b[off : end-pad]
	if !info.Payload && end-off != 0 {
		return ErrUnexpectedPay
	}
	if info.FixedPayload != 0 && len(p.Payload) != info.FixedPayload {
		return ErrPayloadLength
	}
	return nil
}

// AppendTo appends the encoded packet to dst: headers, payload and pad, and
// four zero bytes where the ICRC goes (see SetICRC). PadCnt is set from the
// payload length. It returns the extended slice.
func (p *Packet) AppendTo(dst []byte) []byte {
	info := p.Info()
	pad := p.Pad()
	n := info.HdrLen + len(p.Payload) + pad + ICRCLen
	start := len(dst)
	dst = grow(dst, n)
	b := dst[start:]
	p.BTH.PadCnt = uint8(pad)
	BTH(b).Encode(&p.BTH)
	off := BTHLen
	for _, e := range hdrOrder {
		if info.Headers&e.h == 0 {
			continue
		}
		h := b[off : off+e.len]
		switch e.h {
		case HdrFETH:
			FETH(h).Encode(&p.FETH)
		case HdrDETH:
			DETH(h).Encode(&p.DETH)
		case HdrRETH:
			RETH(h).Encode(&p.RETH)
		case HdrAtomicETH:
			AtomicETH(h).Encode(&p.AtomicETH)
		case HdrAETH:
			AETH(h).Encode(&p.AETH)
		case HdrAtomicAckETH:
			AtomicAckETH(h).Encode(p.AtomicAck)
		case HdrImmDt:
			ImmDt(h).Encode(p.Imm)
		case HdrIETH:
			IETH(h).Encode(p.IETH)
		}
		off += e.len
	}
	off += copy(b[off:], p.Payload)
	for i := 0; i < pad+ICRCLen; i++ {
		b[off+i] = 0
	}
	return dst
}

// grow extends b by n bytes, reallocating only when capacity runs out.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}
