package packet_test

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// Fuzz targets for every decoder. Seeds: a sample of the rxe captures (a few
// frames per opcode per capture), added here, and the files under
// testdata/fuzz/<target>/ (hand-made edge cases and any crasher found).

// seedFrames returns up to two RoCE frames per opcode of every capture, and
// a few non-RoCE frames.
func seedFrames(tb testing.TB) [][]byte {
	var out [][]byte
	for _, name := range captureFiles(tb) {
		seen := map[packet.Opcode]int{}
		other := 0
		for _, fr := range readFrames(tb, name) {
			var f packet.Frame
			if packet.ParseFrame(fr, &f) != nil {
				if other < 2 {
					out = append(out, fr)
					other++
				}
				continue
			}
			op := packet.BTH(f.Transport).Opcode()
			if seen[op] < 2 {
				seen[op]++
				out = append(out, fr)
			}
		}
	}
	return out
}

// seedTransports returns the UDP payloads of the seed frames.
func seedTransports(tb testing.TB) [][]byte {
	var out [][]byte
	for _, fr := range seedFrames(tb) {
		var f packet.Frame
		if packet.ParseFrame(fr, &f) == nil {
			out = append(out, f.Transport)
		}
	}
	return out
}

// FuzzDecode checks Packet.Decode never panics, that what it accepts lies
// inside the input, and that decode(encode(decode(b))) is a fixed point
// whose header bytes are the input's.
func FuzzDecode(f *testing.F) {
	for _, tr := range seedTransports(f) {
		f.Add(tr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p packet.Packet
		if p.Decode(b) != nil {
			return
		}
		info := p.Info()
		require.True(t, info.Valid)
		require.Equal(t, len(b), info.HdrLen+len(p.Payload)+int(p.BTH.PadCnt)+packet.ICRCLen)
		if len(p.Payload) > 0 {
			require.Same(t, &b[info.HdrLen], &p.Payload[0], "payload aliases the input")
		}
		out := p.AppendTo(nil)
		var q packet.Packet
		require.NoError(t, q.Decode(out))
		require.Equal(t, p.Payload, q.Payload)
		pq := p
		pq.Payload = q.Payload
		require.Equal(t, pq, q)
		// Headers re-encode to the input's bytes, pad count aside when the
		// input's pad count did not match its payload length.
		want := append([]byte(nil), b[:info.HdrLen]...)
		got := out[:info.HdrLen]
		want[1] &^= 0x30
		got[1] &^= 0x30
		require.Equal(t, want, got)
		require.Equal(t, b[info.HdrLen:info.HdrLen+len(p.Payload)], out[info.HdrLen:info.HdrLen+len(p.Payload)])
	})
}

// checkFrame checks the invariants of a parsed frame.
func checkFrame(t *testing.T, b []byte, f *packet.Frame) {
	ipLen := len(f.IP)
	require.True(t, ipLen == packet.IPv4Len || ipLen == packet.IPv6Len)
	require.Len(t, f.UDP, packet.UDPLen)
	a := f.Addressing()
	require.Equal(t, uint16(packet.UDPPort), a.DstPort)
	require.Equal(t, f.IsIPv4(), a.IsIPv4())
	_ = f.ICRCOK()
	// Fixing the ICRC of a copy gives a frame that parses and verifies.
	var p packet.Packet
	if len(f.Transport) < packet.BTHLen+packet.ICRCLen {
		return
	}
	ip := append([]byte(nil), b[len(f.Eth):len(f.Eth)+ipLen+packet.UDPLen+len(f.Transport)]...)
	var g packet.Frame
	require.NoError(t, packet.ParseIP(ip, &g))
	packet.SetICRC(g.IPUDP(), g.Transport)
	require.True(t, g.ICRCOK())
	if p.Decode(f.Transport) == nil {
		// Rebuilding the packet from its fields gives the same transport
		// bytes (ICRC aside: the rebuilt IP header may lack odd bits such
		// as the IPv4 reserved flag) whose ICRC verifies with the original
		// headers.
		a := g.Addressing()
		out := packet.AppendIPPacket(nil, &a, &p)[a.HeaderLen():]
		n := len(out) - packet.ICRCLen
		if int(p.BTH.PadCnt) == p.Pad() && bytes.Equal(g.Transport[n-p.Pad():n], make([]byte, p.Pad())) {
			require.Equal(t, g.Transport[:n], out[:n])
			packet.SetICRC(g.IPUDP(), out)
			require.Equal(t, g.Transport, out)
		}
	}
}

// FuzzParseFrame checks ParseFrame never panics and that what it accepts is
// consistent.
func FuzzParseFrame(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr packet.Frame
		if packet.ParseFrame(b, &fr) != nil {
			return
		}
		require.GreaterOrEqual(t, len(fr.Eth), packet.EthernetLen)
		checkFrame(t, b, &fr)
		// FixFrameICRC on a copy leaves a frame that parses and verifies.
		c := append([]byte(nil), b...)
		if packet.FixFrameICRC(c) == nil {
			var g packet.Frame
			require.NoError(t, packet.ParseFrame(c, &g))
			require.True(t, g.ICRCOK())
		}
	})
}

// FuzzParseIP checks ParseIP never panics and that what it accepts is
// consistent.
func FuzzParseIP(f *testing.F) {
	for _, fr := range seedFrames(f) {
		var fp packet.Frame
		if packet.ParseFrame(fr, &fp) == nil {
			f.Add(fr[len(fp.Eth):])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr packet.Frame
		if packet.ParseIP(b, &fr) != nil {
			return
		}
		require.Nil(t, fr.Eth)
		checkFrame(t, b, &fr)
	})
}

// noRecover makes gopacket let decoder panics through, so the fuzzer sees
// them instead of a DecodeFailure layer.
var noRecover = gopacket.DecodeOptions{SkipDecodeRecovery: true}

// FuzzGopacketFrame feeds arbitrary frames to gopacket with the RoCE layers
// registered. It must not panic, and when ParseFrame and Packet.Decode
// accept the frame, gopacket must decode the same fields and verify the
// same ICRC.
func FuzzGopacketFrame(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gp := gopacket.NewPacket(b, layers.LayerTypeEthernet, noRecover)
		ok, err := packet.VerifyICRC(gp)
		var fr packet.Frame
		var p packet.Packet
		if packet.ParseFrame(b, &fr) != nil || p.Decode(fr.Transport) != nil {
			return
		}
		require.NoError(t, err)
		require.Equal(t, fr.ICRCOK(), ok)
		var q packet.Packet
		require.NoError(t, q.FromLayers(gp))
		require.Equal(t, p, q)
	})
}

// FuzzGopacketTransport decodes arbitrary UDP payloads from LayerTypeBTH:
// gopacket must accept exactly what Packet.Decode accepts, with the same
// fields, and serializing the decoded layers must give the input back.
func FuzzGopacketTransport(f *testing.F) {
	for _, tr := range seedTransports(f) {
		f.Add(tr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gp := gopacket.NewPacket(b, packet.LayerTypeBTH, noRecover)
		var p packet.Packet
		err := p.Decode(b)
		if err != nil {
			require.Nil(t, gp.Layer(packet.LayerTypeBTH))
			require.NotNil(t, gp.ErrorLayer())
			require.ErrorIs(t, gp.ErrorLayer().Error(), err)
			return
		}
		require.Nil(t, gp.ErrorLayer())
		var q packet.Packet
		require.NoError(t, q.FromLayers(gp))
		require.Equal(t, p, q)
		buf := gopacket.NewSerializeBuffer()
		require.NoError(t, gopacket.SerializePacket(buf, gopacket.SerializeOptions{}, gp))
		require.Equal(t, b, buf.Bytes())
	})
}
