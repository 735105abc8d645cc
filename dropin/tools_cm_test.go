package dropin

// tools_cm_test.go: Debian's unmodified rdma_cm programs (rdmacm-utils,
// perftest -R) on the drop-in librdmacm.so.1 and libibverbs.so.1, server and
// client as two processes, on the same two setups as TestDebianVerbsTools.

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// buildLibs builds both drop-in libraries from copies of the sources, side
// by side as Env expects them, and returns the libibverbs directory.
func buildLibs(t *testing.T) string {
	t.Helper()
	needBuildTools(t)
	testenv.File(t, "/usr/include/rdma/rdma_cma.h", "apt-get install librdmacm-dev")
	dir := t.TempDir()
	for _, lib := range []string{"libibverbs", "librdmacm"} {
		src, err := filepath.Abs(lib)
		require.NoError(t, err)
		out, err := exec.Command("cp", "-r", src, filepath.Join(dir, lib)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		target := "libibverbs.so.1"
		if lib == "librdmacm" {
			target = "check" // builds librdmacm.so.1, checks its symbols are Debian's
		}
		out, err = exec.Command("make", "-C", filepath.Join(dir, lib), "clean", target).CombinedOutput()
		require.NoError(t, err, "make %s:\n%s", lib, out)
	}
	return filepath.Join(dir, "libibverbs")
}

// cmToolCase is a server and a client program; ADDR in the client's
// arguments is the server's address.
type cmToolCase struct {
	name           string
	server, client []string
	want           string // in both sides' output
}

var cmToolCases = []cmToolCase{
	{"rping", []string{"rping", "-s", "-C", "3", "-v"}, []string{"rping", "-c", "-C", "3", "-v", "-a", "ADDR"}, "rdma-ping-2"},
	{"rdma_server", []string{"rdma_server"}, []string{"rdma_client", "-s", "ADDR"}, "end 0"},
	{"ucmatose", []string{"ucmatose"}, []string{"ucmatose", "-s", "ADDR"}, "return status 0"},
	{"udaddy", []string{"udaddy"}, []string{"udaddy", "-s", "ADDR"}, "return status 0"},
	{"ib_send_bw_R", []string{"ib_send_bw", "-R", "-F", "-n", "50"}, []string{"ib_send_bw", "-R", "-F", "-n", "50", "ADDR"}, "BW average"},
	{"ib_write_lat_R", []string{"ib_write_lat", "-R", "-F", "-n", "50"}, []string{"ib_write_lat", "-R", "-F", "-n", "50", "ADDR"}, "t_typical"},
}

// TestDebianRdmacmTools runs rdmacm-utils' programs and perftest with -R,
// unmodified, with both ends on softroce on one machine: connection setup
// and teardown through the drop-in librdmacm and the daemon's connection
// manager on QP 1, then each program's own traffic.
func TestDebianRdmacmTools(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	testenv.Tools(t, "apt-get install rdmacm-utils", "rping", "rdma_server", "rdma_client", "ucmatose", "udaddy")
	testenv.Tools(t, "apt-get install perftest", "ib_send_bw", "ib_write_lat")
	lib := buildLibs(t)
	for _, l := range startToolLinks(t) {
		for _, tc := range cmToolCases {
			t.Run(l.name+"/"+tc.name, func(t *testing.T) { runCMToolCase(t, lib, l, tc) })
		}
	}
}

func runCMToolCase(t *testing.T, lib string, l toolLink, tc cmToolCase) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	srv, err := startTool(ctx, lib, l.server, tc.server[0], tc.server[1:]...)
	require.NoError(t, err)
	defer func() { cancel(); <-srv.done }()
	args := make([]string, len(tc.client)-1)
	for i, a := range tc.client[1:] {
		args[i] = strings.ReplaceAll(a, "ADDR", l.addr)
	}
	// Nothing tells when the server listens (no TCP port): a client
	// refused because it does not yet ("invalid service ID") tries again.
	var cli *toolRun
	for try := 0; try < 50; try++ {
		select {
		case <-srv.done:
			t.Fatalf("%s exited before a client came (%v):\n%s", tc.server[0], srv.err, srv.out.String())
		default:
		}
		cli, err = startTool(ctx, lib, l.client, tc.client[0], args...)
		require.NoError(t, err)
		<-cli.done
		if cli.err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-srv.done:
	case <-time.After(10 * time.Second):
		cancel()
		<-srv.done
	}
	outs := "--- server " + strings.Join(tc.server, " ") + ":\n" + srv.out.String() +
		"\n--- client " + tc.client[0] + " " + strings.Join(args, " ") + ":\n" + cli.out.String()
	require.NoError(t, cli.err, "client: %s", outs)
	require.NoError(t, srv.err, "server: %s", outs)
	require.Contains(t, cli.out.String(), tc.want, outs)
	require.Contains(t, srv.out.String(), tc.want, outs)
}
