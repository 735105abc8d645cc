package perftest

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// freePort returns a TCP port nobody listens on now.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Both sides of a test in one process, on two devices of a mem link: the
// workload needs no command and no sockets but the out-of-band one.
func TestRunInProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"write bw", Options{Verb: VerbWrite, Size: 4096, Iters: 200, TxDepth: 32, CQMod: 10}},
		{"read lat", Options{Verb: VerbRead, Lat: true, Size: 64, Iters: 100, TxDepth: 1, CQMod: 1}},
		{"send bw", Options{Verb: VerbSend, Size: 1024, Iters: 100, TxDepth: 16, CQMod: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{Addr: netip.MustParseAddrPort("10.0.0.1:0")})
			require.NoError(t, err)
			defer da.Close()
			defer db.Close()
			ca, err := da.Open()
			require.NoError(t, err)
			cb, err := db.Open()
			require.NoError(t, err)
			port := freePort(t)
			opts := func(addr string) *Options {
				o := tc.o
				o.QPs, o.IBDev, o.IBPort, o.GIDIndex, o.Port, o.RxDepth = 1, "rxe0", 1, -1, port, 512
				o.AtomicType, o.Conn, o.Addr = "FETCH_AND_ADD", "RC", netip.MustParseAddr(addr)
				return &o
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var srvOut bytes.Buffer
			srvErr := make(chan error, 1)
			go func() { srvErr <- Run(ctx, ca, &srvOut, opts("10.0.0.1"), "") }()
			var cliOut bytes.Buffer
			require.NoError(t, Run(ctx, cb, &cliOut, opts("10.0.0.2"), "127.0.0.1"), cliOut.String())
			require.NoError(t, <-srvErr, srvOut.String())
			assert.Contains(t, cliOut.String(), "#bytes")
			lines := strings.Split(strings.TrimSpace(cliOut.String()), "\n")
			assert.Regexp(t, `^\s*\d+\s+\d+\s+`, lines[len(lines)-2], "a result row before the closing line")
		})
	}
}

func TestCheckRefusesWhatPerftestRefuses(t *testing.T) {
	base := Options{Verb: VerbWrite, Size: 8, Iters: 5, QPs: 1, TxDepth: 1, RxDepth: 1, CQMod: 1, IBPort: 1, Conn: "RC", AtomicType: "FETCH_AND_ADD"}
	require.NoError(t, Check(&base))
	for _, bad := range []func(*Options){
		func(o *Options) { o.Iters = 4 },
		func(o *Options) { o.Verb, o.Conn = VerbRead, "UC" },
		func(o *Options) { o.PathMTU = 1000 },
		func(o *Options) { o.IBPort = 2 },
	} {
		o := base
		bad(&o)
		assert.ErrorIs(t, Check(&o), ErrUsage)
	}
}
