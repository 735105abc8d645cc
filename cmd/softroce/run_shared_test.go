package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/dropin"
	"github.com/softroce/softroce/internal/testenv"
)

// TestRunSharedDaemon: two shells, nothing else started: `softroce run --
// ibv_rc_pingpong -g 1` and the same with `localhost` reach each other
// through the shared daemon the first run starts on the default socket,
// which exits once both are gone.
func TestRunSharedDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the softroce binary: not with -short")
	}
	testenv.Tools(t, "apt-get install ibverbs-utils", "ibv_rc_pingpong")
	builtLib(t)
	bin := filepath.Join(t.TempDir(), "softroce")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	rt := t.TempDir()
	env := []string{"XDG_RUNTIME_DIR=" + rt}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOFTROCE_SOCKET=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		c := exec.CommandContext(ctx, bin, append([]string{"run", "--idle-exit", "2s", "--"}, args...)...)
		var b bytes.Buffer
		c.Stdout, c.Stderr, c.Env = &b, &b, env
		require.NoError(t, c.Start())
		return c, &b
	}
	srv, sout := start("ibv_rc_pingpong", "-g", "1", "-n", "50", "-p", "18521")
	sock := filepath.Join(rt, "softroce.sock")
	require.Eventually(t, func() bool { return dropin.Answers(sock) }, 20*time.Second, 20*time.Millisecond,
		"no shared daemon on %s:\n%s", sock, sout.String())
	time.Sleep(300 * time.Millisecond) // the server program listens on its TCP port
	cli, cout := start("ibv_rc_pingpong", "-g", "1", "-n", "50", "-p", "18521", "localhost")
	require.NoError(t, cli.Wait(), "client:\n%s", cout.String())
	require.NoError(t, srv.Wait(), "server:\n%s", sout.String())
	require.Contains(t, sout.String(), "started a shared device rxe0")
	require.NotContains(t, cout.String(), "started a shared device", "the second run found the first one's daemon")
	require.Contains(t, cout.String(), "50 iters in")
	// Two seconds after the last program, the daemon is gone.
	require.Eventually(t, func() bool { return !dropin.Answers(sock) }, 20*time.Second, 100*time.Millisecond,
		"the shared daemon outlived its idle time")
}
