package dropin

// lib_test.go: the C library itself: its exported symbols against Debian's,
// its string and rate tables against the system library's, and its test
// programs (dropin/libibverbs/tests) against a Server.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// buildTools is what building the library takes, as Debian packages.
const buildTools = "apt-get install gcc make binutils libibverbs-dev"

// needBuildTools skips (fails under CI) without a C toolchain and the
// verbs headers.
func needBuildTools(t *testing.T) {
	t.Helper()
	testenv.Tools(t, buildTools, "gcc", "make", "objdump")
	testenv.File(t, "/usr/include/infiniband/verbs.h", buildTools)
}

// runWithLib runs exe with the drop-in library in front of the system's,
// talking to the server on sock: what `softroce run --socket sock` does.
func runWithLib(lib, sock, exe string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(exe, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = Env(os.Environ(), lib, sock)
	err = cmd.Run()
	return o.String(), e.String(), err
}

// buildLib builds dropin/libibverbs in a scratch copy and returns its directory.
func buildLib(t *testing.T) string {
	t.Helper()
	needBuildTools(t)
	src, err := filepath.Abs("libibverbs")
	require.NoError(t, err)
	dir := t.TempDir()
	out, err := exec.Command("cp", "-r", src+"/.", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command("make", "-C", dir, "clean", "libibverbs.so.1").CombinedOutput()
	require.NoError(t, err, "make:\n%s", out)
	return dir
}

func symbolList(t *testing.T, dir, lib string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, "abi/symbols.sh"), lib).Output()
	require.NoError(t, err)
	return string(out)
}

// TestLibSymbols checks that the built library exports exactly the symbols
// and symbol versions of Debian 12's libibverbs.so.1, and that the recorded
// list still matches the installed library when there is one.
func TestLibSymbols(t *testing.T) {
	dir := buildLib(t)
	want, err := os.ReadFile(filepath.Join(dir, "abi/debian12-44.symbols"))
	require.NoError(t, err)
	require.Greater(t, strings.Count(string(want), "\n"), 170)
	require.Equal(t, string(want), symbolList(t, dir, filepath.Join(dir, "libibverbs.so.1")))

	const system = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"
	if _, err := os.Stat(system); err == nil {
		require.Equal(t, string(want), symbolList(t, dir, system), "the installed rdma-core 44 differs from abi/debian12-44.symbols")
	}
	out, err := exec.Command("readelf", "-d", filepath.Join(dir, "libibverbs.so.1")).Output()
	if err == nil {
		require.Contains(t, string(out), "Library soname: [libibverbs.so.1]")
		require.Regexp(t, `FLAGS.*BIND_NOW|FLAGS_1.*NOW`, string(out))
	}
}

// TestLibStrings compares the enum-to-string helpers with the system
// library's for every value of each enum and a few past its ends.
func TestLibStrings(t *testing.T) {
	const system = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	testenv.File(t, system, "apt-get install libibverbs1")
	lib := buildLib(t)
	exe := filepath.Join(t.TempDir(), "strs")
	out, err := exec.Command("gcc", "-o", exe, filepath.Join(lib, "abi/strs.c"), "-ldl").CombinedOutput()
	require.NoError(t, err, "%s", out)
	want, err := exec.Command(exe, system).Output()
	require.NoError(t, err)
	got, err := exec.Command(exe, filepath.Join(lib, "libibverbs.so.1")).Output()
	require.NoError(t, err)
	require.Contains(t, string(want), "ibv_wc_status_str(5) = Work Request Flushed Error")
	require.Equal(t, string(want), string(got))
}

// TestLibQuery runs dropin/libibverbs/tests/query.c, built against the distro's
// headers and our library, with the drop-in library against a Server: the query verbs beyond what
// ibv_devinfo uses (gid_ex, gid_table, pkey, device index), their errors, and
// importing a PD failing with EOPNOTSUPP.
func TestLibQuery(t *testing.T) {
	lib := buildLib(t)
	exe := filepath.Join(t.TempDir(), "query")
	out, err := exec.Command("gcc", "-Wall", "-o", exe, filepath.Join(lib, "tests/query.c"),
		"-L", lib, "-l:libibverbs.so.1").CombinedOutput()
	require.NoError(t, err, "%s", out)

	sock := filepath.Join(t.TempDir(), "q.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.5"}, "rxe5", sock)
	require.NoError(t, err)
	defer d.Close()
	port, err := d.ctx.QueryPort(1)
	require.NoError(t, err)
	gid0, err := d.ctx.QueryGID(1, 0)
	require.NoError(t, err)

	t.Setenv("SOFTROCE_DEBUG", "1")
	stdout, stderr, err := runWithLib(lib, sock, exe)
	require.NoError(t, err, "stderr: %s\nstdout: %s", stderr, stdout)
	// SOFTROCE_DEBUG: the server's reason for the refused port 2 query.
	require.Contains(t, stderr, "op 3 failed: Invalid argument: query port 2: the device has port 1 only")
	want := fmt.Sprintf(`devices 1 first rxe5 index 0 guid %016x
ibdev_path under sysfs path yes
ibdev_path suffix /class/infiniband/rxe5 dev_path suffix /class/infiniband_verbs/uverbs0
node_type 5 1: CA
gid type 1 7 RoCE v2
uverbs ibdev 4 rxe5
missing -1
port 1 state active active_mtu %d link_layer 2
port 2 rc 22
gid_ex 1 rc 0 ::ffff:10.0.0.5 type 2
gid_ex 5 rc ENODATA
gid_table 2 [0]%s [1]::ffff:10.0.0.5
gid_table short -22
pkey rc 0 0xffff
import_pd NULL errno EOPNOTSUPP
close 0
`, d.ctx.QueryDevice().NodeGUID, port.ActiveMTU.Enum(), gid0)
	require.Equal(t, want, stdout)
}

// TestLibVerbs runs dropin/libibverbs/tests/verbs.c with the drop-in library against a Server: two contexts
// on one device exercise every implemented verb end to end (PD, MR on shared
// pages, CQ and completion channel, RC WRITE/READ/SEND/atomics, ibv_wr_*,
// extended CQ polling, UD, SRQ and its limit event, rereg, memory windows,
// fork); it exits 0 only when every check passed.
func TestLibVerbs(t *testing.T) {
	lib := buildLib(t)
	out, err := exec.Command("make", "-C", lib, "tests/verbs").CombinedOutput()
	require.NoError(t, err, "%s", out)
	sock := filepath.Join(t.TempDir(), "v.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.1"}, "rxe0", sock)
	require.NoError(t, err)
	defer d.Close()
	stdout, stderr, err := runWithLib(lib, sock, filepath.Join(lib, "tests/verbs"))
	require.NoError(t, err, "stderr: %s\nstdout: %s", stderr, stdout)
}

// TestLibRates compares the static-rate conversions (ibv_rate_to_mult and
// friends) of our library with the system's over every input that matters.
func TestLibRates(t *testing.T) {
	const system = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	testenv.File(t, system, "apt-get install libibverbs1")
	lib := buildLib(t)
	out, err := exec.Command("make", "-C", lib, "tests/rates").CombinedOutput()
	require.NoError(t, err, "%s", out)
	exe := filepath.Join(lib, "tests/rates")
	want, err := exec.Command(exe, system).Output()
	require.NoError(t, err)
	got, err := exec.Command(exe, filepath.Join(lib, "libibverbs.so.1")).Output()
	require.NoError(t, err)
	require.Contains(t, string(want), "mult 4: rate")
	require.Equal(t, string(want), string(got))
}
