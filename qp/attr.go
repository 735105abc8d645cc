package qp

// AttrMask names the attributes a Modify sets. Values match enum
// ibv_qp_attr_mask.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// Attr holds QP attributes, as struct ibv_qp_attr does. Modify reads the
// fields its mask names.
type Attr struct {
	State            State
	CurState         State
	EnSQDAsyncNotify bool
	AccessFlags      Access // remote access the responder allows
	PKeyIndex        uint16
	Port             uint8
	QKey             uint32
	AV               AddressVector
	PathMTU          MTU
	Timeout          uint8 // local ACK timeout: 4.096 us * 2^Timeout, 0 = infinite
	RetryCnt         uint8
	RNRRetry         uint8 // 7 = infinite
	MinRNRTimer      uint8 // RNR NAK timer code this QP sends
	RQPSN            uint32
	SQPSN            uint32
	MaxRdAtomic      uint8 // outstanding READ/atomic requests as requester
	MaxDestRdAtomic  uint8 // responder resources
	DestQPN          uint32
}
