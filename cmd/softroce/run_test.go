package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// needTools skips the test when a tool it needs is missing, except under CI
// (CI=true), where .ci/run installs them and a missing one is a failure.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		_, err := exec.LookPath(tool)
		need(t, tool, err == nil)
	}
}

// needFile is needTools for a file a package installs.
func needFile(t *testing.T, path string) {
	t.Helper()
	_, err := os.Stat(path)
	need(t, path, err == nil)
}

func need(t *testing.T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	const pkgs = "gcc make binutils libibverbs-dev ibverbs-utils"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found: CI must apt-get install %s", what, pkgs)
	}
	t.Skipf("%s not found (apt-get install %s)", what, pkgs)
}

// buildLib builds libibverbs/ in a scratch copy and returns its directory.
func buildLib(t *testing.T) string {
	t.Helper()
	needTools(t, "gcc", "make", "objdump")
	needFile(t, "/usr/include/infiniband/verbs.h")
	src, err := filepath.Abs("../../libibverbs")
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

// TestRunIbvUtils runs Debian's unmodified ibv_devices and ibv_devinfo -v
// through softroce run, which starts its own device.
func TestRunIbvUtils(t *testing.T) {
	needTools(t, "ibv_devices", "ibv_devinfo")
	lib := buildLib(t)
	lf := linkFlags{Link: "mem", Addr: "10.0.0.1"}
	// The device run will start, opened here too for the expected values.
	ctx, closeDev, err := openDevice(lf, "rxe0")
	require.NoError(t, err)
	attr := ctx.QueryDevice()
	port, err := ctx.QueryPort(1)
	require.NoError(t, err)
	require.NoError(t, closeDev())
	// A socket nobody serves, so that run starts the device itself.
	sock := filepath.Join(t.TempDir(), "none.sock")

	var out, errb bytes.Buffer
	code := run([]string{"run", "--lib", lib, "--socket", sock, "--link", "mem", "--addr", "10.0.0.1", "--", "ibv_devices"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	require.Regexp(t, fmt.Sprintf(`(?m)^\s+rxe0\s+%016x$`, attr.NodeGUID), out.String())

	out.Reset()
	errb.Reset()
	code = run([]string{"run", "--lib", lib, "--socket", sock, "--", "ibv_devinfo", "-v"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	s := out.String()
	for _, re := range []string{
		`(?m)^hca_id:\s+rxe0$`,
		`(?m)^\s+node_guid:\s+` + regexp.QuoteMeta(guidString(attr.NodeGUID)) + `$`,
		fmt.Sprintf(`(?m)^\s+max_qp:\s+%d$`, attr.MaxQP),
		`(?m)^\s+state:\s+PORT_ACTIVE \(4\)$`,
		fmt.Sprintf(`(?m)^\s+active_mtu:\s+%d \(%d\)$`, port.ActiveMTU, port.ActiveMTU.Enum()),
		`(?m)^\s+link_layer:\s+Ethernet$`,
		fmt.Sprintf(`(?m)^\s+gid_tbl_len:\s+%d$`, port.GIDTblLen),
		`(?m)^\s+GID\[\s*1\]:\s+::ffff:10\.0\.0\.1, RoCE v2$`,
	} {
		require.Regexp(t, re, s)
	}
}

// TestRunFindsDaemon: with a daemon already serving the socket, run uses it
// (its device, not one of its own).
func TestRunFindsDaemon(t *testing.T) {
	needTools(t, "ibv_devices")
	lib := buildLib(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.7"}, "rxe7", sock)
	require.NoError(t, err)
	defer d.Close()
	var out, errb bytes.Buffer
	code := run([]string{"run", "--lib", lib, "--socket", sock, "--", "ibv_devices"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	require.Regexp(t, fmt.Sprintf(`(?m)^\s+rxe7\s+%016x$`, d.ctx.QueryDevice().NodeGUID), out.String())

	// The program's exit status is run's, and its flags are its own.
	code = run([]string{"run", "--lib", lib, "--socket", sock, "sh", "-c", "exit 3"}, &out, &errb)
	require.Equal(t, 3, code)
	errb.Reset()
	code = run([]string{"run", "--lib", lib}, &out, &errb)
	require.Equal(t, exitTrouble, code)
	require.Contains(t, errb.String(), "no program to run")
}

// TestLibStrings compares the enum-to-string helpers with the system
// library's for every value of each enum and a few past its ends.
func TestLibStrings(t *testing.T) {
	const system = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	needFile(t, system)
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

// TestLibQuery runs libibverbs/tests/query.c, built against the distro's
// headers and our library, under softroce run: the query verbs beyond what
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

	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--lib", lib, "--socket", sock, "--", exe}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), stdout.String())
	want := fmt.Sprintf(`devices 1 first rxe5 index 0 guid %016x
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
	require.Equal(t, want, stdout.String())
}

// TestLibVerbs runs libibverbs/tests/verbs.c under softroce run: two contexts
// on one device exercise every implemented verb end to end (PD, MR on shared
// pages, CQ and completion channel, RC WRITE/READ/SEND/atomics, ibv_wr_*,
// extended CQ polling, UD, SRQ and its limit event, rereg, memory windows,
// fork); it exits 0 only when every check passed.
func TestLibVerbs(t *testing.T) {
	lib := buildLib(t)
	out, err := exec.Command("make", "-C", lib, "tests/verbs").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "--lib", lib, "--socket", filepath.Join(t.TempDir(), "none.sock"),
		"--link", "mem", "--addr", "10.0.0.1", "--", filepath.Join(lib, "tests/verbs")}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), stdout.String())
}

// TestLibRates compares the static-rate conversions (ibv_rate_to_mult and
// friends) of our library with the system's over every input that matters.
func TestLibRates(t *testing.T) {
	const system = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	needFile(t, system)
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
