package packet_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/require"
)

// Helpers for the tests that check our encoding against independent oracles
// (tshark, scapy). An oracle that is not installed skips its test, except
// under CI=true, where it fails: CI must run the oracles.

// requireTool returns the path of an oracle or skips (fails under CI).
func requireTool(t *testing.T, path, what string, check ...string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err == nil && len(check) > 0 {
		err = exec.Command(p, check...).Run()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (%v); CI must run this oracle", what, err)
		}
		t.Skipf("%s not installed: %v", what, err)
	}
	return p
}

// writePcap writes Ethernet frames to a pcap file in a temporary directory.
func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "frames.pcap")
	fh, err := os.Create(name)
	require.NoError(t, err)
	w := pcapgo.NewWriter(fh)
	require.NoError(t, w.WriteFileHeader(65535, layers.LinkTypeEthernet))
	ts := time.Unix(1700000000, 0)
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
		require.NoError(t, w.WritePacket(ci, fr))
	}
	require.NoError(t, fh.Close())
	return name
}

// runOracle runs a command and returns its standard output lines.
func runOracle(t *testing.T, name string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v: %s", name, args, stderr.String())
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}
