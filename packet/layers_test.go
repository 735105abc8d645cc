package packet_test

import (
	"fmt"
	"math/rand"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// gopacketFraming returns Ethernet, IP and UDP layers with the fields of a.
func gopacketFraming(eth *packet.Ethernet, a *packet.Addressing) (*layers.Ethernet, gopacket.NetworkLayer, *layers.UDP) {
	e := &layers.Ethernet{SrcMAC: net.HardwareAddr(eth.Src[:]), DstMAC: net.HardwareAddr(eth.Dst[:])}
	udp := &layers.UDP{SrcPort: layers.UDPPort(a.SrcPort), DstPort: packet.UDPPort}
	if a.IsIPv4() {
		e.EthernetType = layers.EthernetTypeIPv4
		s, d := a.Src.Unmap().As4(), a.Dst.Unmap().As4()
		ip := &layers.IPv4{Version: 4, IHL: 5, TOS: a.TrafficClass, Id: a.IPID, TTL: a.HopLimit,
			Protocol: layers.IPProtocolUDP, SrcIP: net.IP(s[:]), DstIP: net.IP(d[:])}
		if a.DF {
			ip.Flags = layers.IPv4DontFragment
		}
		return e, ip, udp
	}
	e.EthernetType = layers.EthernetTypeIPv6
	s, d := a.Src.As16(), a.Dst.As16()
	ip := &layers.IPv6{Version: 6, TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel,
		NextHeader: layers.IPProtocolUDP, HopLimit: a.HopLimit, SrcIP: net.IP(s[:]), DstIP: net.IP(d[:])}
	return e, ip, udp
}

// serializeWithGopacket builds the frame of p with gopacket.SerializeLayers,
// letting the BTH layer compute the ICRC.
func serializeWithGopacket(t *testing.T, a *packet.Addressing, p *packet.Packet) []byte {
	t.Helper()
	e, ip, udp := gopacketFraming(&testEth, a)
	require.NoError(t, udp.SetNetworkLayerForChecksum(ip))
	roce := p.SerializableLayers()
	require.NoError(t, roce[0].(*packet.BTHLayer).SetNetworkLayersForICRC(ip, udp))
	ls := append([]gopacket.SerializableLayer{e, ip.(gopacket.SerializableLayer), udp}, roce...)
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...))
	return buf.Bytes()
}

// TestGopacketSerializeMatchesAppendFrame serializes every opcode over IPv4
// and IPv6 with gopacket and compares with AppendFrame byte for byte. gopacket
// computes a UDP checksum where rxe sends 0; the ICRC masks it, so zeroing
// it must give AppendFrame's frame exactly.
func TestGopacketSerializeMatchesAppendFrame(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		for _, op := range validOpcodes() {
			for _, n := range []int{0, 1, 3, 8, 16, 333} {
				info := op.Info()
				if !info.Payload && n != 0 || info.FixedPayload != 0 && n != info.FixedPayload {
					continue
				}
				t.Run(fmt.Sprintf("%s/v4=%v/%d", op, a.IsIPv4(), n), func(t *testing.T) {
					p := randomPacket(rng, op, 0)
					p.BTH.TVer = 0
					p.Payload = make([]byte, n)
					rng.Read(p.Payload)
					want := packet.AppendFrame(nil, &testEth, &a, &p)
					got := serializeWithGopacket(t, &a, &p)
					// gopacket pads Ethernet frames to the 60-byte minimum; the
					// IP total length makes receivers ignore the padding.
					if len(want) < 60 {
						require.Len(t, got, 60)
						require.Equal(t, make([]byte, 60-len(want)), got[len(want):])
						got = got[:len(want)]
					}
					require.Len(t, got, len(want))
					var f packet.Frame
					require.NoError(t, packet.ParseFrame(got, &f), "gopacket frame must parse (UDP checksum valid)")
					require.True(t, f.ICRCOK())
					require.NotEqual(t, []byte{0, 0}, f.UDP[6:8], "gopacket computes the UDP checksum")
					f.UDP[6], f.UDP[7] = 0, 0
					require.Equal(t, want, got)
					require.True(t, f.ICRCOK(), "UDP checksum is masked out of the ICRC")

					// The gopacket decode of our frame gives the packet back.
					gp := gopacket.NewPacket(want, layers.LayerTypeEthernet, gopacket.Default)
					require.Nil(t, gp.ErrorLayer())
					var q packet.Packet
					require.NoError(t, q.FromLayers(gp))
					require.Equal(t, p, q)
					checkLayerChain(t, gp, &p)
					ok, err := packet.VerifyICRC(gp)
					require.NoError(t, err)
					require.True(t, ok)
				})
			}
		}
	}
}

func TestGopacketSerializeNeedsICRCLayers(t *testing.T) {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly}, Payload: []byte("hi")}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, p.SerializableLayers()...)
	require.ErrorContains(t, err, "SetNetworkLayersForICRC")

	// Without ComputeChecksums the layer writes the ICRC it holds.
	ls := p.SerializableLayers()
	ls[0].(*packet.BTHLayer).ICRC = 0x04030201
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...))
	b := buf.Bytes()
	require.Equal(t, []byte{1, 2, 3, 4}, b[len(b)-4:], "ICRC goes on the wire least significant byte first")
	require.Equal(t, uint8(2), packet.BTH(b).PadCnt())

	require.Error(t, ls[0].(*packet.BTHLayer).SetNetworkLayersForICRC(nil, nil))
	require.Error(t, ls[0].(*packet.BTHLayer).SetNetworkLayersForICRC(&layers.IPv4{}, nil))

	// IPv4 options are not supported by the ICRC (nor by rxe).
	_, ip, udp := gopacketFraming(&testEth, &testAddr4)
	ip.(*layers.IPv4).Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	ls = p.SerializableLayers()
	require.NoError(t, ls[0].(*packet.BTHLayer).SetNetworkLayersForICRC(ip, udp))
	err = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		append([]gopacket.SerializableLayer{ip.(gopacket.SerializableLayer), udp}, ls...)...)
	require.ErrorContains(t, err, "IPv4 without options")
}

// TestFixFrameICRC corrupts the ICRC of frames and checks FixFrameICRC
// restores it, also when a UDP checksum (which covers the ICRC) is present.
func TestFixFrameICRC(t *testing.T) {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCWriteOnly, PKey: 0xFFFF, DestQP: 17},
		RETH: packet.RETHFields{VA: 0x1000, RKey: 5, Length: 5}, Payload: []byte("hello")}
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		for _, frame := range [][]byte{packet.AppendFrame(nil, &testEth, &a, &p), serializeWithGopacket(t, &a, &p)} {
			want := append([]byte(nil), frame...)
			frame[len(frame)-1] ^= 0xFF
			frame[len(frame)-3] ^= 0x10
			require.NoError(t, packet.FixFrameICRC(frame))
			require.Equal(t, want, frame)

			// Changing a covered byte (a pad byte) and fixing gives a frame
			// whose ICRC and UDP checksum (if any) verify again.
			frame[len(frame)-5] ^= 0x01
			var f packet.Frame
			require.NoError(t, packet.FixFrameICRC(frame))
			require.NoError(t, packet.ParseFrame(frame, &f))
			require.True(t, f.ICRCOK())
			require.NotEqual(t, want[len(want)-4:], frame[len(frame)-4:])
		}
	}
	require.Error(t, packet.FixFrameICRC(make([]byte, 10)))
}

// TestGopacketDecodeErrors checks gopacket reports, as a decode failure,
// what Packet.Decode rejects, with the same error.
func TestGopacketDecodeErrors(t *testing.T) {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly}, Payload: []byte("abcdefgh")}
	for _, tt := range []struct {
		name string
		edit func(b []byte) []byte
		err  error
	}{
		{"unknown opcode", func(b []byte) []byte { b[0] = 0x15; return b }, packet.ErrUnknownOpcode},
		{"version", func(b []byte) []byte { b[1] |= 1; return b }, packet.ErrBadVersion},
		{"truncated", func(b []byte) []byte { return b[:10] }, packet.ErrTruncated},
		{"ack with payload", func(b []byte) []byte { b[0] = byte(packet.RCAcknowledge); return b }, packet.ErrUnexpectedPay},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.edit(p.AppendTo(nil))
			gp := gopacket.NewPacket(b, packet.LayerTypeBTH, gopacket.Default)
			require.Nil(t, gp.Layer(packet.LayerTypeBTH))
			el := gp.ErrorLayer()
			require.NotNil(t, el)
			require.ErrorIs(t, el.Error(), tt.err)
			var q packet.Packet
			require.ErrorIs(t, q.Decode(b), tt.err)
		})
	}
}

// TestExtLayerDecodeAlone checks the registered decoders of the extension
// header layers work on their own, and report truncation.
func TestExtLayerDecodeAlone(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 0xAA}
	for _, tt := range []struct {
		lt gopacket.LayerType
		n  int
	}{
		{packet.LayerTypeRETH, packet.RETHLen}, {packet.LayerTypeAETH, packet.AETHLen},
		{packet.LayerTypeAtomicETH, packet.AtomicETHLen}, {packet.LayerTypeAtomicAckETH, packet.AtomicAckETHLen},
		{packet.LayerTypeImmDt, packet.ImmDtLen}, {packet.LayerTypeIETH, packet.IETHLen},
		{packet.LayerTypeDETH, packet.DETHLen}, {packet.LayerTypeFETH, packet.FETHLen},
	} {
		gp := gopacket.NewPacket(data, tt.lt, gopacket.Default)
		l := gp.Layer(tt.lt)
		require.NotNil(t, l, "%v", tt.lt)
		require.Equal(t, data[:tt.n], l.LayerContents())
		require.Equal(t, data[tt.n:], l.LayerPayload())
		require.Equal(t, gopacket.LayerTypePayload, l.(gopacket.DecodingLayer).NextLayerType())
		require.Equal(t, tt.lt.String(), l.LayerType().String())

		// Serializing writes the same header.
		buf := gopacket.NewSerializeBuffer()
		require.NoError(t, l.(gopacket.SerializableLayer).SerializeTo(buf, gopacket.SerializeOptions{}))
		require.Equal(t, data[:tt.n], buf.Bytes(), "%v", tt.lt)

		short := gopacket.NewPacket(data[:tt.n-1], tt.lt, gopacket.Default)
		require.Nil(t, short.Layer(tt.lt))
		require.ErrorIs(t, short.ErrorLayer().Error(), packet.ErrTruncated)
		require.True(t, short.Metadata().Truncated)
	}
}

// TestGopacketUDPPortRegistration checks a UDP datagram to 4791 is decoded as
// RoCE by gopacket's own UDP layer.
func TestGopacketUDPPortRegistration(t *testing.T) {
	require.Equal(t, packet.LayerTypeBTH, layers.UDPPort(packet.UDPPort).LayerType())
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCAcknowledge, PKey: 0xFFFF, DestQP: 0x123456, PSN: 0xFFFFFF},
		AETH: packet.AETHFields{Syndrome: packet.SyndromeNAKPSNSeq, MSN: 0xABCDEF}}
	ip := packet.AppendIPPacket(nil, &testAddr6, &p)
	gp := gopacket.NewPacket(ip, layers.LayerTypeIPv6, gopacket.Default)
	bth, ok := gp.Layer(packet.LayerTypeBTH).(*packet.BTHLayer)
	require.True(t, ok)
	require.Equal(t, p.BTH, bth.BTHFields)
	aeth, ok := gp.Layer(packet.LayerTypeAETH).(*packet.AETHLayer)
	require.True(t, ok)
	require.Equal(t, p.AETH, aeth.AETHFields)
	require.Equal(t, gopacket.LayerTypeZero, aeth.NextLayerType())
	require.Nil(t, gp.ApplicationLayer())
	ok, err := packet.VerifyICRC(gp)
	require.NoError(t, err)
	require.True(t, ok)

	// VerifyICRC needs the IP and UDP layers.
	_, err = packet.VerifyICRC(gopacket.NewPacket(ip[packet.IPv6Len+packet.UDPLen:], packet.LayerTypeBTH, gopacket.Default))
	require.ErrorIs(t, err, packet.ErrNoRoCELayers)
	_, err = packet.VerifyICRC(gopacket.NewPacket(ip, layers.LayerTypeIPv6, gopacket.Lazy))
	require.NoError(t, err, "lazy decoding works too")
}

// TestDecodingLayerParser decodes frames of every opcode and the rxe
// captures with a gopacket.DecodingLayerParser built from DecodingLayers,
// and checks it follows each opcode's header chain and gets the fields
// Packet.Decode gets.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		payload gopacket.Payload
	)
	roce := packet.DecodingLayers()
	ls := append([]gopacket.DecodingLayer{&eth, &ip4, &ip6, &udp, &payload}, roce...)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, ls...)
	var frames [][]byte
	rng := rand.New(rand.NewSource(5))
	for _, op := range validOpcodes() {
		p := randomPacket(rng, op, 100)
		p.BTH.TVer = 0
		frames = append(frames, packet.AppendFrame(nil, &testEth, &testAddr4, &p), packet.AppendFrame(nil, &testEth, &testAddr6, &p))
	}
	for _, name := range captureFiles(t) {
		frames = append(frames, roceFrames(t, name)...)
	}
	var decoded []gopacket.LayerType
	for i, fr := range frames {
		require.NoError(t, parser.DecodeLayers(fr, &decoded), "frame %d", i)
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		gp := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
		var want []gopacket.LayerType
		for _, l := range gp.Layers() {
			want = append(want, l.LayerType())
		}
		require.Equal(t, want, decoded, "frame %d (%s)", i, p.BTH.Opcode)
		q := packet.Packet{BTH: roce[0].(*packet.BTHLayer).BTHFields, Payload: []byte{}}
		for _, lt := range decoded {
			switch lt {
			case packet.LayerTypeRETH:
				q.RETH = roce[3].(*packet.RETHLayer).RETHFields
			case packet.LayerTypeAtomicETH:
				q.AtomicETH = roce[4].(*packet.AtomicETHLayer).AtomicETHFields
			case packet.LayerTypeAETH:
				q.AETH = roce[5].(*packet.AETHLayer).AETHFields
			case packet.LayerTypeAtomicAckETH:
				q.AtomicAck = roce[6].(*packet.AtomicAckETHLayer).Orig
			case packet.LayerTypeImmDt:
				q.Imm = roce[7].(*packet.ImmDtLayer).Imm
			case packet.LayerTypeIETH:
				q.IETH = roce[8].(*packet.IETHLayer).RKey
			case packet.LayerTypeDETH:
				q.DETH = roce[2].(*packet.DETHLayer).DETHFields
			case packet.LayerTypeFETH:
				q.FETH = roce[1].(*packet.FETHLayer).FETHFields
			case gopacket.LayerTypePayload:
				q.Payload = payload
			case packet.LayerTypeMAD:
				q.Payload = roce[len(roce)-1].(*packet.MADLayer).Payload()
			}
		}
		require.Equal(t, p, q, "frame %d", i)
	}
}
