package packet_test

import (
	"encoding/hex"
	"math/rand"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// pythonForScapy is Debian's interpreter, which sees python3-scapy (a pyenv
// python3 on PATH may not).
const pythonForScapy = "/usr/bin/python3"

// TestScapyICRCOracle has scapy's RoCE layer (scapy.contrib.roce,
// BTH.compute_icrc) recompute the ICRC of IPv4 frames — every opcode with
// varied headers, IP fields and payload lengths, and the IPv4 frames of the
// rxe captures — and compares with ComputeICRC. The frames go to scapy with
// their ICRC zeroed, so its answer cannot echo ours. scapy 2.5 does not
// compute IPv6 ICRCs; the IPv6 rxe capture checks those (golden test).
func TestScapyICRCOracle(t *testing.T) {
	py := requireTool(t, pythonForScapy, "python3-scapy", "-c", "import scapy.contrib.roce")
	rng := rand.New(rand.NewSource(17))
	var frames [][]byte
	for _, op := range validOpcodes() {
		for i := 0; i < 3; i++ {
			a := testAddr4
			a.TrafficClass = uint8(rng.Uint32())
			a.HopLimit = uint8(rng.Uint32())
			a.IPID = uint16(rng.Uint32())
			a.DF = i != 1
			a.SrcPort = uint16(rng.Uint32())
			p := randomPacket(rng, op, 300)
			p.BTH.TVer = 0
			frames = append(frames, packet.AppendFrame(nil, &testEth, &a, &p))
		}
	}
	for _, name := range captureFiles(t) {
		n := 0
		for _, fr := range roceFrames(t, name) {
			var f packet.Frame
			require.NoError(t, packet.ParseFrame(fr, &f))
			if f.IsIPv4() && n < 20 {
				frames = append(frames, append([]byte(nil), fr...))
				n++
			}
		}
	}
	want := make([]uint32, len(frames))
	for i, fr := range frames {
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		want[i] = packet.ComputeICRC(f.IPUDP(), f.Transport[:len(f.Transport)-packet.ICRCLen])
		require.True(t, f.ICRCOK())
		copy(f.Transport[len(f.Transport)-packet.ICRCLen:], []byte{0, 0, 0, 0})
	}
	name := writePcap(t, frames)
	lines := runOracle(t, py, filepath.Join("testdata", "scapy_icrc.py"), name)
	require.Len(t, lines, len(frames))
	for i, line := range lines {
		cols := strings.Fields(line)
		require.Len(t, cols, 2, "line %q", line)
		require.Equal(t, strconv.Itoa(i+1), cols[0])
		require.NotEqual(t, "-", cols[1], "scapy did not see RoCE in frame %d", i+1)
		wire, err := hex.DecodeString(cols[1])
		require.NoError(t, err)
		require.Len(t, wire, 4)
		got := uint32(wire[0]) | uint32(wire[1])<<8 | uint32(wire[2])<<16 | uint32(wire[3])<<24
		require.Equal(t, want[i], got, "frame %d (%s): scapy's ICRC differs", i+1, packet.BTH(frames[i][packet.EthernetLen+packet.IPv4Len+packet.UDPLen:]).Opcode())
	}
}
