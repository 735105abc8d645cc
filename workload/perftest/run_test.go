package perftest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/oob"
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
// pairFor opens two devices joined by a mem link (10.0.0.1 and .2) and
// returns their contexts and the options of each side for o, on a free
// out-of-band port.
func pairFor(t *testing.T, o Options) (ca, cb *verbsapi.Context, opts func(addr string) *Options) {
	t.Helper()
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{Addr: netip.MustParseAddrPort("10.0.0.1:0")})
	require.NoError(t, err)
	t.Cleanup(func() { da.Close(); db.Close() })
	ca, err = da.Open()
	require.NoError(t, err)
	cb, err = db.Open()
	require.NoError(t, err)
	port := freePort(t)
	return ca, cb, func(addr string) *Options {
		o := o
		o.QPs, o.IBDev, o.IBPort, o.GIDIndex, o.Port, o.RxDepth = 1, "rxe0", 1, -1, port, 512
		o.AtomicType, o.Conn, o.Addr = "FETCH_AND_ADD", "RC", netip.MustParseAddr(addr)
		return &o
	}
}

func TestRunInProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"write bw", Options{Verb: VerbWrite, Size: 4096, Iters: 200, TxDepth: 32, CQMod: 10}},
		// Over 20,000 iterations perftest reports no peak; the average
		// must still cover the whole run (it once used the first message).
		{"write bw 30000", Options{Verb: VerbWrite, Size: 64, Iters: 30000, TxDepth: 128, CQMod: 100}},
		{"read lat", Options{Verb: VerbRead, Lat: true, Size: 64, Iters: 100, TxDepth: 1, CQMod: 1}},
		{"send bw", Options{Verb: VerbSend, Size: 1024, Iters: 100, TxDepth: 16, CQMod: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb, opts := pairFor(t, tc.o)
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
			row := lines[len(lines)-2]
			assert.Regexp(t, `^\s*\d+\s+\d+\s+`, row, "a result row before the closing line")
			if !tc.o.Lat {
				// #bytes #iterations peak average msgrate: an average
				// no link here could reach is a broken report.
				var size, iters int
				var peak, avg, rate float64
				_, err := fmt.Sscan(row, &size, &iters, &peak, &avg, &rate)
				require.NoError(t, err, row)
				assert.Equal(t, tc.o.Iters, iters, row)
				assert.Greater(t, avg, 0.0, row)
				assert.Less(t, avg, 100000.0, "MB/s: %s", row)
				assert.InDelta(t, avg*1048576/float64(size)/1e6, rate, rate*0.01+1e-9, "average and message rate agree: %s", row)
				if tc.o.Iters > 20000 {
					assert.Zero(t, peak, "no peak over 20,000 iterations, as perftest: %s", row)
				} else {
					assert.GreaterOrEqual(t, peak, avg*0.99, row)
				}
			}
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

// TestPeerDies: when one side of a test dies mid-run (here: its context
// is cancelled, which closes its out-of-band connection, as a killed
// process's would), the other fails within a bounded time, naming the
// cause, whichever side it is and wherever it waits: the send server
// polling for receives, the read and atomic latency servers waiting for
// the close, the write latency sides spinning on a byte, the clients
// polling for completions. It used to wait forever, or exit 0 with an
// empty table.
func TestPeerDies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         Options
		killed    string // "client" or "server"
		wantCause bool   // the error names oob.ErrPeerGone
	}{
		{"send bw server", Options{Verb: VerbSend, Size: 64, Iters: 50_000_000, TxDepth: 16, CQMod: 4}, "client", true},
		{"read lat server", Options{Verb: VerbRead, Lat: true, Size: 64, Iters: 50_000_000, TxDepth: 1, CQMod: 1}, "client", true},
		{"atomic lat server", Options{Verb: VerbAtomic, Lat: true, Size: 8, Iters: 50_000_000, TxDepth: 1, CQMod: 1}, "client", true},
		{"write lat server", Options{Verb: VerbWrite, Lat: true, Size: 64, Iters: 50_000_000, TxDepth: 1, CQMod: 1}, "client", true},
		{"write bw client", Options{Verb: VerbWrite, Size: 4096, Iters: 50_000_000, TxDepth: 32, CQMod: 10}, "server", false},
		{"send lat client", Options{Verb: VerbSend, Lat: true, Size: 64, Iters: 50_000_000, TxDepth: 1, CQMod: 1}, "server", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb, opts := pairFor(t, tc.o)
			srvCtx, killSrv := context.WithCancel(context.Background())
			cliCtx, killCli := context.WithCancel(context.Background())
			defer killSrv()
			defer killCli()
			srvErr, cliErr := make(chan error, 1), make(chan error, 1)
			go func() { srvErr <- Run(srvCtx, ca, io.Discard, opts("10.0.0.1"), "") }()
			go func() { cliErr <- Run(cliCtx, cb, io.Discard, opts("10.0.0.2"), "127.0.0.1") }()
			time.Sleep(500 * time.Millisecond) // well into the run
			kill, survivor := killCli, srvErr
			if tc.killed == "server" {
				kill, survivor = killSrv, cliErr
			}
			kill()
			select {
			case err := <-survivor:
				require.Error(t, err, "the survivor ended without an error")
				if tc.wantCause {
					require.ErrorIs(t, err, oob.ErrPeerGone)
				}
				t.Logf("survivor: %v", err)
			case <-time.After(15 * time.Second):
				t.Fatal("the survivor still waits 15 s after its peer died")
			}
		})
	}
}
