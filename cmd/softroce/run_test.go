package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// TestWireStructSizes checks that daemon.go's records have the sizes of
// libibverbs/proto.h's packed structs, as gcc lays them out.
func TestWireStructSizes(t *testing.T) {
	needTools(t, "gcc")
	dir := t.TempDir()
	src := `#include <stdio.h>
#include "proto.h"
int main(void) { printf("%zu %zu %zu %zu %zu %zu\n", sizeof(struct sr_req), sizeof(struct sr_resp_hdr),
	sizeof(struct sr_dev_entry), sizeof(struct sr_device_attr), sizeof(struct sr_port_attr), sizeof(struct sr_gid)); return 0; }`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sizes.c"), []byte(src), 0o644))
	inc, err := filepath.Abs("../../libibverbs")
	require.NoError(t, err)
	exe := filepath.Join(dir, "sizes")
	out, err := exec.Command("gcc", "-I", inc, "-o", exe, filepath.Join(dir, "sizes.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(exe).Output()
	require.NoError(t, err)
	want := fmt.Sprintf("%d %d %d %d %d %d\n", binary.Size(wireReq{}), 8, binary.Size(wireDevEntry{}),
		binary.Size(wireDeviceAttr{}), binary.Size(wirePortAttr{}), binary.Size(wireGID{}))
	require.Equal(t, want, string(out))
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

// TestDaemonProtocol speaks proto.h to the daemon directly: good calls,
// calls it must refuse with the right errno, and a client that hangs up
// mid-request.
func TestDaemonProtocol(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "p.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock)
	require.NoError(t, err)
	defer d.Close()
	_, err = startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock)
	require.ErrorContains(t, err, "already serves")

	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	call := func(op, dev, port, index uint32) (syscall.Errno, []byte) {
		require.NoError(t, binary.Write(c, binary.LittleEndian, wireReq{op, dev, port, index}))
		var h [2]uint32
		require.NoError(t, binary.Read(c, binary.LittleEndian, &h))
		body := make([]byte, h[1])
		_, err := io.ReadFull(c, body)
		require.NoError(t, err)
		return syscall.Errno(h[0]), body
	}
	for _, tc := range []struct {
		name                 string
		op, dev, port, index uint32
		errno                syscall.Errno
		size                 int
	}{
		{"list", opList, 0, 0, 0, 0, binary.Size(wireDevEntry{})},
		{"device", opQueryDevice, 0, 0, 0, 0, binary.Size(wireDeviceAttr{})},
		{"port", opQueryPort, 0, 1, 0, 0, binary.Size(wirePortAttr{})},
		{"port 2", opQueryPort, 0, 2, 0, syscall.EINVAL, 0},
		{"gid 1", opQueryGID, 0, 1, 1, 0, binary.Size(wireGID{})},
		{"empty gid", opQueryGID, 0, 1, 1023, 0, binary.Size(wireGID{})},
		{"gid past table", opQueryGID, 0, 1, 1024, syscall.EINVAL, 0},
		{"pkey", opQueryPKey, 0, 1, 0, 0, 2},
		{"pkey 1", opQueryPKey, 0, 1, 1, syscall.EINVAL, 0},
		{"no device 1", opQueryDevice, 1, 0, 0, syscall.ENODEV, 0},
		{"unknown op", 99, 0, 0, 0, syscall.EOPNOTSUPP, 0},
	} {
		errno, body := call(tc.op, tc.dev, tc.port, tc.index)
		require.Equal(t, tc.errno, errno, tc.name)
		require.Len(t, body, tc.size, tc.name)
		switch tc.name {
		case "gid 1":
			var g wireGID
			require.NoError(t, binary.Read(bytes.NewReader(body), binary.LittleEndian, &g))
			require.Equal(t, net.ParseIP("10.0.0.9").To16(), net.IP(g.GID[:]))
			require.EqualValues(t, 2, g.Type)
		case "empty gid":
			require.Equal(t, make([]byte, len(body)), body)
		case "list":
			require.Equal(t, "rxe9", strings.TrimRight(string(body[:64]), "\x00"))
		}
	}

	// A client that sends half a request and hangs up leaves the daemon serving.
	h, err := net.Dial("unix", sock)
	require.NoError(t, err)
	_, err = h.Write([]byte{1, 0, 0})
	require.NoError(t, err)
	h.Close()
	errno, _ := call(opList, 0, 0, 0)
	require.Zero(t, errno)
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
// an unimplemented verb failing with ENOSYS.
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
alloc_pd NULL errno ENOSYS
close 0
`, d.ctx.QueryDevice().NodeGUID, port.ActiveMTU.Enum(), gid0)
	require.Equal(t, want, stdout.String())
}
