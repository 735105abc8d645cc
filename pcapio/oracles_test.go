package pcapio_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTsharkReadsComments checks our pcapng against Wireshark's reader:
// every packet decodes as InfiniBand and the comments come through.
func TestTsharkReadsComments(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tshark not installed (CI=true)")
		}
		t.Skip("tshark not installed")
	}
	pkts := samplePackets(t)
	path := filepath.Join(t.TempDir(), "c.pcapng")
	f, err := os.Create(path)
	require.NoError(t, err)
	bw := bufio.NewWriter(f)
	writeAll(t, bw, pkts)
	require.NoError(t, bw.Flush())
	require.NoError(t, f.Close())

	// frame.comment is the Wireshark 3.6+ name (pkt_comment before).
	out, err := exec.Command(tshark, "-n", "--disable-protocol", "rpcordma", "-r", path, "-T", "fields", "-E", "separator=|",
		"-e", "frame.number", "-e", "infiniband.bth.psn", "-e", "frame.comment").Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s%s", out, stderr)
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	require.Len(t, lines, len(pkts), "%s", out)
	for i, p := range pkts {
		fields := strings.SplitN(lines[i], "|", 3)
		require.Len(t, fields, 3, "line %q", lines[i])
		assert.Equal(t, strconv.Itoa(i+1), fields[0])
		assert.Equal(t, strconv.Itoa(i+1), fields[1], "PSN as tshark decodes it")
		// tshark prints a newline inside a comment as the two characters \n.
		assert.Equal(t, strings.ReplaceAll(p.comment, "\n", `\n`), fields[2], "comment of packet %d", i+1)
	}
}

// scapyICRC is run by /usr/bin/python3: it reads a capture with scapy's
// pcapng reader and prints, per packet, the stored ICRC and the one scapy's
// RoCE layer computes (it supports IPv4 only).
const scapyICRC = `
import sys
import scapy.layers.l2  # Ether, so that rdpcap dissects the frames
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.utils import rdpcap
for p in rdpcap(sys.argv[1]):
    q = p.copy()
    q[BTH].icrc = None
    print(raw(p)[-4:].hex(), raw(q)[-4:].hex())
`

// TestScapyICRC checks the frames we write against scapy, an independent
// ICRC implementation, read back through scapy's own pcapng reader.
func TestScapyICRC(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import scapy.contrib.roce").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("scapy not usable (CI=true): %v", err)
		}
		t.Skip("scapy not installed")
	}
	eth := packet.Ethernet{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}}
	a := packet.Addressing{Src: netip.MustParseAddr("192.168.7.1"), Dst: netip.MustParseAddr("192.168.7.2"),
		SrcPort: 50000, HopLimit: 64, DF: true}
	// The second set of addressing fields and BTH flags are ones the ICRC
	// masks: the CRC must not change with them.
	b := a
	b.TrafficClass, b.HopLimit = 0x62, 3
	pkts := []struct {
		a *packet.Addressing
		p packet.Packet
	}{
		{&a, packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: 1, AckReq: true},
			Payload: []byte("softroce pcapio scapy oracle")}},
		{&b, packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: 1, AckReq: true,
			FECN: true, BECN: true}, Payload: []byte("softroce pcapio scapy oracle")}},
		{&a, packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCWriteOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: 0xFFFFFF},
			RETH: packet.RETHFields{VA: 0x7f00_0000_1000, RKey: 0x22f, Length: 3}, Payload: []byte{1, 2, 3}}},
		{&a, packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCAcknowledge, PKey: 0xFFFF, DestQP: 0x13, PSN: 77},
			AETH: packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited, MSN: 5}}},
		{&a, packet.Packet{BTH: packet.BTHFields{Opcode: packet.UDSendOnly, PKey: 0xFFFF, DestQP: 1},
			DETH: packet.DETHFields{QKey: 0x80010000, SrcQP: 1}, Payload: make([]byte, 256)}},
	}
	path := filepath.Join(t.TempDir(), "scapy.pcapng")
	w, err := pcapio.Create(path)
	require.NoError(t, err)
	var ours []string
	for i := range pkts {
		frame := packet.AppendFrame(nil, &eth, pkts[i].a, &pkts[i].p)
		ours = append(ours, fmt.Sprintf("%x", frame[len(frame)-packet.ICRCLen:]))
		require.NoError(t, w.WritePacket(t0.Add(time.Duration(i)*time.Microsecond), frame, "scapy"))
	}
	require.NoError(t, w.Close())
	cmd := exec.Command("/usr/bin/python3", "-c", scapyICRC, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, got, len(pkts), "%s%s", out, stderr.String())
	for i, line := range got {
		f := strings.Fields(line)
		require.Len(t, f, 2, line)
		assert.Equal(t, ours[i], f[0], "packet %d: stored ICRC", i)
		assert.Equal(t, f[1], f[0], "packet %d: scapy computes a different ICRC", i)
	}
	assert.Equal(t, ours[0], ours[1], "masked fields changed the ICRC")
}
