package verbsapi

import (
	"fmt"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
)

// The engine's types, re-exported so that users of the verbs API need not
// import package qp. They are aliases: values move between the packages
// without conversion.
type (
	// SendWR is struct ibv_send_wr (one request, not a linked list).
	SendWR = qp.SendWR
	// RecvWR is struct ibv_recv_wr.
	RecvWR = qp.RecvWR
	// SGE is struct ibv_sge.
	SGE = qp.SGE
	// WC is struct ibv_wc.
	WC = qp.WC
	// WCStatus is enum ibv_wc_status.
	WCStatus = qp.WCStatus
	// WCOpcode is enum ibv_wc_opcode.
	WCOpcode = qp.WCOpcode
	// WCFlags is enum ibv_wc_flags.
	WCFlags = qp.WCFlags
	// WROpcode is enum ibv_wr_opcode.
	WROpcode = qp.WROpcode
	// SendFlags is enum ibv_send_flags.
	SendFlags = qp.SendFlags
	// Access is enum ibv_access_flags.
	Access = qp.Access
	// QPAttr is struct ibv_qp_attr.
	QPAttr = qp.Attr
	// QPAttrMask is enum ibv_qp_attr_mask.
	QPAttrMask = qp.AttrMask
	// QPState is enum ibv_qp_state.
	QPState = qp.State
	// QPType is enum ibv_qp_type (RC, UC, UD).
	QPType = qp.Type
	// MTU is a path MTU in bytes (enum ibv_mtu as a byte count).
	MTU = qp.MTU
	// AddressVector is the address part of struct ibv_ah_attr, as the
	// engine takes it (SendWR.AH, QPAttr.AV).
	AddressVector = qp.AddressVector
	// EventType is enum ibv_event_type.
	EventType = qp.EventType
	// DeviceAttr is struct ibv_device_attr.
	DeviceAttr = rxe.DeviceAttr
	// PortAttr is struct ibv_port_attr.
	PortAttr = rxe.PortAttr
	// QPCap is struct ibv_qp_cap.
	QPCap = rxe.QPCap
	// Counters are the device's counters (rxe hw_counters and softroce's).
	Counters = rxe.Counters
)

// QP types.
const (
	RC = qp.RC
	UC = qp.UC
	UD = qp.UD
)

// QP states.
const (
	QPSReset = qp.Reset
	QPSInit  = qp.Init
	QPSRTR   = qp.RTR
	QPSRTS   = qp.RTS
	QPSSQD   = qp.SQD
	QPSSQE   = qp.SQE
	QPSErr   = qp.Err
)

// Access flags (IBV_ACCESS_*).
const (
	AccessLocalWrite   = qp.AccessLocalWrite
	AccessRemoteWrite  = qp.AccessRemoteWrite
	AccessRemoteRead   = qp.AccessRemoteRead
	AccessRemoteAtomic = qp.AccessRemoteAtomic
	// AccessAll is every flag the device implements: what a demo or a test
	// that wants no access errors registers with.
	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// Work-request opcodes (IBV_WR_*).
const (
	WRWrite    = qp.WRWrite
	WRWriteImm = qp.WRWriteImm
	WRSend     = qp.WRSend
	WRSendImm  = qp.WRSendImm
	WRRead     = qp.WRRead
	WRCmpSwap  = qp.WRCmpSwap
	WRFetchAdd = qp.WRFetchAdd
	WRLocalInv = qp.WRLocalInv
	WRSendInv  = qp.WRSendInv
)

// Send flags (IBV_SEND_*).
const (
	SendFence     = qp.SendFence
	SendSignaled  = qp.SendSignaled
	SendSolicited = qp.SendSolicited
	SendInline    = qp.SendInline
)

// Completion statuses (IBV_WC_*).
const (
	WCSuccess        = qp.WCSuccess
	WCLocLenErr      = qp.WCLocLenErr
	WCLocQPOpErr     = qp.WCLocQPOpErr
	WCLocProtErr     = qp.WCLocProtErr
	WCWRFlushErr     = qp.WCWRFlushErr
	WCBadRespErr     = qp.WCBadRespErr
	WCLocAccessErr   = qp.WCLocAccessErr
	WCRemInvReqErr   = qp.WCRemInvReqErr
	WCRemAccessErr   = qp.WCRemAccessErr
	WCRemOpErr       = qp.WCRemOpErr
	WCRetryExcErr    = qp.WCRetryExcErr
	WCRNRRetryExcErr = qp.WCRNRRetryExcErr
	WCFatalErr       = qp.WCFatalErr
	WCGeneralErr     = qp.WCGeneralErr
)

// Completion opcodes (IBV_WC_*).
const (
	WCSend        = qp.WCSend
	WCRDMAWrite   = qp.WCRDMAWrite
	WCRDMARead    = qp.WCRDMARead
	WCCompSwap    = qp.WCCompSwap
	WCFetchAdd    = qp.WCFetchAdd
	WCLocalInv    = qp.WCLocalInv
	WCRecv        = qp.WCRecv
	WCRecvRDMAImm = qp.WCRecvRDMAImm
)

// Completion flags.
const (
	WCWithGRH = qp.WCWithGRH
	WCWithImm = qp.WCWithImm
	WCWithInv = qp.WCWithInv
)

// QP attribute mask bits (IBV_QP_*).
const (
	QPAttrState           = qp.AttrState
	QPAttrCurState        = qp.AttrCurState
	QPAttrAccessFlags     = qp.AttrAccessFlags
	QPAttrPKeyIndex       = qp.AttrPKeyIndex
	QPAttrPort            = qp.AttrPort
	QPAttrQKey            = qp.AttrQKey
	QPAttrAV              = qp.AttrAV
	QPAttrPathMTU         = qp.AttrPathMTU
	QPAttrTimeout         = qp.AttrTimeout
	QPAttrRetryCnt        = qp.AttrRetryCnt
	QPAttrRNRRetry        = qp.AttrRNRRetry
	QPAttrRQPSN           = qp.AttrRQPSN
	QPAttrMaxQPRdAtomic   = qp.AttrMaxQPRdAtomic
	QPAttrMinRNRTimer     = qp.AttrMinRNRTimer
	QPAttrSQPSN           = qp.AttrSQPSN
	QPAttrMaxDestRdAtomic = qp.AttrMaxDestRdAtomic
	QPAttrDestQPN         = qp.AttrDestQPN
)

// Asynchronous event types (IBV_EVENT_*).
const (
	EventCQErr            = qp.EventCQErr
	EventQPFatal          = qp.EventQPFatal
	EventQPReqErr         = qp.EventQPReqErr
	EventQPAccessErr      = qp.EventQPAccessErr
	EventCommEst          = qp.EventCommEst
	EventSQDrained        = qp.EventSQDrained
	EventSRQLimitReached  = qp.EventSRQLimitReached
	EventQPLastWQEReached = qp.EventQPLastWQEReached
)

// EventName returns ibv_event_type_str's name for t, e.g. "CQ error".
func EventName(t EventType) string {
	switch t {
	case EventCQErr:
		return "CQ error"
	case EventQPFatal:
		return "local work queue catastrophic error"
	case EventQPReqErr:
		return "invalid request local work queue error"
	case EventQPAccessErr:
		return "local access violation work queue error"
	case EventCommEst:
		return "communication established"
	case EventSQDrained:
		return "send queue drained"
	case EventSRQLimitReached:
		return "SRQ limit reached"
	case EventQPLastWQEReached:
		return "last WQE reached"
	}
	return fmt.Sprintf("unknown event (%d)", uint8(t))
}
