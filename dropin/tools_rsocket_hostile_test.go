package dropin

// tools_rsocket_hostile_test.go: the drop-in librdmacm's rsockets against
// a peer that breaks the protocol (a Go rsocket told to, on a device of
// its own): the C program's connection fails with a clear error and the
// daemon serves the next one.

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbsapi"
	"github.com/softroce/softroce/workload/rstream"
)

func TestRsocketHostilePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	testenv.Tools(t, "apt-get install rdmacm-utils", "rstream")
	lib := buildLibs(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	d, err := startDaemon(linkFlags{Link: "udp", Addr: "127.0.77.12"}, "rxe0", sock)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	dev, err := verbsapi.NewDevice("rxe9", verbsapi.LinkConfig{Kind: verbsapi.LinkUDP, Addr: netip.MustParseAddrPort("127.0.77.13:0")})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	vc, err := dev.Open()
	require.NoError(t, err)
	to := netip.MustParseAddrPort("127.0.77.12:7471")

	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	// dial reaches the C server once it listens.
	dial := func() *rsocket.Conn {
		for try := 0; ; try++ {
			c, err := rsocket.Dial(ctx, vc, to, nil)
			if err == nil {
				return c
			}
			require.Less(t, try, 50, "dial: %v", err)
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
			c := dial()
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
