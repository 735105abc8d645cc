package packet

import (
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Glue between Packet and the gopacket layers, and ICRC checks for packets
// decoded by gopacket. None of it is on the data path.

// ErrNoRoCELayers is returned for a gopacket.Packet that has no BTH layer or lacks
// the IP and UDP layers around it.
var ErrNoRoCELayers = errors.New("roce: packet has no IP/UDP/BTH layers")

// SerializableLayers returns the packet as gopacket layers: a BTHLayer, the
// extension header layers the opcode calls for, and a gopacket.Payload when
// there is payload. Serialized after Ethernet, IP and UDP layers (with
// BTHLayer.SetNetworkLayersForICRC and options FixLengths and
// ComputeChecksums) they give the frame AppendFrame writes, except for the
// UDP checksum, which gopacket computes and rxe leaves 0. The layers alias
// p.Payload.
func (p *Packet) SerializableLayers() []gopacket.SerializableLayer {
	info := p.Info()
	out := make([]gopacket.SerializableLayer, 0, 4)
	bth := &BTHLayer{BTHFields: p.BTH}
	bth.PadCnt = uint8(p.Pad())
	out = append(out, bth)
	for _, e := range hdrOrder {
		if info.Headers&e.h == 0 {
			continue
		}
		switch e.h {
		case HdrFETH:
			out = append(out, &FETHLayer{FETHFields: p.FETH})
		case HdrDETH:
			out = append(out, &DETHLayer{DETHFields: p.DETH})
		case HdrRETH:
			out = append(out, &RETHLayer{RETHFields: p.RETH})
		case HdrAtomicETH:
			out = append(out, &AtomicETHLayer{AtomicETHFields: p.AtomicETH})
		case HdrAETH:
			out = append(out, &AETHLayer{AETHFields: p.AETH})
		case HdrAtomicAckETH:
			out = append(out, &AtomicAckETHLayer{Orig: p.AtomicAck})
		case HdrImmDt:
			out = append(out, &ImmDtLayer{Imm: p.Imm})
		case HdrIETH:
			out = append(out, &IETHLayer{RKey: p.IETH})
		}
	}
	if len(p.Payload) > 0 {
		out = append(out, gopacket.Payload(p.Payload))
	}
	return out
}

// FromLayers fills p from the RoCE layers of a gopacket.Packet: the BTH
// layer, the extension header layers and the application payload. It gives
// the same Packet as Decode of the UDP payload.
func (p *Packet) FromLayers(pkt gopacket.Packet) error {
	bth, ok := pkt.Layer(LayerTypeBTH).(*BTHLayer)
	if !ok {
		return ErrNoRoCELayers
	}
	*p = Packet{BTH: bth.BTHFields, Payload: []byte{}}
	if l, ok := pkt.Layer(LayerTypeRETH).(*RETHLayer); ok {
		p.RETH = l.RETHFields
	}
	if l, ok := pkt.Layer(LayerTypeAETH).(*AETHLayer); ok {
		p.AETH = l.AETHFields
	}
	if l, ok := pkt.Layer(LayerTypeAtomicETH).(*AtomicETHLayer); ok {
		p.AtomicETH = l.AtomicETHFields
	}
	if l, ok := pkt.Layer(LayerTypeAtomicAckETH).(*AtomicAckETHLayer); ok {
		p.AtomicAck = l.Orig
	}
	if l, ok := pkt.Layer(LayerTypeImmDt).(*ImmDtLayer); ok {
		p.Imm = l.Imm
	}
	if l, ok := pkt.Layer(LayerTypeIETH).(*IETHLayer); ok {
		p.IETH = l.RKey
	}
	if l, ok := pkt.Layer(LayerTypeDETH).(*DETHLayer); ok {
		p.DETH = l.DETHFields
	}
	if l, ok := pkt.Layer(LayerTypeFETH).(*FETHLayer); ok {
		p.FETH = l.FETHFields
	}
	if app := pkt.ApplicationLayer(); app != nil {
		p.Payload = app.Payload()
	}
	return nil
}

// icrcHeaders returns the IP and UDP headers of a decoded gopacket.Packet as
// the ICRC covers them, and its BTH layer.
func icrcHeaders(pkt gopacket.Packet, scratch *[IPv6Len + UDPLen]byte) ([]byte, *BTHLayer, error) {
	bth, ok := pkt.Layer(LayerTypeBTH).(*BTHLayer)
	if !ok || bth.transport == nil {
		return nil, nil, ErrNoRoCELayers
	}
	udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok {
		return nil, nil, ErrNoRoCELayers
	}
	var ip []byte
	switch n := pkt.NetworkLayer().(type) {
	case *layers.IPv4:
		ip = n.Contents
		if len(ip) != IPv4Len {
			return nil, nil, fmt.Errorf("roce ICRC: IPv4 header is %d bytes: %w", len(ip), ErrIPOptions)
		}
	case *layers.IPv6:
		ip = n.Contents
		if len(ip) != IPv6Len || pkt.Layer(layers.LayerTypeIPv6HopByHop) != nil {
			return nil, nil, fmt.Errorf("roce ICRC: IPv6 extension headers are not supported: %w", ErrNotUDP)
		}
	default:
		return nil, nil, ErrNoRoCELayers
	}
	if len(udp.Contents) != UDPLen {
		return nil, nil, ErrNoRoCELayers
	}
	n := copy(scratch[:], ip)
	n += copy(scratch[n:], udp.Contents)
	return scratch[:n], bth, nil
}

// VerifyICRC reports whether the ICRC of a RoCE v2 packet decoded by gopacket
// is right. It fails with ErrNoRoCELayers when pkt lacks the IP, UDP or BTH layer.
func VerifyICRC(pkt gopacket.Packet) (bool, error) {
	var scratch [IPv6Len + UDPLen]byte
	ipudp, bth, err := icrcHeaders(pkt, &scratch)
	if err != nil {
		return false, err
	}
	return CheckICRC(ipudp, bth.transport), nil
}

// FixFrameICRC recomputes the ICRC of a serialized Ethernet frame in place,
// for frames built with gopacket without BTHLayer.SetNetworkLayersForICRC, or
// edited after serializing. A non-zero UDP checksum, which covers the ICRC,
// is recomputed too. The frame must parse with ParseFrame, checksums aside.
func FixFrameICRC(frame []byte) error {
	var f Frame
	if err := parseFrame(frame, &f, false); err != nil {
		return fmt.Errorf("fix ICRC: %w", err)
	}
	if len(f.Transport) < BTHLen+ICRCLen {
		return fmt.Errorf("fix ICRC: %w", ErrTruncated)
	}
	SetICRC(f.IPUDP(), f.Transport)
	if f.UDP[6] != 0 || f.UDP[7] != 0 {
		setUDPChecksum(f.IP, f.UDP[:UDPLen+len(f.Transport)])
	}
	return nil
}
