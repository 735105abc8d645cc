package pingpong

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// Both sides in one process on two devices of a mem link, every transport,
// with -c's buffer check and, for rc, completion events.
// contextPair opens two devices joined by a mem link (10.0.0.1 and .2)
// and returns their contexts and a free out-of-band port.
func contextPair(t *testing.T) (ca, cb *verbsapi.Context, port int) {
	t.Helper()
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	require.NoError(t, err)
	t.Cleanup(func() { da.Close(); db.Close() })
	ca, err = da.Open()
	require.NoError(t, err)
	cb, err = db.Open()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return ca, cb, port
}

func TestRunInProcess(t *testing.T) {
	for _, tc := range []struct {
		transport string
		size      int
		events    bool
	}{{"rc", 4096, true}, {"uc", 1000, false}, {"ud", 0, false}} {
		t.Run(tc.transport, func(t *testing.T) {
			ca, cb, port := contextPair(t)
			opts := func(addr string) *Options {
				return &Options{Port: port, IBPort: 1, Size: tc.size, PathMTU: 1024, RxDepth: 50, Iters: 200,
					GIDIndex: -1, Addr: netip.MustParseAddr(addr), Check: true, Events: tc.events, Transport: tc.transport}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var srvOut, cliOut bytes.Buffer
			srvErr := make(chan error, 1)
			go func() { srvErr <- Run(ctx, ca, &srvOut, opts("10.0.0.1"), "") }()
			require.NoError(t, Run(ctx, cb, &cliOut, opts("10.0.0.2"), "127.0.0.1"), cliOut.String())
			require.NoError(t, <-srvErr, srvOut.String())
			assert.Regexp(t, `iters in [0-9.]+ seconds`, cliOut.String())
		})
	}
}

func TestCheckRefusesWhatTheToolsRefuse(t *testing.T) {
	base := Options{Port: 18515, IBPort: 1, Size: 4096, PathMTU: 1024, RxDepth: 500, Iters: 1000, Transport: "rc"}
	require.NoError(t, Check(&base))
	for _, bad := range []func(*Options){
		func(o *Options) { o.Transport = "xrc" },
		func(o *Options) { o.PathMTU = 1500 },
		func(o *Options) { o.RxDepth = 1 },
		func(o *Options) { o.Port = 70000 },
	} {
		o := base
		bad(&o)
		assert.ErrorIs(t, Check(&o), ErrUsage)
	}
}

// TestPeerSilent: the pingpongs have no out-of-band connection during the
// run (the C tools close it after the exchange), so a side whose peer died
// learns it from silence: with PeerTimeout it fails with ErrPeerSilent,
// over UD and UC (which would otherwise wait forever) as over RC, polling
// or sleeping on events.
func TestPeerSilent(t *testing.T) {
	for _, tc := range []struct {
		transport string
		events    bool
	}{{"ud", false}, {"uc", false}, {"rc", true}} {
		t.Run(tc.transport, func(t *testing.T) {
			ca, cb, port := contextPair(t)
			opts := func(addr string) *Options {
				return &Options{Port: port, IBPort: 1, PathMTU: 1024, RxDepth: 50, Iters: 50_000_000, Size: 64,
					GIDIndex: -1, Addr: netip.MustParseAddr(addr), Events: tc.events, Transport: tc.transport,
					PeerTimeout: 500 * time.Millisecond}
			}
			srvCtx, cancelSrv := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelSrv()
			cliCtx, killCli := context.WithCancel(context.Background())
			srvErr := make(chan error, 1)
			go func() { srvErr <- Run(srvCtx, ca, io.Discard, opts("10.0.0.1"), "") }()
			cliErr := make(chan error, 1)
			go func() { cliErr <- Run(cliCtx, cb, io.Discard, opts("10.0.0.2"), "127.0.0.1") }()
			time.Sleep(300 * time.Millisecond) // well into the exchanges
			killCli()
			<-cliErr
			select {
			case err := <-srvErr:
				require.ErrorIs(t, err, ErrPeerSilent)
				t.Logf("server: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the server still waits 10 s after its client died")
			}
		})
	}
}
