package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// buildSoftroce builds the command into a temporary directory, for tests
// that run it as separate processes.
func buildSoftroce(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes over UDP loopback")
	}
	bin := filepath.Join(t.TempDir(), "softroce")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// peerRun is what one process of a pair did.
type peerRun struct {
	code           int
	stdout, stderr string
}

// runPeers runs a server and, once it started, a client, each bounded by
// timeout, and returns what each did. A process killed by the timeout
// reports code -1.
func runPeers(t *testing.T, bin string, timeout time.Duration, server, client []string) (srv, cli peerRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := func(args []string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, bin, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		require.NoError(t, cmd.Start())
		return cmd, &o, &e
	}
	wait := func(cmd *exec.Cmd, o, e *bytes.Buffer) peerRun {
		err := cmd.Wait()
		r := peerRun{stdout: o.String(), stderr: e.String()}
		if err != nil {
			r.code = -1
			if ee, ok := err.(*exec.ExitError); ok && ee.ProcessState.Exited() {
				r.code = ee.ExitCode()
			}
		}
		return r
	}
	sc, so, se := start(server)
	// The client retries a refused connection for a few seconds, so it
	// may start at once.
	cc, co, ce := start(client)
	cli = wait(cc, co, ce)
	srv = wait(sc, so, se)
	return srv, cli
}
