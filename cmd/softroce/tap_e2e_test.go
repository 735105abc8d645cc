//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"

	"github.com/softroce/softroce/internal/testenv"
)

// TestTAPEveryOperation joins two devices on two TAP interfaces through a
// Linux bridge — ARP, the kernel's bridge and real Ethernet frames in between —
// and runs every operation of the demo across them: RC SEND/RECV, WRITE with
// immediate, READ, compare-and-swap, fetch-and-add and a UD send. It needs
// root and /dev/net/tun (CI runs as root); elsewhere it skips.
func TestTAPEveryOperation(t *testing.T) {
	testenv.Root(t)
	testenv.TUN(t)
	testenv.Tools(t, "apt-get install iproute2", "ip")
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	id := os.Getpid() % 100000
	br := fmt.Sprintf("srtebr%d", id)
	ip("link", "add", br, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })

	pcap := t.TempDir() + "/tap.pcapng"
	var devs []*verbsapi.Context
	open := func(name, tap, addr, capture string) func() error {
		lf := linkFlags{Link: "tap", Tap: tap, Addr: addr, Pcap: capture}
		t.Cleanup(func() { exec.Command("ip", "link", "del", tap).Run() })
		ctx, closeDev, err := openDevice(lf, name)
		require.NoError(t, err)
		ip("link", "set", tap, "master", br)
		devs = append(devs, ctx)
		return closeDev
	}
	closeA := open("rxe0", fmt.Sprintf("srtea%d", id), "10.92.0.1", pcap)
	closeB := open("rxe1", fmt.Sprintf("srteb%d", id), "10.92.0.2", "")
	ip("link", "set", br, "up")

	res, err := runDemoOps(devs[0], devs[1], demoOptions{size: 65536, seed: 1})
	require.NoError(t, err)
	require.Len(t, res, 6)
	for _, r := range res {
		require.NoError(t, r.err, "%s", r.name)
	}
	require.NoError(t, closeA())
	require.NoError(t, closeB())

	// The capture of rxe0's side decodes with every ICRC good.
	counts, err := checkCapture(pcap)
	require.NoError(t, err)
	require.NotZero(t, counts.roce)
	require.Zero(t, counts.bad)
}
