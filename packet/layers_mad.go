package packet

import (
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
)

// LayerTypeMAD is the gopacket layer of a management datagram on QP 1.
var LayerTypeMAD = gopacket.RegisterLayerType(1800, gopacket.LayerTypeMetadata{Name: "MAD", Decoder: gopacket.DecodeFunc(decodeMAD)})

// CMMessage is any CM message: CMReq, CMRep, CMRtu, CMRej, CMMra,
// CMDreq, CMDrep, CMSidrReq or CMSidrRep.
type CMMessage interface {
	Attr() CMAttr
	Decode(b []byte) error
	Encode(b []byte) error
}

func (*CMReq) Attr() CMAttr     { return CMAttrREQ }
func (*CMRep) Attr() CMAttr     { return CMAttrREP }
func (*CMRtu) Attr() CMAttr     { return CMAttrRTU }
func (*CMRej) Attr() CMAttr     { return CMAttrREJ }
func (*CMMra) Attr() CMAttr     { return CMAttrMRA }
func (*CMDreq) Attr() CMAttr    { return CMAttrDREQ }
func (*CMDrep) Attr() CMAttr    { return CMAttrDREP }
func (*CMSidrReq) Attr() CMAttr { return CMAttrSIDRREQ }
func (*CMSidrRep) Attr() CMAttr { return CMAttrSIDRREP }

// ErrCMAttr is a CM attribute this stack has no codec for (ClassPortInfo,
// LAP, APR, or no CM attribute at all).
var ErrCMAttr = errors.New("cm: attribute without a codec")

// NewCMMessage returns an empty message for attribute a.
func NewCMMessage(a CMAttr) (CMMessage, error) {
	switch a {
	case CMAttrREQ:
		return &CMReq{}, nil
	case CMAttrREP:
		return &CMRep{}, nil
	case CMAttrRTU:
		return &CMRtu{}, nil
	case CMAttrREJ:
		return &CMRej{}, nil
	case CMAttrMRA:
		return &CMMra{}, nil
	case CMAttrDREQ:
		return &CMDreq{}, nil
	case CMAttrDREP:
		return &CMDrep{}, nil
	case CMAttrSIDRREQ:
		return &CMSidrReq{}, nil
	case CMAttrSIDRREP:
		return &CMSidrRep{}, nil
	}
	return nil, fmt.Errorf("%w: %v", ErrCMAttr, a)
}

// DecodeCM decodes the message a CM MAD carries. The data path decodes
// into a message of the attribute's type directly (no allocation); this is
// for tools.
func DecodeCM(m MAD) (CMMessage, error) {
	msg, err := NewCMMessage(m.AttrID())
	if err != nil {
		return nil, err
	}
	return msg, msg.Decode(m.Data())
}

// MADLayer is the gopacket layer of a MAD: the common header and, for a CM
// MAD with a codec, the message. It is the packet's application layer,
// whose Payload is the MAD as the UD SEND carried it; its contents are the
// 256 bytes and its payload whatever followed them (nothing, from a
// kernel).
type MADLayer struct {
	data []byte
	MADHeader
	// CM is the CM message, nil when the MAD is not one (another class or
	// version, or an attribute without a codec).
	CM CMMessage
}

func (l *MADLayer) LayerType() gopacket.LayerType  { return LayerTypeMAD }
func (l *MADLayer) CanDecode() gopacket.LayerClass { return LayerTypeMAD }
func (l *MADLayer) LayerContents() []byte          { return l.data[:min(len(l.data), MADLen)] }
func (l *MADLayer) LayerPayload() []byte           { return l.data[min(len(l.data), MADLen):] }

// Payload is the UD SEND's payload: the MAD and anything after it.
func (l *MADLayer) Payload() []byte { return l.data }

// NextLayerType is Payload when bytes follow the MAD.
func (l *MADLayer) NextLayerType() gopacket.LayerType {
	if len(l.LayerPayload()) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// DecodeFromBytes decodes a MAD; a message without a codec leaves CM nil
// and is no error.
func (l *MADLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < MADLen {
		df.SetTruncated()
		return fmt.Errorf("decode MAD: %w: %d bytes", ErrMADShort, len(data))
	}
	l.data = data
	m := MAD(data[:MADLen])
	l.MADHeader = m.Header()
	l.CM = nil
	if _, err := ParseCMMAD(m); err == nil {
		if msg, err := DecodeCM(m); err == nil {
			l.CM = msg
		}
	}
	return nil
}

// SerializeTo writes the header and, if CM is set, the message (the rest
// of the data zeroed). It leaves AttrID as set: a caller building a CM MAD
// sets it to CM.Attr().
func (l *MADLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	d, err := b.PrependBytes(MADLen)
	if err != nil {
		return err
	}
	m := MAD(d)
	m.EncodeHeader(&l.MADHeader)
	clear(m.Data())
	if l.CM != nil {
		return l.CM.Encode(m.Data())
	}
	return nil
}

func decodeMAD(data []byte, p gopacket.PacketBuilder) error {
	l := &MADLayer{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	p.SetApplicationLayer(l)
	if len(l.LayerPayload()) == 0 {
		return nil
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// isMAD reports whether a UD packet's DETH and payload make a MAD: from QP
// 1 with the GSI Q_Key and at least 256 bytes. (Only QP 1 sends with that
// Q_Key; rxe drops a QP 1 receive with any other.)
func isMAD(d *DETHFields, payload int) bool {
	return d.QKey == GSIQKey && d.SrcQP == GSIQPN && payload >= MADLen
}
