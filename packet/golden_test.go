package packet_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// TestGoldenRxeCaptures decodes every RoCE frame of the kernel rxe captures,
// verifies its ICRC, checks that re-encoding gives identical bytes, and that
// the gopacket path decodes the same fields and re-serializes the same bytes.
func TestGoldenRxeCaptures(t *testing.T) {
	for _, name := range captureFiles(t) {
		t.Run(filepath.Base(name), func(t *testing.T) {
			roce := 0
			for i, data := range readFrames(t, name) {
				var f packet.Frame
				gp := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
				if err := packet.ParseFrame(data, &f); err != nil {
					// Not RoCE: gopacket must not see a BTH either.
					require.Nil(t, gp.Layer(packet.LayerTypeBTH), "frame %d: %v", i, err)
					continue
				}
				roce++
				require.True(t, f.ICRCOK(), "frame %d ICRC", i)
				var p packet.Packet
				require.NoError(t, p.Decode(f.Transport), "frame %d", i)
				a := f.Addressing()
				out := packet.AppendIPPacket(nil, &a, &p)
				require.True(t, bytes.Equal(out[a.HeaderLen():], f.Transport), "frame %d re-encode transport", i)
				ip := append([]byte(nil), f.IPUDP()...)
				// our UDP checksum is 0 as rxe's; the IP checksum is recomputed
				require.Equal(t, ip, out[:a.HeaderLen()], "frame %d re-encode ip/udp", i)

				// gopacket path.
				require.Nil(t, gp.ErrorLayer(), "frame %d: gopacket error", i)
				var q packet.Packet
				require.NoError(t, q.FromLayers(gp), "frame %d", i)
				require.Equal(t, p, q, "frame %d: gopacket fields differ from Decode", i)
				checkLayerChain(t, gp, &p)
				ok, err := packet.VerifyICRC(gp)
				require.NoError(t, err)
				require.True(t, ok, "frame %d: VerifyICRC", i)
				bth := gp.Layer(packet.LayerTypeBTH).(*packet.BTHLayer)
				require.Equal(t, packet.StoredICRC(f.Transport), bswap32(bth.ICRC))
				require.Equal(t, packet.ComputeICRC(f.IPUDP(), f.Transport[:len(f.Transport)-packet.ICRCLen]), bth.ICRC)

				// Serializing the decoded layers as they are gives the frame
				// back, byte for byte.
				buf := gopacket.NewSerializeBuffer()
				require.NoError(t, gopacket.SerializePacket(buf, gopacket.SerializeOptions{}, gp))
				require.Equal(t, data[:len(buf.Bytes())], buf.Bytes(), "frame %d re-serialize", i)
			}
			require.NotZero(t, roce)
		})
	}
}

func bswap32(v uint32) uint32 { return v>>24 | v>>8&0xFF00 | v<<8&0xFF0000 | v<<24 }

// checkLayerChain checks the gopacket layers after UDP are the BTH, the
// extension headers in wire order and the payload, each pointing at the
// next, and that their contents tile the transport bytes.
func checkLayerChain(t *testing.T, gp gopacket.Packet, p *packet.Packet) {
	t.Helper()
	ls := gp.Layers()
	i := 0
	for i < len(ls) && ls[i].LayerType() != packet.LayerTypeBTH {
		i++
	}
	require.Less(t, i, len(ls), "no BTH layer")
	want := []gopacket.LayerType{packet.LayerTypeBTH}
	info := p.Info()
	for _, h := range []struct {
		h  packet.Hdr
		lt gopacket.LayerType
	}{
		{packet.HdrFETH, packet.LayerTypeFETH}, {packet.HdrDETH, packet.LayerTypeDETH},
		{packet.HdrRETH, packet.LayerTypeRETH}, {packet.HdrAtomicETH, packet.LayerTypeAtomicETH},
		{packet.HdrAETH, packet.LayerTypeAETH}, {packet.HdrAtomicAckETH, packet.LayerTypeAtomicAckETH},
		{packet.HdrImmDt, packet.LayerTypeImmDt}, {packet.HdrIETH, packet.LayerTypeIETH},
	} {
		if info.Is(h.h) {
			want = append(want, h.lt)
		}
	}
	switch {
	case info.Is(packet.HdrDETH) && p.DETH.QKey == packet.GSIQKey && p.DETH.SrcQP == packet.GSIQPN:
		want = append(want, packet.LayerTypeMAD)
	case len(p.Payload) > 0:
		want = append(want, gopacket.LayerTypePayload)
	}
	var got []gopacket.LayerType
	var contents []byte
	for j, l := range ls[i:] {
		got = append(got, l.LayerType())
		contents = append(contents, l.LayerContents()...)
		next := gopacket.LayerTypeZero
		if i+j+1 < len(ls) {
			next = ls[i+j+1].LayerType()
		}
		if dl, ok := l.(gopacket.DecodingLayer); ok {
			require.Equal(t, next, dl.NextLayerType(), "%v next", l.LayerType())
			require.Equal(t, l.LayerType(), dl.CanDecode())
		}
	}
	require.Equal(t, want, got)
	bth := ls[i].(*packet.BTHLayer)
	tr := bth.Transport()
	require.Equal(t, tr[:len(tr)-packet.ICRCLen-len(bth.Pad)], contents)
}
