package dropin

// cm_proto.go: the connection manager's part of libibverbs/proto.h, which
// the drop-in librdmacm.so.1 speaks.

// Operations (enum sr_op, 100-117).
const (
	opCMCreateChannel  = 100
	opCMDestroyChannel = 101
	opCMCreateID       = 102
	opCMDestroyID      = 103
	opCMBind           = 104
	opCMResolveAddr    = 105
	opCMResolveRoute   = 106
	opCMQueryRoute     = 107
	opCMListen         = 108
	opCMConnect        = 109
	opCMAccept         = 110
	opCMReject         = 111
	opCMDisconnect     = 112
	opCMEstablish      = 113
	opCMInitQPAttr     = 114
	opCMGetEvent       = 115
	opCMSetOption      = 116
	opCMMigrate        = 117
)

type wireCMSockaddr struct {
	Family, Port uint16
	Addr         [16]byte
	ScopeID      uint32
}

type wireCMCreateID struct{ Channel, PS, QPType uint32 }

type wireCMBind struct {
	ID   uint32
	Addr wireCMSockaddr
}

type wireCMResolve struct {
	ID, TimeoutMs uint32
	Src, Dst      wireCMSockaddr
}

type wireCMPath struct {
	SGID, DGID                                     [16]byte
	FlowLabel                                      uint32
	PKey                                           uint16
	HopLimit, TrafficClass, SL, MTU, Rate, PktLife uint8
}

type wireCMRoute struct {
	Src, Dst                          wireCMSockaddr
	NodeGUID                          [8]byte
	DevName                           [64]byte
	PortNum, NumPaths, SGIDIndex, Pad uint8
	Path                              wireCMPath
}

type wireCMListen struct {
	ID      uint32
	Backlog int32
}

type wireCMConnParam struct {
	QPNum                                                       uint32
	PrivateDataLen, ResponderResources, InitiatorDepth, FlowCtl uint8
	RetryCount, RNRRetryCount, SRQ, Pad                         uint8
	PrivateData                                                 [196]byte
}

type wireCMConn struct {
	ID    uint32
	Param wireCMConnParam
}

type wireCMReject struct {
	ID             uint32
	PrivateDataLen uint8
	Pad            [3]uint8
	PrivateData    [148]byte
}

type wireCMInitQPAttr struct{ ID, QPState uint32 }

type wireCMUDParam struct {
	QPNum, QKey uint32
	AHAttr      wireAHAttr
}

type wireCMEvent struct {
	ID, ListenID, Event uint32
	Status              int32
	Conn                wireCMConnParam
	UD                  wireCMUDParam
	Route               wireCMRoute
}

type wireCMOption struct{ ID, Level, Name, Value uint32 }

type wireCMMigrate struct{ ID, Channel uint32 }

// rdma_cm event types (enum rdma_cm_event_type).
const (
	cmEvAddrResolved    = 0
	cmEvAddrError       = 1
	cmEvRouteResolved   = 2
	cmEvRouteError      = 3
	cmEvConnectRequest  = 4
	cmEvConnectResponse = 5
	cmEvConnectError    = 6
	cmEvUnreachable     = 7
	cmEvRejected        = 8
	cmEvEstablished     = 9
	cmEvDisconnected    = 10
	cmEvTimewaitExit    = 15
)

// Port spaces (enum rdma_port_space) and address families.
const (
	psTCP    = 0x0106
	psUDP    = 0x0111
	psIB     = 0x013F
	afInet   = 2
	afInet6  = 10
	qpTypeRC = 2
	qpTypeUC = 3
	qpTypeUD = 4
)

// rdma_set_option's levels and names.
const (
	optLevelID    = 0
	optTOS        = 0
	optReuseAddr  = 1
	optAFOnly     = 2
	optACKTimeout = 3
)
