package dropin

// tools_cm_test.go: Debian's unmodified rdma_cm programs (rdmacm-utils,
// perftest -R) on the drop-in librdmacm.so.1 and libibverbs.so.1, server and
// client as two processes, on the same two setups as TestDebianVerbsTools.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/internal/testenv"
)

// buildLibs builds both drop-in libraries from copies of the sources, side
// by side as Env expects them, and returns the libibverbs directory.
func buildLibs(t *testing.T) string {
	t.Helper()
	needBuildTools(t)
	testenv.File(t, "/usr/include/rdma/rdma_cma.h", "apt-get install librdmacm-dev")
	dir := t.TempDir()
	for _, lib := range []string{"libibverbs", "librdmacm", "librspreload"} {
		src, err := filepath.Abs(lib)
		require.NoError(t, err)
		out, err := exec.Command("cp", "-r", src, filepath.Join(dir, lib)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		target := "libibverbs.so.1"
		switch lib {
		case "librdmacm":
			target = "check" // builds librdmacm.so.1, checks its symbols are Debian's
		case "librspreload":
			target = PreloadName
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
	want           string // in the client's output (and the server's, unless it stays)
	// serverStays: the server serves until it is stopped (qperf, cmtime).
	serverStays bool
	// tcp: the programs also reach the server's address through the
	// host's network (qperf's TCP control connection, datagram rsockets'
	// UDP), which only the udp setup's address is on.
	tcp bool
}

// cmToolAfter checks, by case name, the case's temporary directory (TMP in
// the arguments) once the client is done.
var cmToolAfter = map[string]func(t *testing.T, tmp string){
	"rcopy": func(t *testing.T, tmp string) {
		want, err := os.ReadFile("/usr/bin/rstream")
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(tmp, "copy"))
		require.NoError(t, err)
		require.Equal(t, want, got, "rcopy's copy differs")
	},
}

var cmToolCases = []cmToolCase{
	{"rping", []string{"rping", "-s", "-C", "3", "-v"}, []string{"rping", "-c", "-C", "3", "-v", "-a", "ADDR"}, "rdma-ping-2", false, false},
	{"rdma_server", []string{"rdma_server"}, []string{"rdma_client", "-s", "ADDR"}, "end 0", false, false},
	{"ucmatose", []string{"ucmatose", "-c", "4"}, []string{"ucmatose", "-c", "4", "-s", "ADDR"}, "return status 0", false, false},
	{"udaddy", []string{"udaddy"}, []string{"udaddy", "-s", "ADDR"}, "return status 0", false, false},
	{"ib_send_bw_R", []string{"ib_send_bw", "-R", "-F", "-n", "50"}, []string{"ib_send_bw", "-R", "-F", "-n", "50", "ADDR"}, "BW average", false, false},
	{"ib_write_lat_R", []string{"ib_write_lat", "-R", "-F", "-n", "50"}, []string{"ib_write_lat", "-R", "-F", "-n", "50", "ADDR"}, "t_typical", false, false},
	{"rdma_xserver", []string{"rdma_xserver"}, []string{"rdma_xclient", "-s", "ADDR"}, "end 0", false, false},
	{"cmtime", []string{"cmtime", "-b", "ADDR"}, []string{"cmtime", "-s", "ADDR", "-c", "20"}, "disconnect", true, false},
	// rsockets: librdmacm's stream protocol over RC, verified data; -T a
	// waits in rpoll, -T b blocks in rsend/rrecv; riostream writes into
	// the peer's riomap'd buffer.
	{"rstream", []string{"rstream", "-T", "v", "-S", "65536", "-C", "100"}, []string{"rstream", "-s", "ADDR", "-T", "v", "-S", "65536", "-C", "100"}, "custom", false, false},
	{"rstream_async", []string{"rstream", "-T", "a", "-T", "v", "-S", "100000", "-C", "50"}, []string{"rstream", "-s", "ADDR", "-T", "a", "-T", "v", "-S", "100000", "-C", "50"}, "custom", false, false},
	{"rstream_blocking", []string{"rstream", "-T", "b", "-T", "v", "-S", "1000", "-C", "200"}, []string{"rstream", "-s", "ADDR", "-T", "b", "-T", "v", "-S", "1000", "-C", "200"}, "custom", false, false},
	{"riostream", []string{"riostream", "-T", "v", "-S", "65536", "-C", "100"}, []string{"riostream", "-s", "ADDR", "-T", "v", "-S", "65536", "-C", "100"}, "custom", false, false},
	// Debian's librspreload.so turns rstream's plain TCP calls (-T s)
	// into rsockets; on the mem link 10.0.0.1 is no host address, so
	// nothing but RDMA carries them there.
	{"rstream_preload", []string{"PRELOAD", "rstream", "-T", "s", "-T", "v", "-S", "65536", "-C", "100"}, []string{"PRELOAD", "rstream", "-s", "ADDR", "-T", "s", "-T", "v", "-S", "65536", "-C", "100"}, "custom", false, false},
	// rcopy: a file copied over rsockets, then compared (cmToolAfter).
	{"rcopy", []string{"rcopy"}, []string{"rcopy", "/usr/bin/rstream", "ADDR:TMP/copy"}, "done", true, false},
	// Datagram rsockets: UDP finds the peer's UD QP, then RoCE carries
	// the datagrams; -T e echoes each one (a round trip).
	{"udpong", []string{"udpong", "-b", "ADDR"}, []string{"udpong", "-s", "ADDR", "-T", "e", "-C", "200", "-S", "500"}, "custom", true, true},
	{"qperf_cm1", []string{"qperf"}, []string{"qperf", "-cm1", "-t", "1", "ADDR", "rc_bw", "rc_rdma_read_lat"}, "latency", true, true},
}

// TestDebianRdmacmTools runs rdmacm-utils' programs and perftest with -R,
// unmodified, with both ends on softroce on one machine: connection setup
// and teardown through the drop-in librdmacm and the daemon's connection
// manager on QP 1, then each program's own traffic.
func TestDebianRdmacmTools(t *testing.T) {
	if testing.Short() {
		t.Skip("program pairs: not with -short (CI runs them without)")
	}
	testenv.Tools(t, "apt-get install rdmacm-utils", "rping", "rdma_server", "rdma_client", "ucmatose", "udaddy",
		"rdma_xserver", "rdma_xclient", "cmtime", "rstream", "riostream", "rcopy", "udpong")
	testenv.Tools(t, "apt-get install perftest", "ib_send_bw", "ib_write_lat")
	testenv.Tools(t, "apt-get install qperf", "qperf")
	lib := buildLibs(t)
	for _, l := range startToolLinks(t) {
		for _, tc := range cmToolCases {
			t.Run(l.name+"/"+tc.name, func(t *testing.T) { runCMToolCase(t, lib, l, tc) })
		}
	}
}

// withPreload runs a command line that starts with PRELOAD under
// librspreload.so.
func withPreload(t *testing.T, argv []string) []string {
	if argv[0] != "PRELOAD" {
		return argv
	}
	p, err := RspreloadPath()
	if err != nil {
		testenv.Need(t, "librspreload.so", false, "apt-get install librdmacm1")
	}
	return append([]string{"env", "LD_PRELOAD=" + p}, argv[1:]...)
}

// perftestRetryCrash says whether a client's output is perftest's crash in
// its rdma_cm retry (Debian's perftest 4.5-0.17): a client that gets past
// the first handshake and sends its REQ before the server listens again is
// refused, as it would be by the kernel ("invalid service ID"), and
// perftest's retry then uses the cm ids it has just freed (fixed upstream
// in perftest 3d9d8d0, "Fix crashes and logical flaws in RDMA CM
// connection retry"). The server is by then past the first handshake too,
// so no later client can succeed: the whole pair starts again.
func perftestRetryCrash(prog string, cli *toolRun) bool {
	return strings.HasPrefix(prog, "ib_") && cli.err != nil &&
		strings.Contains(cli.err.Error(), "segmentation fault") &&
		strings.Contains(cli.out.String(), "Failed to connect RDMA CM events")
}

// cmListening returns the service IDs d's connection manager listens on.
func cmListening(d *testDaemon) map[uint64]bool {
	var ids []uint64
	d.ctx.CMPort().Do(func(m *cm.Manager, _ cm.Time) { ids = m.Listening(nil) })
	set := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// waitListening waits, for at most 10 s, until d's connection manager
// listens on a service ID it did not listen on before, or srv exits, and
// says whether it does. A client started before its server listens is
// refused, and retrying it is not enough: a client that makes several
// connections (ucmatose -c 4) can have its first refused and its later
// ones accepted, and the server then counts those against the next try's.
// (A set, not a count: a listener of the case before, whose program was
// stopped, may be going away meanwhile.)
func waitListening(d *testDaemon, before map[uint64]bool, srv *toolRun) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		for id := range cmListening(d) {
			if !before[id] {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-srv.done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func runCMToolCase(t *testing.T, lib string, l toolLink, tc cmToolCase) {
	if tc.tcp && l.name == "mem" {
		t.Skip("the programs also reach the server's address through the host's network, and a mem link's is no host address")
	}
	tc.server, tc.client = withPreload(t, tc.server), withPreload(t, tc.client)
	for attempt := 1; ; attempt++ {
		crash := runCMToolPair(t, lib, l, tc)
		if crash == "" {
			return
		}
		require.Less(t, attempt, 5, "perftest crashed in its rdma_cm retry %d times:\n%s", attempt, crash)
		t.Logf("perftest's client crashed in its rdma_cm retry (perftest's bug, fixed upstream after Debian's 4.5-0.17); starting the pair again:\n%s", crash)
	}
}

// runCMToolPair runs the case's server and client once. It returns the
// clients' outputs if the client hit perftestRetryCrash, else "".
func runCMToolPair(t *testing.T, lib string, l toolLink, tc cmToolCase) string {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	tmp := t.TempDir()
	subst := func(a string) string { return strings.ReplaceAll(strings.ReplaceAll(a, "ADDR", l.addr), "TMP", tmp) }
	sargs := make([]string, len(tc.server)-1)
	for i, a := range tc.server[1:] {
		sargs[i] = subst(a)
	}
	before := cmListening(l.serverDaemon)
	srv, err := startTool(ctx, lib, l.server, tc.server[0], sargs...)
	require.NoError(t, err)
	defer func() { cancel(); <-srv.done }()
	if !tc.tcp { // qperf and udpong first listen on the host's network
		if !waitListening(l.serverDaemon, before, srv) {
			t.Logf("%s listens on nothing after 10 s; starting the client anyway", tc.server[0])
		}
	}
	args := make([]string, len(tc.client)-1)
	for i, a := range tc.client[1:] {
		args[i] = subst(a)
	}
	// A server that listens otherwise than through the daemon's
	// connection manager (waitListening gave up) may not listen yet: a
	// client refused because it does not ("invalid service ID") tries
	// again.
	var cli *toolRun
	var tries strings.Builder // each refused client's output, for a failure's report
	for try := 0; try < 50; try++ {
		select {
		case <-srv.done:
			t.Fatalf("%s exited before a client came (%v):\n%s\n--- the clients (%d tries):\n%s",
				tc.server[0], srv.err, srv.out.String(), try, tries.String())
		default:
		}
		cli, err = startTool(ctx, lib, l.client, tc.client[0], args...)
		require.NoError(t, err)
		<-cli.done
		fmt.Fprintf(&tries, "--- try %d (%v):\n%s\n", try, cli.err, cli.out.String())
		if cli.err == nil {
			break
		}
		if perftestRetryCrash(tc.client[0], cli) {
			return tries.String()
		}
		time.Sleep(100 * time.Millisecond)
	}
	wait := 10 * time.Second
	if tc.serverStays {
		wait = 0
	}
	select {
	case <-srv.done:
	case <-time.After(wait):
		if !tc.serverStays {
			t.Logf("%s has not exited 10 s after its client: where it waits, and the daemon's goroutines:\n%s",
				tc.server[0], testenv.Stacks(srv.pid))
		}
		cancel()
		<-srv.done
	}
	outs := "--- server " + strings.Join(tc.server, " ") + ":\n" + srv.out.String() +
		"\n--- client " + tc.client[0] + " " + strings.Join(args, " ") + ":\n" + cli.out.String()
	require.NoError(t, cli.err, "client: %s", outs)
	require.Contains(t, cli.out.String(), tc.want, outs)
	if !tc.serverStays {
		require.NoError(t, srv.err, "server: %s", outs)
		require.Contains(t, srv.out.String(), tc.want, outs)
	}
	if after := cmToolAfter[tc.name]; after != nil {
		after(t, tmp)
	}
	return ""
}
