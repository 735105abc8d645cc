package dropin

// tools_rsocket_hostile_test.go: the drop-in librdmacm's rsockets against
// a peer that breaks the protocol (a Go rsocket told to, on a device of
// its own): the C program's connection fails with a clear error and the
// daemon serves the next one.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbsapi"
	"github.com/softroce/softroce/workload/rstream"
)

// goPeer is a daemon on a udp link at daemonAddr, for C programs, and a
// device of the test's own at goAddr (capturing to pcap, if given), for a
// Go rsocket that meets them.
type goPeer struct {
	lib, sock string
	dev       *verbsapi.Device
	vc        *verbsapi.Context
	log       testenv.LockedBuffer // the daemon's
}

func newGoPeer(t *testing.T, daemonAddr, goAddr, pcap string) *goPeer {
	t.Helper()
	testenv.Tools(t, "apt-get install rdmacm-utils", "rstream")
	p := &goPeer{lib: buildLibs(t), sock: filepath.Join(t.TempDir(), "d.sock")}
	d, err := startDaemonLog(linkFlags{Link: "udp", Addr: daemonAddr}, "rxe0", p.sock, func(f string, a ...any) {
		fmt.Fprintf(&p.log, f+"\n", a...)
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	p.dev, err = verbsapi.NewDevice("rxe9", verbsapi.LinkConfig{Kind: verbsapi.LinkUDP,
		Addr: netip.AddrPortFrom(netip.MustParseAddr(goAddr), 0), Pcap: pcap})
	require.NoError(t, err)
	t.Cleanup(func() { p.dev.Close() })
	p.vc, err = p.dev.Open()
	require.NoError(t, err)
	return p
}

func TestRsocketHostilePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	p := newGoPeer(t, "127.0.77.12", "127.0.77.13", "")
	lib, sock, vc := p.lib, p.sock, p.vc
	to := netip.MustParseAddrPort("127.0.77.12:7471")

	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	// dial reaches the C server srv once it listens.
	dial := func(t *testing.T, srv *toolRun) *rsocket.Conn {
		for try := 0; ; try++ {
			c, err := rsocket.Dial(ctx, vc, to, nil)
			if err == nil {
				return c
			}
			if try >= 50 || ctx.Err() != nil {
				state := "rstream still runs"
				select {
				case <-srv.done:
					state = fmt.Sprintf("rstream exited (%v):\n%s", srv.err, srv.out.String())
				default:
				}
				t.Fatalf("dial, try %d: %v\n%s\ndaemon log:\n%s", try, err, state, p.log.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	for _, tc := range []struct {
		name    string
		imm     uint32
		withImm bool
	}{
		{"data beyond the buffer", 1 << 28, true}, // RS_OP_DATA, 256 MiB
		{"unknown message type", 1<<29 | 5, true}, // op 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := startTool(ctx, lib, sock, "rstream", "-T", "b", "-S", "1000", "-C", "10")
			require.NoError(t, err)
			c := dial(t, srv)
			addr, rkey, _ := c.PeerDataBuffer()
			require.NoError(t, c.InjectForTest(tc.imm, tc.withImm, []byte("forged!!"), addr, rkey))
			select {
			case <-srv.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("rstream did not notice:\n%s", srv.out.String())
			}
			c.Close()
			require.Error(t, srv.err, "rstream should fail:\n%s", srv.out.String())
			require.Regexp(t, "rrecv|rsend|verif", srv.out.String())
		})
	}

	// The daemon serves the next, honest, connection.
	srv, err := startTool(ctx, lib, sock, "rstream", "-T", "b", "-T", "v", "-S", "1000", "-C", "10")
	require.NoError(t, err)
	for try := 0; ; try++ { // until the server listens
		err := rstream.Client(ctx, vc, testWriter{t}, to, rstream.Options{Size: 1000, Count: 10, Verify: true})
		if err == nil {
			break
		}
		require.True(t, errors.Is(err, verbsapi.ErrRejected) && try < 50, "%v", err)
		time.Sleep(100 * time.Millisecond)
	}
	<-srv.done
	require.NoError(t, srv.err, "%s", srv.out.String())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestRsocketKeepalive: rstream -k 1 (SO_KEEPALIVE, TCP_KEEPIDLE 1) on the
// drop-in sends librdmacm's keepalive, a zero-length RDMA WRITE, every
// second to an idle peer: a Go rsocket on a device that captures them.
func TestRsocketKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	pcap := filepath.Join(t.TempDir(), "keepalive.pcapng")
	gp := newGoPeer(t, "127.0.77.14", "127.0.77.15", pcap)
	lib, sock, vc := gp.lib, gp.sock, gp.vc

	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	srv, err := startTool(ctx, lib, sock, "rstream", "-k", "1", "-S", "1000", "-C", "1")
	require.NoError(t, err)
	defer func() { cancel(); <-srv.done }()
	var c *rsocket.Conn
	for try := 0; ; try++ {
		if c, err = rsocket.Dial(ctx, vc, netip.MustParseAddrPort("127.0.77.14:7471"), nil); err == nil {
			break
		}
		require.Less(t, try, 50, "dial: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3500 * time.Millisecond) // idle: only keepalives cross
	c.Close()
	require.NoError(t, gp.dev.Close()) // flush the capture

	keepalives := 0
	eachRoCE(t, pcap, func(f *packet.Frame, p *packet.Packet) {
		if p.BTH.Opcode == packet.RCWriteOnly && p.RETH.Length == 0 && f.Addressing().Src.Unmap() == netip.MustParseAddr("127.0.77.14") {
			keepalives++
		}
	})
	t.Logf("%d keepalives in 3.5 s", keepalives)
	require.GreaterOrEqual(t, keepalives, 2, "rstream -k 1 sends a zero-length WRITE each second")
}
