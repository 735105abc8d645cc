package packet_test

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// FuzzCM decodes arbitrary bytes as a MAD and as every CM message: nothing
// panics, and a decoded message re-encodes to bytes that decode to the same
// message (reserved bits are the only thing lost).
func FuzzCM(f *testing.F) {
	for _, name := range []string{"rping.pcap", "send_rdmacm.pcap", "udaddy.pcap"} {
		for _, c := range captureCMMADs(f, name) {
			f.Add([]byte(c.mad))
		}
	}
	f.Add(make([]byte, packet.MADLen))
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := packet.ParseCMMAD(b); err == nil {
			require.Len(t, m, packet.MADLen)
			msg, err := packet.DecodeCM(m)
			if err == nil {
				require.Equal(t, m.AttrID(), msg.Attr())
			}
		}
		if len(b) < packet.MADHeaderLen {
			return
		}
		data := b[packet.MADHeaderLen:]
		for _, a := range cmCodecAttrs {
			first, _ := packet.NewCMMessage(a)
			if err := first.Decode(data); err != nil {
				require.ErrorIs(t, err, packet.ErrCMShort)
				continue
			}
			out := make([]byte, packet.CMDataLen)
			require.NoError(t, first.Encode(out), "%v", a)
			second, _ := packet.NewCMMessage(a)
			require.NoError(t, second.Decode(out))
			require.Equal(t, first, second, "%v", a)
			again := make([]byte, packet.CMDataLen)
			require.NoError(t, second.Encode(again))
			require.Equal(t, out, again, "%v", a)
		}
		var h packet.CMAHeader
		if h.Decode(data) == nil {
			out := make([]byte, packet.CMAHeaderLen)
			require.NoError(t, h.Encode(out))
			var back packet.CMAHeader
			require.NoError(t, back.Decode(out))
			require.Equal(t, h, back)
		}
	})
}
