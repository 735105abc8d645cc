package packet

import (
	"encoding/binary"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// gopacket layer types of the RoCE v2 transport headers. The numbers are in
// the 1000-1999 range gopacket sets aside for application layer types.
var (
	LayerTypeBTH          = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeRETH         = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: extDecoder(HdrRETH)})
	LayerTypeAETH         = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: extDecoder(HdrAETH)})
	LayerTypeAtomicETH    = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{Name: "AtomicETH", Decoder: extDecoder(HdrAtomicETH)})
	LayerTypeAtomicAckETH = gopacket.RegisterLayerType(1795, gopacket.LayerTypeMetadata{Name: "AtomicAckETH", Decoder: extDecoder(HdrAtomicAckETH)})
	LayerTypeImmDt        = gopacket.RegisterLayerType(1796, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: extDecoder(HdrImmDt)})
	LayerTypeIETH         = gopacket.RegisterLayerType(1797, gopacket.LayerTypeMetadata{Name: "IETH", Decoder: extDecoder(HdrIETH)})
	LayerTypeDETH         = gopacket.RegisterLayerType(1798, gopacket.LayerTypeMetadata{Name: "DETH", Decoder: extDecoder(HdrDETH)})
	LayerTypeFETH         = gopacket.RegisterLayerType(1799, gopacket.LayerTypeMetadata{Name: "FETH", Decoder: extDecoder(HdrFETH)})
)

// init makes gopacket's UDP layer hand datagrams to UDP port 4791 to the
// BTH decoder, so that gopacket.NewPacket(frame, layers.LayerTypeEthernet,
// gopacket.Default) yields the RoCE layers.
func init() {
	layers.RegisterUDPPortLayerType(UDPPort, LayerTypeBTH)
}

// BTHLayer is the gopacket layer of the Base Transport Header. It also
// carries the packet's trailer: the pad bytes and the ICRC, which gopacket has
// no place for after the payload. Contents is the 12-byte BTH; Payload is the
// extension headers and the payload, without pad and ICRC.
//
// Decoding validates the packet as Packet.Decode does and fails with the same
// errors; the following layers are the extension headers in wire order and a
// gopacket.Payload holding the payload, if any.
type BTHLayer struct {
	layers.BaseLayer
	BTHFields
	// Pad is the pad bytes as received (PadCnt of them). On serializing with
	// FixLengths, or when its length is not PadCnt, zeros are written.
	Pad []byte
	// ICRC is the invariant CRC as ComputeICRC returns it; the wire carries it
	// least significant byte first (StoredICRC reads the wire bytes the way
	// tshark shows them). Serializing with ComputeChecksums recomputes it when
	// SetNetworkLayersForICRC was called.
	ICRC uint32

	// transport is BTH through ICRC, the span CheckICRC needs.
	transport []byte
	// ip and udp give the headers the ICRC covers when serializing.
	ip  gopacket.SerializableLayer
	udp *layers.UDP
}

// LayerType returns LayerTypeBTH.
func (l *BTHLayer) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (l *BTHLayer) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns the type of the first extension header the opcode
// calls for, gopacket.LayerTypePayload when there is only payload, or
// gopacket.LayerTypeZero when nothing follows.
func (l *BTHLayer) NextLayerType() gopacket.LayerType {
	return nextLayerType(l.Opcode.Info().Headers, len(l.Payload))
}

// Transport returns the decoded packet's bytes from BTH through ICRC (nil for
// a layer that was not decoded).
func (l *BTHLayer) Transport() []byte { return l.transport }

// DecodeFromBytes decodes the UDP payload of a RoCE v2 packet: it validates
// the whole packet with Packet.Decode, keeps the BTH fields, pad and ICRC, and
// leaves the extension headers and payload as the layer's payload.
func (l *BTHLayer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	var p Packet
	if err := p.Decode(data); err != nil {
		if err == ErrTruncated {
			df.SetTruncated()
		}
		return fmt.Errorf("decode BTH (opcode 0x%02x): %w", firstByte(data), err)
	}
	end := len(data) - ICRCLen
	padStart := end - int(p.BTH.PadCnt)
	l.BTHFields = p.BTH
	l.Contents = data[:BTHLen]
	l.Payload = data[BTHLen:padStart]
	l.Pad = data[padStart:end]
	l.ICRC = binary.LittleEndian.Uint32(data[end:])
	l.transport = data
	return nil
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// SetNetworkLayersForICRC names the IP layer (*layers.IPv4 without options
// or *layers.IPv6) and the UDP layer that will be serialized around this BTH,
// so that SerializeTo with ComputeChecksums can compute the ICRC, which
// covers them. The layers are serialized once more into scratch space for
// that; set them up (and, for the UDP checksum, call
// udp.SetNetworkLayerForChecksum) before serializing.
func (l *BTHLayer) SetNetworkLayersForICRC(ip gopacket.NetworkLayer, udp *layers.UDP) error {
	if ip == nil || udp == nil {
		return fmt.Errorf("roce ICRC: need both an IP and a UDP layer")
	}
	switch ip.(type) {
	case *layers.IPv4, *layers.IPv6:
	default:
		return fmt.Errorf("roce ICRC: cannot use network layer %v", ip.LayerType())
	}
	l.ip = ip.(gopacket.SerializableLayer)
	l.udp = udp
	return nil
}

// SerializeTo writes the BTH in front of what the inner layers (extension
// headers and payload) already wrote, and appends the pad and the ICRC. With
// FixLengths PadCnt is set from the payload length; with ComputeChecksums the
// ICRC is computed, which needs SetNetworkLayersForICRC. Otherwise the pad
// count, pad bytes and ICRC are written as the layer holds them.
func (l *BTHLayer) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	inner := len(b.Bytes())
	if opts.FixLengths {
		l.PadCnt = uint8((4 - inner&3) & 3)
	}
	pad := int(l.PadCnt & 3)
	hdr, err := b.PrependBytes(BTHLen)
	if err != nil {
		return err
	}
	BTH(hdr).Encode(&l.BTHFields)
	tail, err := b.AppendBytes(pad + ICRCLen)
	if err != nil {
		return err
	}
	clear(tail)
	if !opts.FixLengths && len(l.Pad) == pad {
		copy(tail, l.Pad)
	}
	if opts.ComputeChecksums {
		if l.ip == nil || l.udp == nil {
			return fmt.Errorf("roce ICRC: call SetNetworkLayersForICRC before serializing with ComputeChecksums")
		}
		ipudp, err := l.serializeIPUDP(len(b.Bytes()), opts)
		if err != nil {
			return err
		}
		t := b.Bytes()
		l.ICRC = ComputeICRC(ipudp, t[:len(t)-ICRCLen])
	}
	t := b.Bytes()
	binary.LittleEndian.PutUint32(t[len(t)-ICRCLen:], l.ICRC)
	return nil
}

// serializeIPUDP serializes the UDP and IP layers around a transport of n
// bytes into scratch space and returns their headers. Checksums are not
// computed: the ICRC masks them.
func (l *BTHLayer) serializeIPUDP(n int, opts gopacket.SerializeOptions) ([]byte, error) {
	buf := gopacket.NewSerializeBufferExpectedSize(IPv6Len+UDPLen, n)
	if _, err := buf.AppendBytes(n); err != nil {
		return nil, err
	}
	o := gopacket.SerializeOptions{FixLengths: opts.FixLengths}
	if err := l.udp.SerializeTo(buf, o); err != nil {
		return nil, fmt.Errorf("roce ICRC: serialize UDP: %w", err)
	}
	if err := l.ip.SerializeTo(buf, o); err != nil {
		return nil, fmt.Errorf("roce ICRC: serialize IP: %w", err)
	}
	h := buf.Bytes()
	h = h[:len(h)-n]
	if len(h) != IPv4Len+UDPLen && len(h) != IPv6Len+UDPLen {
		return nil, fmt.Errorf("roce ICRC: IP and UDP headers are %d bytes; want 28 (IPv4 without options) or 48 (IPv6)", len(h))
	}
	return h, nil
}

// nextLayerType returns the layer type of the first header in hs (in wire
// order), else gopacket.LayerTypePayload if payload bytes remain, else
// gopacket.LayerTypeZero.
func nextLayerType(hs Hdr, payload int) gopacket.LayerType {
	for _, e := range hdrOrder {
		if hs&e.h != 0 {
			return hdrLayerType(e.h)
		}
	}
	if payload > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// decodeBTH is the gopacket decoder of LayerTypeBTH. It hands on to an
// extDecoder carrying the opcode's remaining header set, because an
// extension header alone does not say what follows it.
func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	l := &BTHLayer{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	hs := l.Opcode.Info().Headers
	if hs != 0 {
		return p.NextDecoder(extDecoder(hs))
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}
