package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// TestSocketSquatted: when another user created a user's default socket
// directory (/tmp/softroce-UID) first, the user's daemon refuses to serve
// there and the library refuses to talk there, both naming the squatter,
// instead of a bare "connection refused". Played as root squatting on
// nobody's directory.
func TestSocketSquatted(t *testing.T) {
	testenv.Root(t)
	testenv.Tools(t, "apt-get install util-linux ibverbs-utils", "setpriv", "ibv_devices")
	bin := softroceBin(t)
	lib := builtLib(t)
	const dir = "/tmp/softroce-65534"
	if _, err := os.Lstat(dir); err == nil {
		t.Skipf("%s exists already: not touching it", dir)
	}
	require.NoError(t, os.Mkdir(dir, 0o755)) // root's, open to all
	t.Cleanup(func() { os.RemoveAll(dir) })
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOFTROCE_SOCKET=") && !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			env = append(env, kv)
		}
	}
	asNobody := func(args ...string) (string, error) {
		c := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...)
		c.Env = env
		out, err := c.CombinedOutput()
		return string(out), err
	}
	out, err := asNobody(bin, "daemon", "--idle-exit", "1s")
	require.Error(t, err, "%s", out)
	require.Contains(t, out, "socket directory /tmp/softroce-65534 belongs to uid 0 (root), not to you (uid 65534)")
	out, err = asNobody("env", "LD_LIBRARY_PATH="+lib, "ibv_devices")
	require.Contains(t, out, "softroce libibverbs: /tmp/softroce-65534 is not your own private directory (owner uid 0, mode 0755)", "err %v", err)
}
