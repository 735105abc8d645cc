package packet_test

import (
	"errors"
	"io"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// captureDir holds the kernel rxe captures.
const captureDir = "../testdata/pcaps/rxe"

// captureFiles returns the paths of every capture.
func captureFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(captureDir, "*.pcap"))
	require.NoError(tb, err)
	require.NotEmpty(tb, files)
	return files
}

// readFrames returns every frame of a capture.
func readFrames(tb testing.TB, name string) [][]byte {
	tb.Helper()
	fh, err := os.Open(name)
	require.NoError(tb, err)
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	require.NoError(tb, err)
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(tb, err)
		out = append(out, data)
	}
}

// roceFrames returns the frames of a capture that ParseFrame accepts.
func roceFrames(tb testing.TB, name string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, fr := range readFrames(tb, name) {
		var f packet.Frame
		if packet.ParseFrame(fr, &f) == nil {
			out = append(out, fr)
		}
	}
	return out
}

// validOpcodes lists every opcode softroce knows.
func validOpcodes() []packet.Opcode {
	var out []packet.Opcode
	for i := 0; i < 256; i++ {
		if packet.Opcode(i).Valid() {
			out = append(out, packet.Opcode(i))
		}
	}
	return out
}

// randomPacket returns a packet of opcode op with random header fields and a
// payload of a length the opcode allows (at most maxPay bytes).
func randomPacket(rng *rand.Rand, op packet.Opcode, maxPay int) packet.Packet {
	info := op.Info()
	p := packet.Packet{
		BTH: packet.BTHFields{
			Opcode: op, SE: rng.Intn(2) == 1, MigReq: rng.Intn(2) == 1,
			PKey: uint16(rng.Uint32()), FECN: rng.Intn(2) == 1, BECN: rng.Intn(2) == 1,
			Resv6: uint8(rng.Intn(64)), DestQP: rng.Uint32() & 0xFFFFFF,
			AckReq: rng.Intn(2) == 1, Resv7: uint8(rng.Intn(128)), PSN: rng.Uint32() & 0xFFFFFF,
		},
		Payload: []byte{},
	}
	if info.Is(packet.HdrRETH) {
		p.RETH = packet.RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), Length: rng.Uint32()}
	}
	if info.Is(packet.HdrAETH) {
		p.AETH = packet.AETHFields{Syndrome: packet.Syndrome(rng.Intn(256)), MSN: rng.Uint32() & 0xFFFFFF}
	}
	if info.Is(packet.HdrAtomicETH) {
		p.AtomicETH = packet.AtomicETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
	}
	if info.Is(packet.HdrAtomicAckETH) {
		p.AtomicAck = rng.Uint64()
	}
	if info.Is(packet.HdrImmDt) {
		p.Imm = rng.Uint32()
	}
	if info.Is(packet.HdrIETH) {
		p.IETH = rng.Uint32()
	}
	if info.Is(packet.HdrDETH) {
		p.DETH = packet.DETHFields{QKey: rng.Uint32(), Resv: uint8(rng.Intn(256)), SrcQP: rng.Uint32() & 0xFFFFFF}
	}
	if info.Is(packet.HdrFETH) {
		p.FETH = packet.FETHFields{Resv: rng.Uint32() >> 6, Selectivity: uint8(rng.Intn(4)), Placement: uint8(rng.Intn(16))}
	}
	n := 0
	switch {
	case info.FixedPayload != 0:
		n = info.FixedPayload
	case info.Payload:
		n = rng.Intn(maxPay + 1)
	}
	p.Payload = make([]byte, n)
	rng.Read(p.Payload)
	p.BTH.PadCnt = uint8(p.Pad())
	return p
}

// Addressing for tests: rxe-like IPv4 (DF, checksum 0) and IPv6.
var (
	testEth = packet.Ethernet{
		Dst: [6]byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x02},
		Src: [6]byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x01},
	}
	testAddr4 = packet.Addressing{
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		SrcPort: 0xC123, TrafficClass: 0x02, HopLimit: 64, IPID: 0x1234, DF: true,
	}
	testAddr6 = packet.Addressing{
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
		SrcPort: 0xC456, TrafficClass: 0xA5, HopLimit: 1, FlowLabel: 0x12345,
	}
)
