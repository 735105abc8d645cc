package rsocket

// bench_test.go: a Conn against net.Conn over TCP loopback, in the same
// run (go test ./rsocket -run '^$' -bench .): a 1-byte ping-pong (the
// round trip) and a one-way stream of 64 KiB writes.

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func benchPairs(b *testing.B) map[string]func() (net.Conn, net.Conn, func()) {
	return map[string]func() (net.Conn, net.Conn, func()){
		"rsocket-mem": func() (net.Conn, net.Conn, func()) {
			da, db := pair(b)
			srv, cli, stop := connPair(b, da, db, nil)
			return srv, cli, stop
		},
		"tcp-loopback": func() (net.Conn, net.Conn, func()) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			acc := make(chan net.Conn, 1)
			go func() { c, _ := l.Accept(); acc <- c }()
			cli, err := net.Dial("tcp", l.Addr().String())
			require.NoError(b, err)
			srv := <-acc
			return srv, cli, func() { srv.Close(); cli.Close(); l.Close() }
		},
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, name := range []string{"tcp-loopback", "rsocket-mem"} {
		b.Run(name, func(b *testing.B) {
			srv, cli, stop := benchPairs(b)[name]()
			defer stop()
			go io.Copy(srv, srv)
			buf := []byte{1}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := cli.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(cli, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkStream64KiB(b *testing.B) {
	for _, name := range []string{"tcp-loopback", "rsocket-mem"} {
		b.Run(name, func(b *testing.B) {
			srv, cli, stop := benchPairs(b)[name]()
			defer stop()
			done := make(chan int64)
			go func() { n, _ := io.Copy(io.Discard, srv); done <- n }()
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := cli.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			cli.(interface{ CloseWrite() error }).CloseWrite()
			<-done
		})
	}
}
