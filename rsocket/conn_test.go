package rsocket

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/nettest"

	"github.com/softroce/softroce/verbsapi"
)

// pair starts two devices on a mem link and returns a context on each.
func pair(t testing.TB) (a, b *verbsapi.Context) {
	t.Helper()
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{Kind: verbsapi.LinkMem,
		Addr: netip.MustParseAddrPort("10.0.0.1:4791")})
	require.NoError(t, err)
	t.Cleanup(func() { da.Close(); db.Close() })
	a, err = da.Open()
	require.NoError(t, err)
	b, err = db.Open()
	require.NoError(t, err)
	return a, b
}

var nextPort uint16 = 7000

// connPair connects a client on b to a listener on a.
func connPair(t testing.TB, a, b *verbsapi.Context, o *Options) (srv, cli *Conn, stop func()) {
	nextPort++
	l, err := Listen(a, nextPort, o)
	require.NoError(t, err)
	accepted := make(chan *Conn, 1)
	errs := make(chan error, 1)
	go func() {
		c, err := l.AcceptRsocket()
		if err != nil {
			errs <- err
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err = Dial(ctx, b, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), l.Addr().(*net.TCPAddr).AddrPort().Port()), o)
	require.NoError(t, err)
	select {
	case srv = <-accepted:
	case err := <-errs:
		t.Fatal(err)
	}
	return srv, cli, func() { srv.Close(); cli.Close(); l.Close() }
}

func TestConnEcho(t *testing.T) {
	a, b := pair(t)
	srv, cli, stop := connPair(t, a, b, nil)
	defer stop()
	go func() { _, err := io.Copy(srv, srv); t.Log("echo:", err); srv.CloseWrite() }()
	want := bytes.Repeat([]byte("rsocket "), 100000)
	go func() { n, err := cli.Write(want); t.Log("write:", n, err); cli.CloseWrite() }()
	got, err := io.ReadAll(cli)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestNettest is golang.org/x/net/nettest's conformance test for net.Conn.
func TestNettest(t *testing.T) {
	a, b := pair(t)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		srv, cli, stop := connPair(t, a, b, nil)
		return srv, cli, stop, nil
	})
}
