package packet

import "encoding/binary"

var be = binary.BigEndian

// BTH is a view of the 12-byte Base Transport Header.
type BTH []byte

// BTHFields holds the BTH's fields. Resv6 and Resv7 keep the reserved bits so
// that a decoded header re-encodes to identical bytes.
type BTHFields struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8 // 0..3 pad bytes before the ICRC
	TVer   uint8 // transport header version, 0
	PKey   uint16
	FECN   bool
	BECN   bool
	Resv6  uint8  // low 6 bits of byte 4
	DestQP uint32 // 24 bits
	AckReq bool
	Resv7  uint8  // low 7 bits of byte 8
	PSN    uint32 // 24 bits
}

func (b BTH) Opcode() Opcode  { return Opcode(b[0]) }
func (b BTH) SE() bool        { return b[1]&0x80 != 0 }
func (b BTH) MigReq() bool    { return b[1]&0x40 != 0 }
func (b BTH) PadCnt() uint8   { return (b[1] >> 4) & 3 }
func (b BTH) TVer() uint8     { return b[1] & 0x0F }
func (b BTH) PKey() uint16    { return be.Uint16(b[2:]) }
func (b BTH) FECN() bool      { return b[4]&0x80 != 0 }
func (b BTH) BECN() bool      { return b[4]&0x40 != 0 }
func (b BTH) DestQP() uint32  { return be.Uint32(b[4:]) & 0xFFFFFF }
func (b BTH) AckReq() bool    { return b[8]&0x80 != 0 }
func (b BTH) PSN() uint32     { return be.Uint32(b[8:]) & 0xFFFFFF }
func (b BTH) SetPSN(p uint32) { be.PutUint32(b[8:], uint32(b[8])<<24|p&0xFFFFFF) }

// Fields decodes the header.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), MigReq: b.MigReq(), PadCnt: b.PadCnt(), TVer: b.TVer(),
		PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), Resv6: b[4] & 0x3F, DestQP: b.DestQP(),
		AckReq: b.AckReq(), Resv7: b[8] & 0x7F, PSN: b.PSN(),
	}
}

// Encode writes f into the view.
func (b BTH) Encode(f *BTHFields) {
	b[0] = byte(f.Opcode)
	b[1] = bit(f.SE, 0x80) | bit(f.MigReq, 0x40) | (f.PadCnt&3)<<4 | f.TVer&0x0F
	be.PutUint16(b[2:], f.PKey)
	be.PutUint32(b[4:], f.DestQP&0xFFFFFF)
	b[4] = bit(f.FECN, 0x80) | bit(f.BECN, 0x40) | f.Resv6&0x3F
	be.PutUint32(b[8:], f.PSN&0xFFFFFF)
	b[8] = bit(f.AckReq, 0x80) | f.Resv7&0x7F
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}

// RETH is a view of the 16-byte RDMA Extended Transport Header.
type RETH []byte

// RETHFields: remote virtual address, remote key and DMA length.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	Length uint32
}

func (b RETH) VA() uint64         { return be.Uint64(b) }
func (b RETH) RKey() uint32       { return be.Uint32(b[8:]) }
func (b RETH) Length() uint32     { return be.Uint32(b[12:]) }
func (b RETH) Fields() RETHFields { return RETHFields{b.VA(), b.RKey(), b.Length()} }
func (b RETH) Encode(f *RETHFields) {
	be.PutUint64(b, f.VA)
	be.PutUint32(b[8:], f.RKey)
	be.PutUint32(b[12:], f.Length)
}

// AETH is a view of the 4-byte ACK Extended Transport Header.
type AETH []byte

// AETHFields: the syndrome byte and the 24-bit message sequence number.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }
func (b AETH) MSN() uint32        { return be.Uint32(b) & 0xFFFFFF }
func (b AETH) Fields() AETHFields { return AETHFields{b.Syndrome(), b.MSN()} }
func (b AETH) Encode(f *AETHFields) {
	be.PutUint32(b, f.MSN&0xFFFFFF)
	b[0] = byte(f.Syndrome)
}

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header.
type AtomicETH []byte

// AtomicETHFields: target address and key, and the operands. For FETCH_ADD
// SwapAdd is the addend and Compare is unused.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

func (b AtomicETH) VA() uint64      { return be.Uint64(b) }
func (b AtomicETH) RKey() uint32    { return be.Uint32(b[8:]) }
func (b AtomicETH) SwapAdd() uint64 { return be.Uint64(b[12:]) }
func (b AtomicETH) Compare() uint64 { return be.Uint64(b[20:]) }
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{b.VA(), b.RKey(), b.SwapAdd(), b.Compare()}
}
func (b AtomicETH) Encode(f *AtomicETHFields) {
	be.PutUint64(b, f.VA)
	be.PutUint32(b[8:], f.RKey)
	be.PutUint64(b[12:], f.SwapAdd)
	be.PutUint64(b[20:], f.Compare)
}

// AtomicAckETH is a view of the 8-byte Atomic ACK header: the original value
// at the target address before the atomic ran.
type AtomicAckETH []byte

func (b AtomicAckETH) Orig() uint64       { return be.Uint64(b) }
func (b AtomicAckETH) Encode(orig uint64) { be.PutUint64(b, orig) }

// ImmDt is a view of the 4-byte immediate data header. The value is kept in
// wire (big-endian) order, as libibverbs' imm_data is __be32.
type ImmDt []byte

func (b ImmDt) Imm() uint32       { return be.Uint32(b) }
func (b ImmDt) Encode(imm uint32) { be.PutUint32(b, imm) }

// IETH is a view of the 4-byte Invalidate header: the rkey to invalidate.
type IETH []byte

func (b IETH) RKey() uint32       { return be.Uint32(b) }
func (b IETH) Encode(rkey uint32) { be.PutUint32(b, rkey) }

// DETH is a view of the 8-byte Datagram Extended Transport Header.
type DETH []byte

// DETHFields: the queue key and the 24-bit source QP number. Resv keeps the
// reserved byte 4 so that a decoded header re-encodes to identical bytes.
type DETHFields struct {
	QKey  uint32
	Resv  uint8
	SrcQP uint32
}

func (b DETH) QKey() uint32  { return be.Uint32(b) }
func (b DETH) SrcQP() uint32 { return be.Uint32(b[4:]) & 0xFFFFFF }
func (b DETH) Fields() DETHFields {
	return DETHFields{QKey: b.QKey(), Resv: b[4], SrcQP: b.SrcQP()}
}
func (b DETH) Encode(f *DETHFields) {
	be.PutUint32(b, f.QKey)
	be.PutUint32(b[4:], uint32(f.Resv)<<24|f.SrcQP&0xFFFFFF)
}

// FETH is a view of the 4-byte FLUSH Extended Transport Header (IBTA 1.5).
type FETH []byte

// FETHFields: selectivity level (bits 5:4 of the big-endian word) and
// placement type (bits 3:0), as rxe's feth_sel/feth_plt read them. Resv keeps
// the reserved bits 31:6 (shifted down) so that a decoded header re-encodes
// to identical bytes.
type FETHFields struct {
	Resv        uint32 // 26 bits
	Selectivity uint8  // 2 bits
	Placement   uint8  // 4 bits
}

func (b FETH) Fields() FETHFields {
	v := be.Uint32(b)
	return FETHFields{Resv: v >> 6, Selectivity: uint8(v>>4) & 3, Placement: uint8(v) & 0xF}
}
func (b FETH) Encode(f *FETHFields) {
	be.PutUint32(b, f.Resv<<6|uint32(f.Selectivity&3)<<4|uint32(f.Placement&0xF))
}
