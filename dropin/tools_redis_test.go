package dropin

// tools_redis_test.go: Debian's redis-server and redis-benchmark,
// unmodified, under softroce's preload library: their TCP connections are
// rsockets over RC queue pairs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// TestRedisOverRsockets runs redis-server, redis-cli and redis-benchmark
// (SET and GET, plain and pipelined) under the preload library, which
// needs epoll, accept4 and a dual-stack listener from it: on one device on
// the mem link, whose 10.0.0.1 is no host address, so nothing but the
// device carries the connections; and between two devices over UDP, where
// the server's device captures what the link carries and counts it: RDMA
// WRITEs with immediates, one or more per request, and no TCP.
func TestRedisOverRsockets(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	testenv.Tools(t, "apt-get install redis-server redis-tools", "redis-server", "redis-benchmark", "redis-cli")
	lib := buildLibs(t)
	preload, err := PreloadPath(lib, "softroce")
	require.NoError(t, err)
	dir := t.TempDir()
	start := func(lf linkFlags, name string) *testDaemon {
		d, err := startDaemon(lf, "rxe0", filepath.Join(dir, name+".sock"))
		require.NoError(t, err)
		closed := false
		t.Cleanup(func() {
			if !closed {
				require.NoError(t, d.Close())
			}
		})
		d.closeOnce = func() error { closed = true; return d.Close() }
		return d
	}
	mem := start(linkFlags{Link: "mem", Addr: "10.0.0.1"}, "mem")
	pcap := filepath.Join(dir, "redis.pcapng")
	srvDev := start(linkFlags{Link: "udp", Addr: "127.0.77.20", Pcap: pcap}, "a")
	cliDev := start(linkFlags{Link: "udp", Addr: "127.0.77.21"}, "b")

	t.Run("one device", func(t *testing.T) { runRedis(t, lib, preload, mem, mem, "10.0.0.1", 6390) })
	t.Run("two devices over udp", func(t *testing.T) {
		before := srvDev.ctx.Counters()
		requests := runRedis(t, lib, preload, srvDev, cliDev, "127.0.77.20", 6391)
		after := srvDev.ctx.Counters()
		require.NoError(t, srvDev.closeOnce()) // flush the capture
		t.Logf("server device: sent %d, received %d packets for %d requests",
			after.SentPkts-before.SentPkts, after.RcvdPkts-before.RcvdPkts, requests)
		require.GreaterOrEqual(t, after.RcvdPkts-before.RcvdPkts, uint64(requests))
		writes, other := countCapture(t, pcap)
		t.Logf("capture: %d RDMA WRITE WITH IMMEDIATE packets, %d other RoCE", writes, other)
		require.GreaterOrEqual(t, writes, requests, "every request and reply is a write with an immediate")
	})
}

// runRedis serves redis on srv's device and runs redis-cli and
// redis-benchmark on cli's against addr; it returns the requests made.
func runRedis(t *testing.T, lib, preload string, srv, cli *testDaemon, addr string, port int) int {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	pre := "LD_PRELOAD=" + preload
	p := fmt.Sprint(port)
	server, err := startTool(ctx, lib, srv.path, "env", pre, "redis-server", "--port", p, "--save", "",
		"--appendonly", "no", "--protected-mode", "no", "--dir", t.TempDir())
	require.NoError(t, err)
	defer func() { cancel(); <-server.done }()

	run := func(prog string, args ...string) (string, error) {
		r, err := startTool(ctx, lib, cli.path, "env", append([]string{pre, prog, "-h", addr, "-p", p}, args...)...)
		require.NoError(t, err)
		<-r.done
		return r.out.String(), r.err
	}
	var out string
	for try := 0; ; try++ { // the server may not listen yet
		if out, err = run("redis-cli", "set", "softroce", "over rsockets"); err == nil {
			break
		}
		require.Less(t, try, 50, "redis-cli:\n%s\n--- server:\n%s", out, server.out.String())
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, out, "OK")
	out, err = run("redis-cli", "get", "softroce")
	require.NoError(t, err, out)
	require.Contains(t, out, "over rsockets")
	requests := 2
	for _, args := range [][]string{
		{"-n", "2000", "-c", "10", "-t", "set,get", "-q"},
		{"-n", "20000", "-c", "10", "-P", "16", "-t", "set,get", "-q"},
	} {
		out, err := run("redis-benchmark", args...)
		require.NoError(t, err, "redis-benchmark %v:\n%s\n--- server:\n%s", args, out, server.out.String())
		require.Regexp(t, `SET: [0-9.]+ requests per second`, out)
		require.Regexp(t, `GET: [0-9.]+ requests per second`, out)
	}
	// BGSAVE forks a child that closes the listening sockets it inherited:
	// that must leave the parent's rsockets alone (the preload library
	// forgets them in a child), and the server keeps serving.
	out, err = run("redis-cli", "bgsave")
	require.NoError(t, err, out)
	require.Contains(t, out, "Background saving started")
	for try := 0; ; try++ {
		out, err = run("redis-cli", "info", "persistence")
		require.NoError(t, err, "after BGSAVE:\n%s\n--- server:\n%s", out, server.out.String())
		if strings.Contains(out, "rdb_bgsave_in_progress:0") {
			break
		}
		require.Less(t, try, 100, out)
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, out, "rdb_last_bgsave_status:ok")
	out, err = run("redis-cli", "get", "softroce")
	require.NoError(t, err, "after BGSAVE:\n%s\n--- server:\n%s", out, server.out.String())
	require.Contains(t, out, "over rsockets")
	return requests + 2*2000 + 3
}

// countCapture counts the RoCE frames of a capture: writes with immediates
// (rsocket data and credits) and the rest.
func countCapture(t *testing.T, path string) (writes, other int) {
	eachRoCE(t, path, func(_ *packet.Frame, p *packet.Packet) {
		switch p.BTH.Opcode {
		case packet.RCWriteOnlyImm, packet.RCWriteLastImm:
			writes++
		default:
			other++
		}
	})
	return writes, other
}

// eachRoCE calls fn with every RoCE frame of a capture, decoded.
func eachRoCE(t *testing.T, path string, fn func(f *packet.Frame, p *packet.Packet)) {
	r, err := pcapio.Open(path)
	require.NoError(t, err)
	defer r.Close()
	var f packet.Frame
	var p packet.Packet
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		if rec.Frame(&f) != nil {
			continue
		}
		require.NoError(t, p.Decode(f.Transport))
		fn(&f, &p)
	}
}
