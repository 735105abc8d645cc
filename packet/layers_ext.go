package packet

import (
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The extension header layers. Each decodes and encodes through the header
// view of the same name (RETH, AETH, ...). An extension header does not say
// what follows it (the BTH opcode does), so each layer keeps the next layer
// type it was given: decoding through gopacket.NewPacket sets it from the
// opcode; layers made by DecodingLayers consult the BTH layer decoded before
// them; any other layer decoded on its own says gopacket.LayerTypePayload when
// bytes remain.

// extLayer is what the extension header layers share: the gopacket base, the
// type of the layer that follows, and optionally the BTH layer that gives
// the opcode.
type extLayer struct {
	layers.BaseLayer
	next gopacket.LayerType
	bth  *BTHLayer
}

// NextLayerType returns the layer type that follows the header.
func (e *extLayer) NextLayerType() gopacket.LayerType { return e.next }

// split takes the n-byte header h off the front of data.
func (e *extLayer) split(data []byte, h Hdr, n int, df gopacket.DecodeFeedback, name string) ([]byte, error) {
	if len(data) < n {
		df.SetTruncated()
		return nil, fmt.Errorf("decode %s: %d bytes, need %d: %w", name, len(data), n, ErrTruncated)
	}
	e.Contents, e.Payload = data[:n], data[n:]
	var rest Hdr
	if e.bth != nil {
		rest = headersAfter(e.bth.Opcode.Info().Headers, h)
	}
	e.next = nextLayerType(rest, len(e.Payload))
	return data[:n], nil
}

// headersAfter returns the headers of hs that come after h in wire order.
func headersAfter(hs, h Hdr) Hdr {
	for _, e := range hdrOrder {
		hs &^= e.h
		if e.h == h {
			break
		}
	}
	return hs
}

// DecodingLayers returns a BTH layer and a layer for each extension header,
// linked so that a gopacket.DecodingLayerParser given them (after its
// Ethernet, IP and UDP layers) follows the opcode's header chain: each
// extension header layer asks the BTH layer what comes next; a MAD on QP 1
// (the connection manager's) decodes as a MADLayer. Add a gopacket.Payload
// to the parser for the payload.
func DecodingLayers() []gopacket.DecodingLayer {
	bth := &BTHLayer{}
	out := []gopacket.DecodingLayer{bth}
	for _, e := range hdrOrder {
		l := newExtLayer(e.h)
		l.setBTH(bth)
		out = append(out, l)
	}
	return append(out, &MADLayer{})
}

// RETHLayer is the gopacket layer of the RDMA Extended Transport Header.
type RETHLayer struct {
	extLayer
	RETHFields
}

func (l *RETHLayer) LayerType() gopacket.LayerType  { return LayerTypeRETH }
func (l *RETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeRETH }
func (l *RETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrRETH, RETHLen, df, "RETH")
	if err == nil {
		l.RETHFields = RETH(h).Fields()
	}
	return err
}
func (l *RETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(RETHLen)
	if err == nil {
		RETH(h).Encode(&l.RETHFields)
	}
	return err
}

// AETHLayer is the gopacket layer of the ACK Extended Transport Header.
type AETHLayer struct {
	extLayer
	AETHFields
}

func (l *AETHLayer) LayerType() gopacket.LayerType  { return LayerTypeAETH }
func (l *AETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeAETH }
func (l *AETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrAETH, AETHLen, df, "AETH")
	if err == nil {
		l.AETHFields = AETH(h).Fields()
	}
	return err
}
func (l *AETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AETHLen)
	if err == nil {
		AETH(h).Encode(&l.AETHFields)
	}
	return err
}

// AtomicETHLayer is the gopacket layer of the Atomic Extended Transport Header.
type AtomicETHLayer struct {
	extLayer
	AtomicETHFields
}

func (l *AtomicETHLayer) LayerType() gopacket.LayerType  { return LayerTypeAtomicETH }
func (l *AtomicETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeAtomicETH }
func (l *AtomicETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrAtomicETH, AtomicETHLen, df, "AtomicETH")
	if err == nil {
		l.AtomicETHFields = AtomicETH(h).Fields()
	}
	return err
}
func (l *AtomicETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicETHLen)
	if err == nil {
		AtomicETH(h).Encode(&l.AtomicETHFields)
	}
	return err
}

// AtomicAckETHLayer is the gopacket layer of the Atomic ACK header.
type AtomicAckETHLayer struct {
	extLayer
	// Orig is the value at the target address before the atomic ran.
	Orig uint64
}

func (l *AtomicAckETHLayer) LayerType() gopacket.LayerType  { return LayerTypeAtomicAckETH }
func (l *AtomicAckETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeAtomicAckETH }
func (l *AtomicAckETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrAtomicAckETH, AtomicAckETHLen, df, "AtomicAckETH")
	if err == nil {
		l.Orig = AtomicAckETH(h).Orig()
	}
	return err
}
func (l *AtomicAckETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(AtomicAckETHLen)
	if err == nil {
		AtomicAckETH(h).Encode(l.Orig)
	}
	return err
}

// ImmDtLayer is the gopacket layer of the immediate data header.
type ImmDtLayer struct {
	extLayer
	// Imm is the immediate data in wire order, as Packet.Imm.
	Imm uint32
}

func (l *ImmDtLayer) LayerType() gopacket.LayerType  { return LayerTypeImmDt }
func (l *ImmDtLayer) CanDecode() gopacket.LayerClass { return LayerTypeImmDt }
func (l *ImmDtLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrImmDt, ImmDtLen, df, "ImmDt")
	if err == nil {
		l.Imm = ImmDt(h).Imm()
	}
	return err
}
func (l *ImmDtLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(ImmDtLen)
	if err == nil {
		ImmDt(h).Encode(l.Imm)
	}
	return err
}

// IETHLayer is the gopacket layer of the Invalidate Extended Transport Header.
type IETHLayer struct {
	extLayer
	// RKey is the remote key to invalidate.
	RKey uint32
}

func (l *IETHLayer) LayerType() gopacket.LayerType  { return LayerTypeIETH }
func (l *IETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeIETH }
func (l *IETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrIETH, IETHLen, df, "IETH")
	if err == nil {
		l.RKey = IETH(h).RKey()
	}
	return err
}
func (l *IETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(IETHLen)
	if err == nil {
		IETH(h).Encode(l.RKey)
	}
	return err
}

// DETHLayer is the gopacket layer of the Datagram Extended Transport Header.
type DETHLayer struct {
	extLayer
	DETHFields
}

func (l *DETHLayer) LayerType() gopacket.LayerType  { return LayerTypeDETH }
func (l *DETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeDETH }
func (l *DETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrDETH, DETHLen, df, "DETH")
	if err == nil {
		l.DETHFields = DETH(h).Fields()
		l.next = l.payloadType(l.next)
	}
	return err
}

// payloadType turns next, the type of what follows the DETH, into
// LayerTypeMAD when the payload is a MAD on QP 1.
func (l *DETHLayer) payloadType(next gopacket.LayerType) gopacket.LayerType {
	if next == gopacket.LayerTypePayload && isMAD(&l.DETHFields, len(l.Payload)) {
		return LayerTypeMAD
	}
	return next
}
func (l *DETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(DETHLen)
	if err == nil {
		DETH(h).Encode(&l.DETHFields)
	}
	return err
}

// FETHLayer is the gopacket layer of the FLUSH Extended Transport Header.
type FETHLayer struct {
	extLayer
	FETHFields
}

func (l *FETHLayer) LayerType() gopacket.LayerType  { return LayerTypeFETH }
func (l *FETHLayer) CanDecode() gopacket.LayerClass { return LayerTypeFETH }
func (l *FETHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	h, err := l.split(data, HdrFETH, FETHLen, df, "FETH")
	if err == nil {
		l.FETHFields = FETH(h).Fields()
	}
	return err
}
func (l *FETHLayer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	h, err := b.PrependBytes(FETHLen)
	if err == nil {
		FETH(h).Encode(&l.FETHFields)
	}
	return err
}

// decodingExtLayer is an extension header layer as the decoder handles it.
type decodingExtLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
	setNext(gopacket.LayerType)
	setBTH(*BTHLayer)
}

func (e *extLayer) setNext(t gopacket.LayerType) { e.next = t }
func (e *extLayer) setBTH(b *BTHLayer)           { e.bth = b }

// newExtLayer returns an empty layer for the extension header h.
func newExtLayer(h Hdr) decodingExtLayer {
	switch h {
	case HdrRETH:
		return &RETHLayer{}
	case HdrAETH:
		return &AETHLayer{}
	case HdrAtomicETH:
		return &AtomicETHLayer{}
	case HdrAtomicAckETH:
		return &AtomicAckETHLayer{}
	case HdrImmDt:
		return &ImmDtLayer{}
	case HdrIETH:
		return &IETHLayer{}
	case HdrDETH:
		return &DETHLayer{}
	case HdrFETH:
		return &FETHLayer{}
	}
	return nil
}

// hdrLayerType returns the layer type of the extension header h.
func hdrLayerType(h Hdr) gopacket.LayerType {
	switch h {
	case HdrRETH:
		return LayerTypeRETH
	case HdrAETH:
		return LayerTypeAETH
	case HdrAtomicETH:
		return LayerTypeAtomicETH
	case HdrAtomicAckETH:
		return LayerTypeAtomicAckETH
	case HdrImmDt:
		return LayerTypeImmDt
	case HdrIETH:
		return LayerTypeIETH
	case HdrDETH:
		return LayerTypeDETH
	case HdrFETH:
		return LayerTypeFETH
	}
	return gopacket.LayerTypeZero
}

// extDecoder decodes the first (in wire order) of a set of extension headers
// and hands the rest of the set to the next extDecoder. Registered as the
// decoder of a single header's layer type, the set is that header alone.
type extDecoder Hdr

func (d extDecoder) Decode(data []byte, p gopacket.PacketBuilder) error {
	hs := Hdr(d)
	var h Hdr
	for _, e := range hdrOrder {
		if hs&e.h != 0 {
			h = e.h
			break
		}
	}
	l := newExtLayer(h)
	if l == nil {
		return fmt.Errorf("roce: no extension header in set 0x%x", uint16(hs))
	}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	rest := hs &^ h
	next := nextLayerType(rest, len(l.LayerPayload()))
	if d, ok := l.(*DETHLayer); ok {
		next = d.payloadType(next)
	}
	l.setNext(next)
	p.AddLayer(l)
	if rest != 0 {
		return p.NextDecoder(extDecoder(rest))
	}
	if next == LayerTypeMAD {
		return p.NextDecoder(LayerTypeMAD)
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}
