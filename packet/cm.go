package packet

import (
	"errors"
	"fmt"
)

// The connection manager's messages (IBTA vol. 1, chapter 12), carried in
// the data of a CM MAD (mad.go). Each message has a fields struct (CMReq,
// CMRep, ...) whose Decode reads it from the 232-byte CM data and whose
// Encode writes it there. Decode never fails on a well-sized buffer: every
// bit pattern is a message, and judging it (a transport type the listener
// does not take, a GID that is not the receiver's) is the connection
// manager's job, as it is the kernel's. Private data and the REJ's
// additional reject information alias the buffer on Decode, so decoding
// copies and allocates nothing; Encode copies them and zeroes the rest of
// their field. Reserved bits are written as zeros, as the kernel writes
// them; a capture's CM MADs (whose reserved bits are zero) re-encode to
// identical bytes. Offsets and widths are those of the kernel's
// include/rdma/ibta_vol1_c12.h, checked against tshark's dissector.

// CMDataLen is the size of a CM message: the MAD's data.
const CMDataLen = MADLen - MADHeaderLen

// CMAttr is a CM MAD's attribute ID: which message it is.
type CMAttr uint16

// The CM attributes.
const (
	CMAttrClassPortInfo CMAttr = 0x01
	CMAttrREQ           CMAttr = 0x10
	CMAttrMRA           CMAttr = 0x11
	CMAttrREJ           CMAttr = 0x12
	CMAttrREP           CMAttr = 0x13
	CMAttrRTU           CMAttr = 0x14
	CMAttrDREQ          CMAttr = 0x15
	CMAttrDREP          CMAttr = 0x16
	CMAttrSIDRREQ       CMAttr = 0x17
	CMAttrSIDRREP       CMAttr = 0x18
	CMAttrLAP           CMAttr = 0x19
	CMAttrAPR           CMAttr = 0x1A
)

var cmAttrNames = map[CMAttr]string{
	CMAttrClassPortInfo: "ClassPortInfo",
	CMAttrREQ:           "REQ", CMAttrMRA: "MRA", CMAttrREJ: "REJ", CMAttrREP: "REP",
	CMAttrRTU: "RTU", CMAttrDREQ: "DREQ", CMAttrDREP: "DREP",
	CMAttrSIDRREQ: "SIDR_REQ", CMAttrSIDRREP: "SIDR_REP", CMAttrLAP: "LAP", CMAttrAPR: "APR",
}

func (a CMAttr) String() string {
	if s, ok := cmAttrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("CMAttr(%#04x)", uint16(a))
}

// Private data sizes, the most each message carries.
const (
	CMReqPrivateLen     = 92
	CMRepPrivateLen     = 196
	CMRtuPrivateLen     = 224
	CMRejPrivateLen     = 148
	CMRejARILen         = 72
	CMMraPrivateLen     = 222
	CMDreqPrivateLen    = 220
	CMDrepPrivateLen    = 224
	CMSidrReqPrivateLen = 216
	CMSidrRepPrivateLen = 136
	CMSidrRepInfoLen    = 72
)

// CM errors, for errors.Is.
var (
	ErrCMShort       = errors.New("cm: message shorter than 232 bytes")
	ErrCMPrivateData = errors.New("cm: private data longer than the message carries")
)

// Transport service types of a REQ.
const (
	CMTransportRC  = 0
	CMTransportUC  = 1
	CMTransportXRC = 3
)

// What a REJ or an MRA refers to.
const (
	CMMsgREQ   = 0
	CMMsgREP   = 1
	CMMsgOther = 2
)

// CMRejReason is why a REJ was sent (the kernel's enum ib_cm_rej_reason).
type CMRejReason uint16

// The REJ reasons.
const (
	RejNoQP                     CMRejReason = 1
	RejNoEEC                    CMRejReason = 2
	RejNoResources              CMRejReason = 3
	RejTimeout                  CMRejReason = 4
	RejUnsupported              CMRejReason = 5
	RejInvalidCommID            CMRejReason = 6
	RejInvalidCommInstance      CMRejReason = 7
	RejInvalidServiceID         CMRejReason = 8
	RejInvalidTransportType     CMRejReason = 9
	RejStaleConn                CMRejReason = 10
	RejRDCNotExist              CMRejReason = 11
	RejInvalidGID               CMRejReason = 12
	RejInvalidLID               CMRejReason = 13
	RejInvalidSL                CMRejReason = 14
	RejInvalidTrafficClass      CMRejReason = 15
	RejInvalidHopLimit          CMRejReason = 16
	RejInvalidPacketRate        CMRejReason = 17
	RejInvalidAltGID            CMRejReason = 18
	RejInvalidAltLID            CMRejReason = 19
	RejInvalidAltSL             CMRejReason = 20
	RejInvalidAltTrafficClass   CMRejReason = 21
	RejInvalidAltHopLimit       CMRejReason = 22
	RejInvalidAltPacketRate     CMRejReason = 23
	RejPortCMRedirect           CMRejReason = 24
	RejPortRedirect             CMRejReason = 25
	RejInvalidMTU               CMRejReason = 26
	RejInsufficientRespResource CMRejReason = 27
	RejConsumerDefined          CMRejReason = 28
	RejInvalidRNRRetry          CMRejReason = 29
	RejDuplicateLocalCommID     CMRejReason = 30
	RejInvalidClassVersion      CMRejReason = 31
	RejInvalidFlowLabel         CMRejReason = 32
	RejInvalidAltFlowLabel      CMRejReason = 33
	RejVendorOptionNotSupported CMRejReason = 35
)

var rejReasonNames = [...]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources",
	RejTimeout: "timeout", RejUnsupported: "unsupported request",
	RejInvalidCommID: "invalid comm ID", RejInvalidCommInstance: "invalid comm instance",
	RejInvalidServiceID: "invalid service ID", RejInvalidTransportType: "invalid transport type",
	RejStaleConn: "stale connection", RejRDCNotExist: "RDC does not exist",
	RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID", RejInvalidSL: "invalid SL",
	RejInvalidTrafficClass: "invalid traffic class", RejInvalidHopLimit: "invalid hop limit",
	RejInvalidPacketRate: "invalid packet rate", RejInvalidAltGID: "invalid alternate GID",
	RejInvalidAltLID: "invalid alternate LID", RejInvalidAltSL: "invalid alternate SL",
	RejInvalidAltTrafficClass: "invalid alternate traffic class",
	RejInvalidAltHopLimit:     "invalid alternate hop limit",
	RejInvalidAltPacketRate:   "invalid alternate packet rate",
	RejPortCMRedirect:         "port and CM redirect", RejPortRedirect: "port redirect",
	RejInvalidMTU: "invalid MTU", RejInsufficientRespResource: "insufficient responder resources",
	RejConsumerDefined: "consumer defined", RejInvalidRNRRetry: "invalid RNR retry count",
	RejDuplicateLocalCommID: "duplicate local comm ID", RejInvalidClassVersion: "invalid class version",
	RejInvalidFlowLabel: "invalid flow label", RejInvalidAltFlowLabel: "invalid alternate flow label",
	RejVendorOptionNotSupported: "vendor option not supported",
}

func (r CMRejReason) String() string {
	if int(r) < len(rejReasonNames) && rejReasonNames[r] != "" {
		return rejReasonNames[r]
	}
	return fmt.Sprintf("reason %d", uint16(r))
}

// SIDR_REP statuses.
const (
	SIDRAccept       = 0
	SIDRUnsupported  = 1 // no listener for the service ID
	SIDRReject       = 2
	SIDRNoQP         = 3
	SIDRRedirect     = 4
	SIDRUnsupportedV = 5 // class version not supported
)

// u24 reads a 24-bit big-endian field.
func u24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// putU24 writes the low 24 bits of v big-endian.
func putU24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// b2u turns a flag into a bit.
func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// putPrivate copies p into the field f, zeroing the rest of f.
func putPrivate(f, p []byte) error {
	if len(p) > len(f) {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrCMPrivateData, len(p), len(f))
	}
	clear(f[copy(f, p):])
	return nil
}

// cmData checks that b holds a whole CM message and returns those bytes.
func cmData(b []byte) ([]byte, error) {
	if len(b) < CMDataLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrCMShort, len(b))
	}
	return b[:CMDataLen], nil
}
