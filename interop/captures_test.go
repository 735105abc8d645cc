package interop

import (
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// TestCommittedCaptures checks the interop captures kept in
// testdata/pcaps/interop (made by TestInterop, see the README there): every
// RoCE frame parses, decodes and has a good ICRC, and both ends sent RoCE
// frames. For the softroce_* files one end is softroce (10.77.1.1 on its udp
// link, 10.77.1.10 on its tap link) and the other kernel rxe (10.77.1.2), so
// these are frames that the kernel accepted from softroce and the other way
// round. Runs everywhere; needs no root.
func TestCommittedCaptures(t *testing.T) {
	files, err := filepath.Glob("../testdata/pcaps/interop/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no captures in testdata/pcaps/interop")
	kernel := netip.MustParseAddr("10.77.1.2")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r, err := pcapio.Open(file)
			require.NoError(t, err)
			defer r.Close()
			senders := map[netip.Addr]int{}
			var f packet.Frame
			var p packet.Packet
			for {
				rec, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				err = rec.Frame(&f)
				if errors.Is(err, packet.ErrNotIP) || errors.Is(err, packet.ErrNotUDP) || errors.Is(err, packet.ErrNotRoCE) {
					continue // ARP, the TCP exchange
				}
				require.NoError(t, err)
				require.True(t, f.ICRCOK(), "ICRC of a frame from %v", f.Addressing().Src)
				require.NoError(t, p.Decode(f.Transport))
				senders[f.Addressing().Src.Unmap()]++
			}
			require.Len(t, senders, 2, "RoCE senders %v", senders)
			t.Logf("RoCE frames by sender: %v", senders)
			base := filepath.Base(file)
			switch {
			case strings.HasPrefix(base, "softroce_udp_"):
				assert.Positive(t, senders[kernel])
				assert.Positive(t, senders[netip.MustParseAddr("10.77.1.1")])
			case strings.HasPrefix(base, "softroce_tap_"):
				assert.Positive(t, senders[kernel])
				assert.Positive(t, senders[netip.MustParseAddr("10.77.1.10")])
			}
		})
	}
}
