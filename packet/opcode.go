package packet

// Opcode is the 8-bit BTH opcode. Its top three bits name the transport
// (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80) and the low five the operation.
type Opcode uint8

// RC opcodes (IBTA vol. 1 table 38, plus IBTA 1.5 FLUSH and ATOMIC WRITE).
const (
	RCSendFirst         Opcode = 0x00
	RCSendMiddle        Opcode = 0x01
	RCSendLast          Opcode = 0x02
	RCSendLastImm       Opcode = 0x03
	RCSendOnly          Opcode = 0x04
	RCSendOnlyImm       Opcode = 0x05
	RCWriteFirst        Opcode = 0x06
	RCWriteMiddle       Opcode = 0x07
	RCWriteLast         Opcode = 0x08
	RCWriteLastImm      Opcode = 0x09
	RCWriteOnly         Opcode = 0x0A
	RCWriteOnlyImm      Opcode = 0x0B
	RCReadRequest       Opcode = 0x0C
	RCReadResponseFirst Opcode = 0x0D
	RCReadResponseMid   Opcode = 0x0E
	RCReadResponseLast  Opcode = 0x0F
	RCReadResponseOnly  Opcode = 0x10
	RCAcknowledge       Opcode = 0x11
	RCAtomicAcknowledge Opcode = 0x12
	RCCompareSwap       Opcode = 0x13
	RCFetchAdd          Opcode = 0x14
	RCSendLastInv       Opcode = 0x16
	RCSendOnlyInv       Opcode = 0x17
	RCFlush             Opcode = 0x1C
	RCAtomicWrite       Opcode = 0x1D
)

// UC opcodes.
const (
	UCSendFirst    Opcode = 0x20
	UCSendMiddle   Opcode = 0x21
	UCSendLast     Opcode = 0x22
	UCSendLastImm  Opcode = 0x23
	UCSendOnly     Opcode = 0x24
	UCSendOnlyImm  Opcode = 0x25
	UCWriteFirst   Opcode = 0x26
	UCWriteMiddle  Opcode = 0x27
	UCWriteLast    Opcode = 0x28
	UCWriteLastImm Opcode = 0x29
	UCWriteOnly    Opcode = 0x2A
	UCWriteOnlyImm Opcode = 0x2B
)

// UD opcodes and the RoCE v2 congestion notification packet.
const (
	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65
	CNP           Opcode = 0x81
)

// Transport is the transport class encoded in an opcode's top three bits.
type Transport uint8

// Transport classes.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
)

func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	}
	return "unknown"
}

// Transport returns the transport class of the opcode.
func (o Opcode) Transport() Transport { return Transport(o & 0xE0) }

// Hdr is a set of extension headers that follow the BTH.
type Hdr uint16

// Extension headers.
const (
	HdrRETH Hdr = 1 << iota
	HdrAETH
	HdrAtomicETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrDETH
	HdrFETH
)

// Header sizes in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	ICRCLen         = 4
	// CNPPadLen is the 16 reserved bytes that follow the BTH of a CNP.
	CNPPadLen = 16
)

// hdrOrder lists the extension headers in the order IBTA places them after
// the BTH. FLUSH puts FETH before RETH, so it is first.
var hdrOrder = [...]struct {
	h   Hdr
	len int
}{
	{HdrFETH, FETHLen},
	{HdrDETH, DETHLen},
	{HdrRETH, RETHLen},
	{HdrAtomicETH, AtomicETHLen},
	{HdrAETH, AETHLen},
	{HdrAtomicAckETH, AtomicAckETHLen},
	{HdrImmDt, ImmDtLen},
	{HdrIETH, IETHLen},
}

// Position says where a packet sits in a message.
type Position uint8

// Positions within a message.
const (
	PosOnly Position = iota
	PosFirst
	PosMiddle
	PosLast
)

func (p Position) String() string {
	return [...]string{"only", "first", "middle", "last"}[p&3]
}

// Kind is the operation an opcode belongs to.
type Kind uint8

// Operation kinds.
const (
	KindUnknown Kind = iota
	KindSend
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomicAck
	KindCompareSwap
	KindFetchAdd
	KindFlush
	KindAtomicWrite
	KindCNP
)

func (k Kind) String() string {
	if k > KindCNP {
		return "unknown"
	}
	return [...]string{"unknown", "send", "write", "read-request", "read-response", "ack",
		"atomic-ack", "compare-swap", "fetch-add", "flush", "atomic-write", "cnp"}[k]
}

// OpcodeInfo describes an opcode: what follows the BTH and how the packet
// fits in a message. The zero value (Valid false) describes an unknown opcode.
type OpcodeInfo struct {
	Name      string
	Valid     bool
	Transport Transport
	Kind      Kind
	Pos       Position
	Headers   Hdr
	// HdrLen is the length of BTH plus every extension header.
	HdrLen int
	// Payload says whether the opcode may carry payload bytes.
	Payload bool
	// FixedPayload is the exact payload length the opcode requires when
	// non-zero (ATOMIC WRITE carries 8 bytes; CNP 16 reserved bytes).
	FixedPayload int
}

// Is reports whether the info names every header in h.
func (i *OpcodeInfo) Is(h Hdr) bool { return i.Headers&h == h }

// TakesRecvWQE reports whether a responder takes a receive WQE at this
// packet: the first (or only) packet of a SEND, and the packet of an RDMA
// WRITE that carries immediate data (rxe's RXE_RWR_MASK). With none
// posted, RC answers it with an RNR NAK.
func (i *OpcodeInfo) TakesRecvWQE() bool {
	switch i.Kind {
	case KindSend:
		return i.Pos == PosFirst || i.Pos == PosOnly
	case KindWrite:
		return i.Is(HdrImmDt)
	}
	return false
}

var opcodeTable [256]OpcodeInfo

// Info returns the description of the opcode. Unknown opcodes give an info
// whose Valid is false and whose Name is "UNKNOWN".
func (o Opcode) Info() *OpcodeInfo { return &opcodeTable[o] }

// String returns the opcode's name, such as "RC_SEND_ONLY".
func (o Opcode) String() string { return opcodeTable[o].Name }

// Valid reports whether the opcode is one softroce knows.
func (o Opcode) Valid() bool { return opcodeTable[o].Valid }

func def(o Opcode, name string, kind Kind, pos Position, h Hdr, payload bool) {
	n := BTHLen
	for _, e := range hdrOrder {
		if h&e.h != 0 {
			n += e.len
		}
	}
	opcodeTable[o] = OpcodeInfo{Name: name, Valid: true, Transport: o.Transport(), Kind: kind,
		Pos: pos, Headers: h, HdrLen: n, Payload: payload}
}

func init() {
	for i := range opcodeTable {
		opcodeTable[i] = OpcodeInfo{Name: "UNKNOWN", HdrLen: BTHLen}
	}
	for _, t := range []struct {
		base Opcode
		pfx  string
	}{{0x00, "RC_"}, {0x20, "UC_"}} {
		b, p := t.base, t.pfx
		def(b+0x00, p+"SEND_FIRST", KindSend, PosFirst, 0, true)
		def(b+0x01, p+"SEND_MIDDLE", KindSend, PosMiddle, 0, true)
		def(b+0x02, p+"SEND_LAST", KindSend, PosLast, 0, true)
		def(b+0x03, p+"SEND_LAST_WITH_IMMEDIATE", KindSend, PosLast, HdrImmDt, true)
		def(b+0x04, p+"SEND_ONLY", KindSend, PosOnly, 0, true)
		def(b+0x05, p+"SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, HdrImmDt, true)
		def(b+0x06, p+"RDMA_WRITE_FIRST", KindWrite, PosFirst, HdrRETH, true)
		def(b+0x07, p+"RDMA_WRITE_MIDDLE", KindWrite, PosMiddle, 0, true)
		def(b+0x08, p+"RDMA_WRITE_LAST", KindWrite, PosLast, 0, true)
		def(b+0x09, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", KindWrite, PosLast, HdrImmDt, true)
		def(b+0x0A, p+"RDMA_WRITE_ONLY", KindWrite, PosOnly, HdrRETH, true)
		def(b+0x0B, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", KindWrite, PosOnly, HdrRETH|HdrImmDt, true)
	}
	def(RCReadRequest, "RC_RDMA_READ_REQUEST", KindReadRequest, PosOnly, HdrRETH, false)
	def(RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", KindReadResponse, PosFirst, HdrAETH, true)
	def(RCReadResponseMid, "RC_RDMA_READ_RESPONSE_MIDDLE", KindReadResponse, PosMiddle, 0, true)
	def(RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", KindReadResponse, PosLast, HdrAETH, true)
	def(RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", KindReadResponse, PosOnly, HdrAETH, true)
	def(RCAcknowledge, "RC_ACKNOWLEDGE", KindAck, PosOnly, HdrAETH, false)
	def(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", KindAtomicAck, PosOnly, HdrAETH|HdrAtomicAckETH, false)
	def(RCCompareSwap, "RC_CMP_SWAP", KindCompareSwap, PosOnly, HdrAtomicETH, false)
	def(RCFetchAdd, "RC_FETCH_ADD", KindFetchAdd, PosOnly, HdrAtomicETH, false)
	def(RCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", KindSend, PosLast, HdrIETH, true)
	def(RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", KindSend, PosOnly, HdrIETH, true)
	def(RCFlush, "RC_FLUSH", KindFlush, PosOnly, HdrFETH|HdrRETH, false)
	def(RCAtomicWrite, "RC_ATOMIC_WRITE", KindAtomicWrite, PosOnly, HdrRETH, true)
	opcodeTable[RCAtomicWrite].FixedPayload = 8
	def(UDSendOnly, "UD_SEND_ONLY", KindSend, PosOnly, HdrDETH, true)
	def(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", KindSend, PosOnly, HdrDETH|HdrImmDt, true)
	def(CNP, "CNP", KindCNP, PosOnly, 0, true)
	opcodeTable[CNP].FixedPayload = CNPPadLen
}
