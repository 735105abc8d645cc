package qp

import (
	"fmt"
	"net/netip"
)

// Time is a point in time in nanoseconds, on whatever clock the caller drives
// the engine with.
type Time int64

// Never is the deadline of a QP with no timer armed.
const Never Time = 1<<63 - 1

// Type is a QP transport type.
type Type uint8

// QP types.
const (
	RC Type = iota
	UC
	UD
)

func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// State is a QP state (IBTA vol. 1 10.3.1). Values match enum ibv_qp_state.
type State uint8

// QP states.
const (
	Reset State = iota
	Init
	RTR
	RTS
	SQD
	SQE
	Err
)

func (s State) String() string {
	switch s {
	case Reset:
		return "RESET"
	case Init:
		return "INIT"
	case RTR:
		return "RTR"
	case RTS:
		return "RTS"
	case SQD:
		return "SQD"
	case SQE:
		return "SQE"
	case Err:
		return "ERR"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Access is a set of memory and QP access flags. Values match enum
// ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 2
	AccessRemoteRead   Access = 4
	AccessRemoteAtomic Access = 8
	// AccessMWBind lets memory windows be bound to a region.
	AccessMWBind Access = 16
	// AccessZeroBased, in a window's bind access, makes the window's
	// addresses offsets from its start rather than virtual addresses.
	AccessZeroBased Access = 32
)

// MTU is a path MTU in bytes: 256, 512, 1024, 2048 or 4096.
type MTU uint32

// Valid reports whether m is one of the IB MTUs.
func (m MTU) Valid() bool {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// Enum returns the ibv_mtu enum value (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5).
func (m MTU) Enum() int {
	for i, v := range []MTU{256, 512, 1024, 2048, 4096} {
		if m == v {
			return i + 1
		}
	}
	return 0
}

// MTUFromEnum converts an ibv_mtu enum value to bytes (0 if invalid).
func MTUFromEnum(e int) MTU {
	if e < 1 || e > 5 {
		return 0
	}
	return MTU(128 << e)
}

// AddressVector is where a QP's packets go: the destination GID as an IP
// address (IPv4 GIDs as plain IPv4), the index of the local GID to send from,
// and the GRH fields the IP header is built from.
type AddressVector struct {
	DGID         netip.Addr
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

// SGE is a scatter/gather element: a local buffer named by lkey and address.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is a work-request opcode. Values match enum ibv_wr_opcode.
type WROpcode uint8

// Work-request opcodes.
const (
	WRWrite    WROpcode = 0
	WRWriteImm WROpcode = 1
	WRSend     WROpcode = 2
	WRSendImm  WROpcode = 3
	WRRead     WROpcode = 4
	WRCmpSwap  WROpcode = 5
	WRFetchAdd WROpcode = 6
	WRLocalInv WROpcode = 7
	WRBindMW   WROpcode = 8
	WRSendInv  WROpcode = 9
)

func (o WROpcode) String() string {
	switch o {
	case WRWrite:
		return "RDMA_WRITE"
	case WRWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendImm:
		return "SEND_WITH_IMM"
	case WRRead:
		return "RDMA_READ"
	case WRCmpSwap:
		return "ATOMIC_CMP_AND_SWP"
	case WRFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	case WRLocalInv:
		return "LOCAL_INV"
	case WRBindMW:
		return "BIND_MW"
	case WRSendInv:
		return "SEND_WITH_INV"
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// SendFlags modify a send work request. Values match enum ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// SendWR is a send-queue work request.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline, when Flags has SendInline, is the data to send; it is copied at
	// post time and SGL is ignored.
	Inline []byte
	Imm    uint32 // immediate data, wire order (SEND_WITH_IMM, WRITE_WITH_IMM)
	// InvRKey is the rkey a SEND_WITH_INV asks the responder to invalidate,
	// or the key LOCAL_INV invalidates.
	InvRKey    uint32
	RemoteAddr uint64 // RDMA and atomic target
	RKey       uint32
	CompareAdd uint64 // compare value (CMP_SWAP) or addend (FETCH_ADD)
	Swap       uint64
	// UD only: destination.
	AH         *AddressVector
	RemoteQPN  uint32
	RemoteQKey uint32
	// BindMW is what a BIND_MW binds (ibv_send_wr's bind_mw).
	BindMW BindMW
}

// BindMW is the bind_mw part of a BIND_MW work request. The engine names
// objects by key, as rxe's WQE does, so the window and the region are their
// keys rather than pointers.
type BindMW struct {
	// MWRKey names the window by its rkey when the WR is posted (the
	// ibv_mw's rkey).
	MWRKey uint32
	// RKey is the window's rkey once bound: only its low byte, the key, is
	// taken (the index is the window's); ibv_bind_mw uses
	// ibv_inc_rkey(mw->rkey).
	RKey uint32
	// BindInfo is where the window goes and what it allows.
	BindInfo MWBindInfo
}

// MWBindInfo is struct ibv_mw_bind_info: a range of a region and the access
// a window over it grants. A zero Length unbinds (type 1 windows only).
type MWBindInfo struct {
	// MRLKey names the region by its lkey (bind_info.mr); ignored when
	// Length is 0.
	MRLKey uint32
	// Addr is the window's first byte, a virtual address in the region.
	Addr   uint64
	Length uint64
	// MWAccessFlags are the remote access flags the window grants, plus
	// AccessLocalWrite and AccessZeroBased (type 2 only).
	MWAccessFlags Access
}

// RecvWR is a receive-queue work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is a work-completion status. Values match enum ibv_wc_status.
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
	"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
	"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
	"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
	"GENERAL_ERR",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is a work-completion opcode. Values match enum ibv_wc_opcode.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend        WCOpcode = 0
	WCRDMAWrite   WCOpcode = 1
	WCRDMARead    WCOpcode = 2
	WCCompSwap    WCOpcode = 3
	WCFetchAdd    WCOpcode = 4
	WCBindMW      WCOpcode = 5
	WCLocalInv    WCOpcode = 6
	WCRecv        WCOpcode = 128
	WCRecvRDMAImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags describe a completion. Values match enum ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	WCWithGRH WCFlags = 1
	WCWithImm WCFlags = 2
	WCWithInv WCFlags = 8
)

// WC is a work completion.
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32 // immediate data (wire order) or invalidated rkey
	QPN     uint32 // local QP
	SrcQP   uint32 // UD: the sender's QP
	Flags   WCFlags
	// VendorErr carries a softroce-specific detail code for failed completions.
	VendorErr uint32
}

// Event is an asynchronous event (enum ibv_event_type values).
type Event struct {
	Type EventType
	QPN  uint32
}

// EventType is an async event type. Values match enum ibv_event_type.
type EventType uint8

// Async event types the engine raises.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
)
