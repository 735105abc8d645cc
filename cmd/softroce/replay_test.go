package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/replay"

	"github.com/softroce/softroce/internal/testenv"
)

func TestReplayCmdPerPacket(t *testing.T) {
	code, out, errOut := runCmd(t, "replay", filepath.Join(rxeDir, "rc_pingpong.pcap"))
	require.Equal(t, 0, code, errOut+out)
	ls := lines(out)
	assert.Equal(t, "flow 1: RC 10.77.0.3 qp 0x12 <-> 10.77.0.2 qp 0x11, 50 frames: softroce as 10.77.0.2 qp 0x11", ls[0],
		"the default host is the responder of the first RC flow")
	assert.Equal(t, "  out-of-band #17 10.77.0.3: lid 0x0000 qpn 0x000012 psn 0x54b838 gid 10.77.0.3: agrees", ls[1])
	ok := 0
	for _, l := range ls {
		if strings.HasPrefix(l, "  ok #") {
			ok++
			assert.Contains(t, l, " 10.77.0.2 -> 10.77.0.3 ")
		}
	}
	assert.Equal(t, 25, ok, "one line per packet the host sent")
	assert.Contains(t, out, `  ok #29 10.77.0.2 -> 10.77.0.3 RC_ACKNOWLEDGE qpn=0x000012 psn=5552187 syndrome="ACK credits=31" msn=1 len=0`)
	assert.Contains(t, out, "  25 packets matched, 25 frames fed\n")
	assert.Equal(t, rxeDir+"/rc_pingpong.pcap: 1 replays, softroce matches the capture", ls[len(ls)-1])
}

func TestReplayCmdCaptures(t *testing.T) {
	tests := []struct {
		file    string
		replays int
		extra   []string
	}{
		{"rc_pingpong.pcap", 2, nil},
		{"rc_pingpong_ipv6.pcap", 2, nil},
		{"uc_pingpong.pcap", 2, nil},
		{"write.pcap", 4, nil},
		{"read.pcap", 4, nil},
		{"atomic.pcap", 4, nil},
		{"send.pcap", 6, nil},
		{"veth_local_write.pcap", 2, nil},
		{"ud_pingpong.pcap", 2, nil},
		{"udaddy.pcap", 2, nil},
		{"send_rdmacm.pcap", 4, nil},
		{"hosttap_respond.pcap", 2, []string{"softroce as 10.77.1.10 qp 0x123\n  6 packets matched, 6 frames fed\n"}},
		{"rping.pcap", 2, []string{"102 bytes changed by the host's application between reads"}},
		{"loss.pcap", 2, []string{
			"  skipped: the flow has loss, so the requester's messages cannot be rebuilt; replay its responder",
			"  the flow has loss: replaying the responder only\n  26 packets matched, 1028 frames fed, 1 responses not in the capture\n",
			"  1406 packets matched, 95 frames fed, 43 responses not in the capture\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join(rxeDir, tt.file)
			code, out, errOut := runCmd(t, "replay", "-q", "--strict", "--as", "both", path)
			require.Equal(t, 0, code, errOut+out)
			assert.True(t, strings.HasSuffix(out, path+": "+itoa(tt.replays)+" replays, softroce matches the capture\n"), out)
			assert.NotContains(t, out, "  ok #", "-q prints no packet lines")
			for _, e := range tt.extra {
				assert.Contains(t, out, e)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestReplayCmdLossVerbose: without -q the responses softroce sent that the
// capture lacks are listed.
func TestReplayCmdLossVerbose(t *testing.T) {
	code, out, errOut := runCmd(t, "replay", "--as", "B", filepath.Join(rxeDir, "loss.pcap"))
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `  not captured (lost before the capture point), before frame 741: 10.77.0.2 -> 10.77.0.3 RC_ACKNOWLEDGE qpn=0x000011 psn=10236962 syndrome="ACK credits=31" msn=9 len=0`)
	assert.Equal(t, 44, strings.Count(out, "  not captured (lost before the capture point)"))
	assert.Equal(t, 26+1406, strings.Count(out, "  ok #"))
}

// alterCapture copies an rxe capture with fn applied to one frame's
// transport bytes, recomputing its ICRC.
func alterCapture(t *testing.T, name string, frame int, fn func(tr []byte)) string {
	t.Helper()
	r, err := pcapio.Open(filepath.Join(rxeDir, name))
	require.NoError(t, err)
	defer r.Close()
	path := filepath.Join(t.TempDir(), "altered.pcapng")
	w, err := pcapio.Create(path)
	require.NoError(t, err)
	for no := 1; ; no++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data := append([]byte(nil), rec.Data...)
		if no == frame {
			var f packet.Frame
			require.NoError(t, packet.ParseFrame(data, &f))
			fn(f.Transport)
			packet.SetICRC(f.IPUDP(), f.Transport)
		}
		require.NoError(t, w.WritePacket(rec.Time, data, ""))
	}
	require.NoError(t, w.Close())
	return path
}

func TestReplayCmdDifference(t *testing.T) {
	// Frame 39 is the ACK with MSN 2 that 10.77.0.2 sent; make it say 3.
	path := alterCapture(t, "rc_pingpong.pcap", 39, func(tr []byte) { tr[packet.BTHLen+3]++ })
	want := `  DIFFERENCE: frame 39: softroce differs from the capture
    captured: #39 10.77.0.2 -> 10.77.0.3 RC_ACKNOWLEDGE qpn=0x000012 psn=5552191 syndrome="ACK credits=31" msn=3 len=0
    softroce: 10.77.0.2 -> 10.77.0.3 RC_ACKNOWLEDGE qpn=0x000012 psn=5552191 syndrome="ACK credits=31" msn=2 len=0
    - MSN: captured 3, softroce 2
`
	for _, args := range [][]string{{"replay", path}, {"replay", "-q", path}, {"replay", "--strict", "--as", "both", path}} {
		code, out, errOut := runCmd(t, args...)
		assert.Equal(t, 1, code, "%v: %s", args, errOut)
		assert.Contains(t, out, want, "%v", args)
		assert.Contains(t, out, ": 1 of ", "%v", args)
	}
	// The other side still matches.
	code, out, _ := runCmd(t, "replay", "-q", "--as", "A", path)
	assert.Equal(t, 0, code, out)
}

func TestReplayCmdUsage(t *testing.T) {
	rc := filepath.Join(rxeDir, "rc_pingpong.pcap")
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"replay", "--as", "10.1.2.3", rc}, exitTrouble, "not a host of the capture"},
		{[]string{"replay", "--as", "C", rc}, exitTrouble, "want A, B or an IP address"},
		{[]string{"replay", filepath.Join(rxeDir, "no-such.pcap")}, exitTrouble, "no-such.pcap"},
		// Only one side of hosttap_sniff ever sent: the other's QPN is unknown.
		{[]string{"replay", filepath.Join(rxeDir, "hosttap_sniff.pcap")}, exitTrouble, "no RC, UC or UD QP pair"},
		{[]string{"replay", "--to", "nonsense", "--addr", "127.0.99.1", rc}, exitTrouble, "--to"},
		{[]string{"replay", "--to", "::1", "--addr", "127.0.99.1", rc}, exitTrouble, "not of one IP family"},
		{[]string{"replay", "--to", "127.0.99.2", rc}, exitTrouble, "--addr is required"},
		{[]string{"replay", "--to", "127.0.99.2", "--addr", "127.0.99.1", "--link", "mem", rc}, exitTrouble, "needs udp or tap"},
		{[]string{"replay"}, exitTrouble, "requires at least 1 arg"},
		{[]string{"replay", "--to", "127.0.99.2", rc, rc}, exitTrouble, "--to sends one capture"},
		{[]string{"replay", "--flow", "2", rc}, exitTrouble, "--flow 2: the capture has 1 QP pairs"},
	} {
		code, _, errOut := runCmd(t, tt.args...)
		assert.Equal(t, tt.code, code, "%v", tt.args)
		assert.Contains(t, errOut, tt.msg, "%v", tt.args)
	}
	code, out, _ := runCmd(t, "replay", "-q", "--as", "a", rc)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "softroce as 10.77.0.3 qp 0x12")
	code, out, _ = runCmd(t, "replay", "-q", "--as", "both", "--flow", "2", filepath.Join(rxeDir, "write.pcap"))
	assert.Equal(t, 0, code)
	assert.Equal(t, 2, strings.Count(out, "flow 2: "), out)
	assert.NotContains(t, out, "flow 1: ")
}

// TestReplayCmdSend sends one side of captures to a plain UDP socket
// standing in for a live peer, and checks that every frame arrives, in
// order, with the transport packet of the capture and an ICRC that is right
// for the new addresses.
func TestReplayCmdSend(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.99.2:4791")
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(peer))
	require.NoError(t, err)
	defer conn.Close()
	for _, tt := range []struct {
		file, side string
		fast       bool
	}{
		{"write.pcap", "A", true},
		{"read.pcap", "10.77.0.2", true},
		{"rc_pingpong_ipv6.pcap", "B", true}, // IPv6 frames sent over IPv4
		{"rc_pingpong.pcap", "A", false},     // at the captured pace
	} {
		t.Run(tt.file, func(t *testing.T) {
			c, err := replay.Load(filepath.Join(rxeDir, tt.file))
			require.NoError(t, err)
			a, b := c.Flows()[0].A.Addr, c.Flows()[0].B.Addr
			side := map[string]netip.Addr{"A": a, "B": b}[tt.side]
			if !side.IsValid() {
				side = netip.MustParseAddr(tt.side)
			}
			var want []*replay.Frame
			for _, f := range c.Frames {
				if f.Src == side {
					want = append(want, f)
				}
			}
			require.NotEmpty(t, want)
			args := []string{"replay", "--to", "127.0.99.2", "--link", "udp", "--addr", "127.0.99.1:4792", "--side", tt.side, "-q"}
			if tt.fast {
				args = append(args, "--fast")
			}
			done := make(chan []string, 1)
			go func() {
				_, out, errOut := runCmd(t, append(args, filepath.Join(rxeDir, tt.file))...)
				done <- []string{out, errOut}
			}()
			buf := make([]byte, 9000)
			for i, w := range want {
				require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
				n, from, err := conn.ReadFromUDPAddrPort(buf)
				if err != nil {
					res := <-done
					require.NoError(t, err, "datagram %d of %d; softroce said %q %q", i+1, len(want), res[0], res[1])
				}
				assert.Equal(t, netip.MustParseAddrPort("127.0.99.1:4792"), from)
				// Rebuild what the kernel put around the datagram; the
				// IPv4 ID is unknown to a socket.
				a := packet.Addressing{Src: from.Addr(), Dst: peer.Addr(), SrcPort: from.Port(), DstPort: peer.Port(), HopLimit: 64, DF: true}
				pkt := a.AppendIPUDP(nil, n)
				pkt = append(pkt, buf[:n]...)
				var f packet.Frame
				require.NoError(t, packet.ParseIP(pkt, &f))
				assert.True(t, packet.CheckICRCUnknownIPID(&f), "frame %d: ICRC", w.No)
				var orig packet.Frame
				require.NoError(t, packet.ParseFrame(w.Data, &orig))
				require.Equal(t, len(orig.Transport), n, "frame %d", w.No)
				assert.Equal(t, orig.Transport[:n-packet.ICRCLen], buf[:n-packet.ICRCLen], "frame %d: transport", w.No)
			}
			res := <-done
			assert.Contains(t, res[0], "sent "+itoa(len(want))+" frames\n", res[1])
			assert.Empty(t, res[1])
		})
	}
}

// TestReplayCmdSendTAP sends one side of a capture over a TAP link to the
// host's own kernel, which owns the peer address on the same interface,
// answers ARP for it and hands the datagrams to a plain UDP socket. It
// needs root and /dev/net/tun.
func TestReplayCmdSendTAP(t *testing.T) {
	testenv.Root(t)
	testenv.TUN(t)
	const dev = "srrplay0"
	ip := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	exec.Command("ip", "link", "del", dev).Run()
	ip("tuntap", "add", "dev", dev, "mode", "tap")
	t.Cleanup(func() { exec.Command("ip", "link", "del", dev).Run() })
	ip("addr", "add", "10.99.7.2/24", "dev", dev)
	ip("link", "set", dev, "up")
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 99, 7, 2), Port: 4791})
	require.NoError(t, err)
	defer conn.Close()

	c, err := replay.Load(filepath.Join(rxeDir, "write.pcap"))
	require.NoError(t, err)
	var want []*replay.Frame
	for _, f := range c.Frames {
		if f.Src == c.Flows()[0].A.Addr {
			want = append(want, f)
		}
	}
	done := make(chan []string, 1)
	go func() {
		_, out, errOut := runCmd(t, "replay", "--to", "10.99.7.2", "--link", "tap", "--tap", dev, "--addr", "10.99.7.1",
			"--fast", "-q", filepath.Join(rxeDir, "write.pcap"))
		done <- []string{out, errOut}
	}()
	buf := make([]byte, 9000)
	for i, w := range want {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			res := <-done
			require.NoError(t, err, "datagram %d of %d; softroce said %q %q", i+1, len(want), res[0], res[1])
		}
		assert.Equal(t, w.SrcPort, from.Port(), "frame %d: the captured source port, which a TAP link can send", w.No)
		a := packet.Addressing{Src: from.Addr(), Dst: netip.MustParseAddr("10.99.7.2"), SrcPort: from.Port(), DstPort: 4791, HopLimit: 64, DF: true}
		pkt := append(a.AppendIPUDP(nil, n), buf[:n]...)
		var f packet.Frame
		require.NoError(t, packet.ParseIP(pkt, &f))
		assert.True(t, packet.CheckICRCUnknownIPID(&f), "frame %d: ICRC", w.No)
		var orig packet.Frame
		require.NoError(t, packet.ParseFrame(w.Data, &orig))
		assert.Equal(t, orig.Transport[:len(orig.Transport)-packet.ICRCLen], buf[:n-packet.ICRCLen], "frame %d: transport", w.No)
	}
	res := <-done
	assert.Contains(t, res[0], "sent "+itoa(len(want))+" frames\n", res[1])
	assert.Empty(t, res[1])
}

// TestReplayConformance: replay over directories checks every flow of
// every capture from both sides (the responder only where there is loss)
// and prints one verdict per line; the shipped captures all match, and a
// capture softroce answers differently fails the run with exit status 1.
func TestReplayConformance(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"replay", "../../testdata/pcaps/rxe", "../../testdata/pcaps/interop", "../../testdata/pcaps/softroce"}, &out, &out)
	require.Equal(t, 0, code, out.String())
	require.Regexp(t, `(?m)^\d+ captures: \d+ replays matched, 0 differ, \d+ not replayable$`, out.String())
	require.Contains(t, out.String(), "softroce_udp_client_perf_atomic.pcap flow 1 (RC 10.77.1.1 qp 0x11 <-> 10.77.1.2 qp 0x20) as 10.77.1.1: matched, 20 packets")
	require.Contains(t, out.String(), "loss.pcap flow 1")
	require.Contains(t, out.String(), "not replayable: the flow has loss, so only its responder can be")

	// A capture whose host answered otherwise than softroce would (an
	// ACK's MSN one higher, ICRC fixed): the run fails, naming the frame.
	dir := t.TempDir()
	r, err := pcapio.Open("../../testdata/pcaps/rxe/rc_pingpong.pcap")
	require.NoError(t, err)
	defer r.Close()
	w, err := pcapio.Create(filepath.Join(dir, "altered.pcap"))
	require.NoError(t, err)
	for no := 1; ; no++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data := bytes.Clone(rec.Data)
		var f packet.Frame
		if no == 39 && packet.ParseFrame(data, &f) == nil {
			f.Transport[packet.BTHLen+3]++ // the AETH's MSN
			packet.SetICRC(f.IPUDP(), f.Transport)
		}
		require.NoError(t, w.WritePacket(rec.Time, data, ""))
	}
	require.NoError(t, w.Close())
	out.Reset()
	code = run([]string{"replay", dir, "../../testdata/pcaps/interop/softroce_udp_client_pingpong_rc.pcap"}, &out, &out)
	require.Equal(t, exitFailed, code, out.String())
	require.Contains(t, out.String(), "altered.pcap flow 1 (RC 10.77.0.3 qp 0x12 <-> 10.77.0.2 qp 0x11) as 10.77.0.2: differs: at frame 39: MSN: captured 3, softroce 2")
	require.Contains(t, out.String(), "2 captures: 3 replays matched, 1 differ")
}
