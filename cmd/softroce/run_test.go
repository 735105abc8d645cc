package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/dropin"
	"github.com/softroce/softroce/internal/testenv"
)

// builtLib returns the drop-in library of this checkout, built by
// dropin.FindLib as `softroce run` finds it.
func builtLib(t *testing.T) string {
	t.Helper()
	const fix = "apt-get install gcc make binutils libibverbs-dev"
	testenv.Tools(t, fix, "gcc", "make")
	testenv.File(t, "/usr/include/infiniband/verbs.h", fix)
	lib, err := dropin.FindLib("")
	require.NoError(t, err)
	return lib
}

// TestRunIbvUtils runs Debian's unmodified ibv_devices and ibv_devinfo -v
// through softroce run, which starts its own device.
func TestRunIbvUtils(t *testing.T) {
	testenv.Tools(t, "apt-get install ibverbs-utils", "ibv_devices", "ibv_devinfo")
	lib := builtLib(t)
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
	testenv.Tools(t, "apt-get install ibverbs-utils", "ibv_devices")
	lib := builtLib(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	_, stop, _, err := serveDevice(linkFlags{Link: "mem", Addr: "10.0.0.7"}, "rxe7", sock, &bytes.Buffer{}, daemonLimits{})
	require.NoError(t, err)
	defer stop()
	var out, errb bytes.Buffer
	code := run([]string{"run", "--lib", lib, "--socket", sock, "--", "ibv_devices"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	require.Regexp(t, `(?m)^\s+rxe7\s+[0-9a-f]{16}$`, out.String(), "the daemon's device, not one of run's own (rxe0)")

	// The program's exit status is run's, and its flags are its own.
	code = run([]string{"run", "--lib", lib, "--socket", sock, "sh", "-c", "exit 3"}, &out, &errb)
	require.Equal(t, 3, code)
	// A program killed by a signal: 128+N, as a shell says, and named.
	errb.Reset()
	code = run([]string{"run", "--lib", lib, "--socket", sock, "sh", "-c", "kill -SEGV $$"}, &out, &errb)
	require.Equal(t, 128+11, code)
	require.Contains(t, errb.String(), "sh killed by signal 11 (segmentation fault)")
	errb.Reset()
	code = run([]string{"run", "--lib", lib}, &out, &errb)
	require.Equal(t, exitTrouble, code)
	require.Contains(t, errb.String(), "no program to run")
}
