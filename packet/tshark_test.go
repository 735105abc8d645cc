package packet_test

import (
	"encoding/hex"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// tsharkFields are the Wireshark InfiniBand fields compared (tshark 4.0
// names, from `tshark -G fields`). AtomicETH's VA and R_Key are shown with
// the RETH field names.
var tsharkFields = []string{
	"frame.number",
	"infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
	"infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
	"infiniband.bth.reserved7", "infiniband.bth.psn",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
	"infiniband.atomicacketh.origremdt",
	"infiniband.immdt", "infiniband.ieth",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.payload", "data.data", "infiniband.invariant.crc",
}

// tsharkNoHeuristics turns off the dissectors that try to claim an
// InfiniBand payload heuristically (`tshark -G heuristic-decodes`): random
// payloads can look like RPC-over-RDMA or a Mellanox EoIB header, which then
// hide payload bytes from the comparison.
var tsharkNoHeuristics = []string{
	"--disable-protocol", "rpcordma", "--disable-protocol", "infiniband.eoib",
	"--disable-protocol", "smc", "--disable-protocol", "smb_direct",
	"--disable-protocol", "nvme-rdma", "--disable-protocol", "lnet",
	"--disable-protocol", "iser", "--disable-protocol", "infiniband_sdp",
	"--disable-protocol", "fcoib",
}

// tsharkKnows reports whether tshark 4.0 dissects the opcode: it shows
// FLUSH, ATOMIC WRITE and CNP as unknown (reference §5).
func tsharkKnows(op packet.Opcode) bool {
	return op != packet.RCFlush && op != packet.RCAtomicWrite && op != packet.CNP
}

// TestTsharkOracle encodes packets of every opcode over IPv4 and IPv6, has
// tshark dissect them, and compares every field tshark shows with what was
// encoded.
func TestTsharkOracle(t *testing.T) {
	tshark := requireTool(t, "tshark", "tshark", "--version")
	rng := rand.New(rand.NewSource(4791))
	var frames [][]byte
	var pkts []packet.Packet
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		for _, op := range validOpcodes() {
			info := op.Info()
			sizes := []int{5, 64}
			switch {
			case info.FixedPayload != 0:
				sizes = []int{info.FixedPayload}
			case !info.Payload:
				sizes = []int{0}
			case op == packet.RCSendOnly || op == packet.UDSendOnly:
				sizes = append(sizes, 0)
			}
			for _, n := range sizes {
				p := randomPacket(rng, op, 0)
				p.BTH.TVer = 0
				p.BTH.FECN, p.BTH.BECN, p.BTH.Resv6 = false, false, 0
				// QP 0 and 1 make tshark parse the payload as a MAD.
				p.BTH.DestQP |= 0x100
				p.Payload = make([]byte, n)
				rng.Read(p.Payload)
				frames = append(frames, packet.AppendFrame(nil, &testEth, &a, &p))
				pkts = append(pkts, p)
			}
		}
		// Boundary values.
		for _, op := range []packet.Opcode{packet.RCWriteOnlyImm, packet.UDSendOnly, packet.RCAtomicAcknowledge} {
			p := randomPacket(rng, op, 0)
			p.BTH = packet.BTHFields{Opcode: op, SE: true, MigReq: true, PKey: 0xFFFF, DestQP: 0xFFFFFF, AckReq: true, Resv7: 0x7F, PSN: 0xFFFFFF}
			p.RETH = packet.RETHFields{VA: ^uint64(0), RKey: ^uint32(0), Length: ^uint32(0)}
			p.DETH = packet.DETHFields{QKey: ^uint32(0), SrcQP: 0xFFFFFF}
			p.AETH = packet.AETHFields{Syndrome: 0x7F, MSN: 0xFFFFFF}
			p.AtomicAck = ^uint64(0)
			p.Imm = ^uint32(0)
			if op.Info().Payload {
				p.Payload = []byte{0xFF, 0xFF, 0xFF}
			}
			frames = append(frames, packet.AppendFrame(nil, &testEth, &a, &p))
			pkts = append(pkts, p)
		}
	}
	name := writePcap(t, frames)
	args := append([]string{"-r", name}, tsharkNoHeuristics...)
	args = append(args, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f")
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	lines := runOracle(t, tshark, args...)
	require.Len(t, lines, len(frames))
	seen := map[packet.Opcode]bool{}
	for i, line := range lines {
		cols := strings.Split(line, "|")
		require.Len(t, cols, len(tsharkFields), "line %q", line)
		got := map[string]string{}
		for j, f := range tsharkFields {
			got[f] = cols[j]
		}
		require.Equal(t, strconv.Itoa(i+1), got["frame.number"])
		checkTsharkFrame(t, &pkts[i], got)
		seen[pkts[i].BTH.Opcode] = true
	}
	require.Len(t, seen, len(validOpcodes()), "every opcode was checked")
}

// checkTsharkFrame compares tshark's view of one frame with the packet.
func checkTsharkFrame(t *testing.T, p *packet.Packet, got map[string]string) {
	t.Helper()
	op := p.BTH.Opcode
	info := op.Info()
	msg := fmt.Sprintf("%s (%#02x)", op, uint8(op))
	num := func(field string) uint64 {
		s := got[field]
		require.NotEmpty(t, s, "%s: tshark shows no %s", msg, field)
		v, err := strconv.ParseUint(s, 0, 64)
		require.NoError(t, err, "%s: %s=%q", msg, field, s)
		return v
	}
	flag := func(field string) bool {
		switch got[field] {
		case "1", "True":
			return true
		case "0", "False":
			return false
		}
		require.Failf(t, "bad boolean", "%s: %s=%q", msg, field, got[field])
		return false
	}
	bytesOf := func(field string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(got[field], ":", ""))
		require.NoError(t, err, "%s: %s=%q", msg, field, got[field])
		return b
	}
	absent := func(field string) {
		require.Empty(t, got[field], "%s: tshark shows %s", msg, field)
	}

	b := &p.BTH
	require.Equal(t, uint64(op), num("infiniband.bth.opcode"), msg)
	require.Equal(t, b.SE, flag("infiniband.bth.se"), msg)
	require.Equal(t, b.MigReq, flag("infiniband.bth.m"), msg)
	require.Equal(t, uint64(p.Pad()), num("infiniband.bth.padcnt"), msg)
	require.Equal(t, uint64(b.TVer), num("infiniband.bth.tver"), msg)
	require.Equal(t, uint64(b.PKey), num("infiniband.bth.p_key"), msg)
	require.Equal(t, uint64(b.DestQP), num("infiniband.bth.destqp"), msg)
	require.Equal(t, b.AckReq, flag("infiniband.bth.a"), msg)
	require.Equal(t, uint64(b.Resv7), num("infiniband.bth.reserved7"), msg)
	require.Equal(t, uint64(b.PSN), num("infiniband.bth.psn"), msg)
	if !tsharkKnows(op) {
		// tshark stops after the BTH of an opcode it does not know.
		return
	}
	switch {
	case info.Is(packet.HdrRETH):
		require.Equal(t, p.RETH.VA, num("infiniband.reth.va"), msg)
		require.Equal(t, uint64(p.RETH.RKey), num("infiniband.reth.r_key"), msg)
		require.Equal(t, uint64(p.RETH.Length), num("infiniband.reth.dmalen"), msg)
	case info.Is(packet.HdrAtomicETH):
		require.Equal(t, p.AtomicETH.VA, num("infiniband.reth.va"), msg)
		require.Equal(t, uint64(p.AtomicETH.RKey), num("infiniband.reth.r_key"), msg)
		require.Equal(t, p.AtomicETH.SwapAdd, num("infiniband.atomiceth.swapdt"), msg)
		require.Equal(t, p.AtomicETH.Compare, num("infiniband.atomiceth.cmpdt"), msg)
	default:
		absent("infiniband.reth.va")
	}
	if info.Is(packet.HdrAETH) {
		require.Equal(t, uint64(p.AETH.Syndrome), num("infiniband.aeth.syndrome"), msg)
		require.Equal(t, uint64(p.AETH.MSN), num("infiniband.aeth.msn"), msg)
	} else {
		absent("infiniband.aeth.msn")
	}
	if info.Is(packet.HdrAtomicAckETH) {
		require.Equal(t, p.AtomicAck, num("infiniband.atomicacketh.origremdt"), msg)
	} else {
		absent("infiniband.atomicacketh.origremdt")
	}
	if info.Is(packet.HdrImmDt) {
		require.Equal(t, []byte{byte(p.Imm >> 24), byte(p.Imm >> 16), byte(p.Imm >> 8), byte(p.Imm)}, bytesOf("infiniband.immdt"), msg)
	} else {
		absent("infiniband.immdt")
	}
	if info.Is(packet.HdrIETH) {
		require.Equal(t, []byte{byte(p.IETH >> 24), byte(p.IETH >> 16), byte(p.IETH >> 8), byte(p.IETH)}, bytesOf("infiniband.ieth"), msg)
	} else {
		absent("infiniband.ieth")
	}
	if info.Is(packet.HdrDETH) {
		require.Equal(t, uint64(p.DETH.QKey), num("infiniband.deth.q_key"), msg)
		require.Equal(t, uint64(p.DETH.SrcQP), num("infiniband.deth.srcqp"), msg)
	} else {
		absent("infiniband.deth.q_key")
	}
	if len(p.Payload) > 0 {
		// tshark's payload includes the pad bytes. It is shown as
		// infiniband.payload or, for SENDs, handed to the data dissector.
		want := append(append([]byte(nil), p.Payload...), make([]byte, p.Pad())...)
		field := "infiniband.payload"
		if got[field] == "" {
			field = "data.data"
		}
		require.Equal(t, want, bytesOf(field), "%s: frame %s", msg, got["frame.number"])
	} else {
		absent("infiniband.payload")
		absent("data.data")
	}
	// tshark shows the ICRC read big-endian from the wire (it does not
	// verify it); ours is stored least significant byte first.
	require.NotEmpty(t, got["infiniband.invariant.crc"], msg)
}
