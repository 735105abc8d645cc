package packet

import (
	"errors"
	"fmt"
)

// Management datagrams (MADs) on RoCE v2. A MAD is the 256-byte payload of
// a UD SEND ONLY from QP 1 to QP 1 (the GSI), Q_Key GSIQKey; the
// connection manager's messages (cm.go) are MADs of class MgmtClassCM. The
// 24-byte header is common to every class (IBTA vol. 1, 13.4.2).

const (
	// MADLen is the size of every MAD.
	MADLen = 256
	// MADHeaderLen is the size of the common MAD header.
	MADHeaderLen = 24
	// GSIQPN is the general services QP, the CM's.
	GSIQPN = 1
	// GSIQKey is the Q_Key of QP 1: kernel rxe sends it and drops QP 1
	// receives with any other.
	GSIQKey = 0x80010000
	// MADBaseVersion is the only base version the kernel accepts.
	MADBaseVersion = 1
	// MgmtClassCM is the communication management class.
	MgmtClassCM = 0x07
	// CMClassVersion is the CM class version the kernel's CM serves.
	CMClassVersion = 2
	// MADMethodSend is the method of every CM message.
	MADMethodSend = 0x03
)

// MAD errors, for errors.Is.
var (
	ErrMADShort   = errors.New("mad: shorter than 256 bytes")
	ErrMADVersion = errors.New("mad: base version is not 1")
	ErrNotCM      = errors.New("mad: not a communication management MAD")
	ErrCMVersion  = errors.New("mad: CM class version is not 2")
)

// MAD is a view of a 256-byte management datagram.
type MAD []byte

// MADHeader holds the common header's fields.
type MADHeader struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        CMAttr
	Resv          uint16
	AttrMod       uint32 // ECE options in REQ, REP and SIDR_REP; else 0
}

func (m MAD) BaseVersion() uint8    { return m[0] }
func (m MAD) MgmtClass() uint8      { return m[1] }
func (m MAD) ClassVersion() uint8   { return m[2] }
func (m MAD) Method() uint8         { return m[3] }
func (m MAD) Status() uint16        { return be.Uint16(m[4:]) }
func (m MAD) ClassSpecific() uint16 { return be.Uint16(m[6:]) }
func (m MAD) TID() uint64           { return be.Uint64(m[8:]) }
func (m MAD) AttrID() CMAttr        { return CMAttr(be.Uint16(m[16:])) }
func (m MAD) AttrMod() uint32       { return be.Uint32(m[20:]) }
func (m MAD) Data() []byte          { return m[MADHeaderLen:MADLen] }
func (m MAD) SetTID(tid uint64)     { be.PutUint64(m[8:], tid) }
func (m MAD) SetAttrID(a CMAttr)    { be.PutUint16(m[16:], uint16(a)) }
func (m MAD) SetAttrMod(v uint32)   { be.PutUint32(m[20:], v) }
func (m MAD) SetStatus(v uint16)    { be.PutUint16(m[4:], v) }
func (m MAD) SetClassSpec(v uint16) { be.PutUint16(m[6:], v) }
func (m MAD) setVersions(cls, ver uint8) {
	m[0], m[1], m[2], m[3] = MADBaseVersion, cls, ver, MADMethodSend
}

// Header decodes the common header.
func (m MAD) Header() MADHeader {
	return MADHeader{BaseVersion: m[0], MgmtClass: m[1], ClassVersion: m[2], Method: m[3],
		Status: m.Status(), ClassSpecific: m.ClassSpecific(), TID: m.TID(), AttrID: m.AttrID(),
		Resv: be.Uint16(m[18:]), AttrMod: m.AttrMod()}
}

// EncodeHeader writes h into the view.
func (m MAD) EncodeHeader(h *MADHeader) {
	m[0], m[1], m[2], m[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(m[4:], h.Status)
	be.PutUint16(m[6:], h.ClassSpecific)
	be.PutUint64(m[8:], h.TID)
	be.PutUint16(m[16:], uint16(h.AttrID))
	be.PutUint16(m[18:], h.Resv)
	be.PutUint32(m[20:], h.AttrMod)
}

// ParseCMMAD checks that payload (a UD SEND's payload, pad and ICRC
// excluded) is a CM MAD this stack speaks, and returns its view: 256
// bytes or more (the rest is ignored, as the kernel ignores it), base
// version 1, class CM, class version 2. It never panics.
func ParseCMMAD(payload []byte) (MAD, error) {
	if len(payload) < MADLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrMADShort, len(payload))
	}
	m := MAD(payload[:MADLen])
	switch {
	case m.BaseVersion() != MADBaseVersion:
		return nil, fmt.Errorf("%w: %d", ErrMADVersion, m.BaseVersion())
	case m.MgmtClass() != MgmtClassCM:
		return nil, fmt.Errorf("%w: class %#02x", ErrNotCM, m.MgmtClass())
	case m.ClassVersion() != CMClassVersion:
		return nil, fmt.Errorf("%w: %d", ErrCMVersion, m.ClassVersion())
	}
	return m, nil
}

// NewCMMAD returns a zeroed 256-byte CM MAD with its header set for
// attribute a and transaction tid (method Send, class version 2).
func NewCMMAD(a CMAttr, tid uint64) MAD {
	m := MAD(make([]byte, MADLen))
	m.setVersions(MgmtClassCM, CMClassVersion)
	m.SetTID(tid)
	m.SetAttrID(a)
	return m
}

// MAD returns the packet's payload as a MAD when the packet is one: a UD
// SEND ONLY from QP 1 to QP 1 with the GSI Q_Key and at least 256 bytes of
// payload. Only the header's length is implied; ParseCMMAD checks the rest.
func (p *Packet) MAD() (MAD, bool) {
	if p.BTH.Opcode != UDSendOnly || p.BTH.DestQP != GSIQPN || !isMAD(&p.DETH, len(p.Payload)) {
		return nil, false
	}
	return MAD(p.Payload[:MADLen]), true
}
