package packet_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// TestGoldenRxeCaptures decodes every RoCE frame of the kernel rxe captures,
// verifies its ICRC and checks that re-encoding gives identical bytes.
func TestGoldenRxeCaptures(t *testing.T) {
	files, err := filepath.Glob("../testdata/pcaps/rxe/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			fh, err := os.Open(name)
			require.NoError(t, err)
			defer fh.Close()
			r, err := pcapgo.NewReader(fh)
			require.NoError(t, err)
			roce := 0
			for {
				data, _, err := r.ReadPacketData()
				if err != nil {
					break
				}
				var f packet.Frame
				if packet.ParseFrame(data, &f) != nil {
					continue
				}
				roce++
				require.True(t, f.ICRCOK(), "frame %d ICRC", roce)
				var p packet.Packet
				require.NoError(t, p.Decode(f.Transport), "frame %d", roce)
				a := f.Addressing()
				out := packet.AppendIPPacket(nil, &a, &p)
				require.True(t, bytes.Equal(out[a.HeaderLen():], f.Transport), "frame %d re-encode transport", roce)
				ip := append([]byte(nil), f.IPUDP()...)
				// our UDP checksum is 0 as rxe's; the IP checksum is recomputed
				require.Equal(t, ip, out[:a.HeaderLen()], "frame %d re-encode ip/udp", roce)
			}
			require.NotZero(t, roce)
		})
	}
}
