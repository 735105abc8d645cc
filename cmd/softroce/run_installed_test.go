package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// TestRunInstalled: a softroce binary with no source tree around it (as
// `go install` leaves one) builds the drop-in libraries from the sources it
// carries, into the user's cache, and runs ibv_devinfo on them.
func TestRunInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the softroce binary and the libraries: not with -short")
	}
	testenv.Tools(t, "apt-get install ibverbs-utils", "ibv_devinfo")
	builtLib(t) // the build tools are there
	bin := filepath.Join(t.TempDir(), "softroce")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cache, elsewhere := t.TempDir(), t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cache}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_CACHE_HOME=") && !strings.HasPrefix(kv, "SOFTROCE_LIBDIR=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(bin, "run", "--private", "--", "ibv_devinfo")
	cmd.Dir, cmd.Env = elsewhere, env
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "hca_id:\trxe0")
	libs, err := filepath.Glob(filepath.Join(cache, "softroce", "dropin-*", "libibverbs", "libibverbs.so.1"))
	require.NoError(t, err)
	require.Len(t, libs, 1, "built once, in the cache")
}
