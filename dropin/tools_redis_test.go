package dropin

// tools_redis_test.go: Debian's redis-server and redis-benchmark,
// unmodified, under softroce's preload library: their TCP connections are
// rsockets over RC queue pairs.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// TestRedisOverRsockets runs redis-server and redis-benchmark (SET and GET,
// plain and pipelined) and redis-cli on the mem link, whose 10.0.0.1 is no
// host address: nothing but the device carries their connections. It needs
// epoll, accept4 and a dual-stack listener from the preload library.
func TestRedisOverRsockets(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	testenv.Tools(t, "apt-get install redis-server redis-tools", "redis-server", "redis-benchmark", "redis-cli")
	lib := buildLibs(t)
	preload, err := PreloadPath(lib, "softroce")
	require.NoError(t, err)
	sock := filepath.Join(t.TempDir(), "mem.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.1"}, "rxe0", sock)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })

	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	pre := "LD_PRELOAD=" + preload
	srv, err := startTool(ctx, lib, sock, "env", pre, "redis-server", "--port", "6390", "--save", "",
		"--appendonly", "no", "--protected-mode", "no")
	require.NoError(t, err)
	defer func() { cancel(); <-srv.done }()

	cli := func(args ...string) string {
		t.Helper()
		var r *toolRun
		for try := 0; try < 50; try++ {
			r, err = startTool(ctx, lib, sock, "env", append([]string{pre, "redis-cli", "-h", "10.0.0.1", "-p", "6390"}, args...)...)
			require.NoError(t, err)
			<-r.done
			if r.err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the server may not listen yet
		}
		require.NoError(t, r.err, "redis-cli %v:\n%s\n--- server:\n%s", args, r.out.String(), srv.out.String())
		return r.out.String()
	}
	require.Contains(t, cli("set", "softroce", "over rsockets"), "OK")
	require.Contains(t, cli("get", "softroce"), "over rsockets")

	for _, args := range [][]string{
		{"-n", "2000", "-c", "10", "-t", "set,get", "-q"},
		{"-n", "20000", "-c", "10", "-P", "16", "-t", "set,get", "-q"},
	} {
		b, err := startTool(ctx, lib, sock, "env", append([]string{pre, "redis-benchmark", "-h", "10.0.0.1", "-p", "6390"}, args...)...)
		require.NoError(t, err)
		<-b.done
		out := b.out.String()
		require.NoError(t, b.err, "redis-benchmark %v:\n%s\n--- server:\n%s", args, out, srv.out.String())
		require.Regexp(t, `SET: [0-9.]+ requests per second`, out)
		require.Regexp(t, `GET: [0-9.]+ requests per second`, out)
	}
}
