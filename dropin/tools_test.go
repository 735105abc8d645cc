package dropin

// tools_test.go: Debian's unmodified
// ibverbs-utils and perftest binaries run with softroce's drop-in
// libibverbs.so.1, server and client as two processes: both on one daemon
// with a mem link (the device loops back to its own GIDs), and on two
// daemons on the udp link (127.0.77.2 and 127.0.77.3, one socket each), so
// that the packets cross the kernel's UDP loopback as between two hosts.
// Those addresses are this test's alone: other packages' tests bind UDP 4791
// on 127.0.0.2 and 127.0.0.3, and `go test ./...` runs packages in parallel.
//
//	go test ./cmd/softroce -run TestDebianVerbsTools -v

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// debianTools are the Debian binaries the drop-in must run, with their packages.
var debianTools = map[string][]string{
	"ibverbs-utils": {"ibv_devices", "ibv_devinfo", "ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"},
	"perftest":      {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"},
}

// needDebianTools skips the test when one of debianTools is missing, except
// under CI (CI=true), where a missing one fails it.
func needDebianTools(t *testing.T) {
	t.Helper()
	for pkg, tools := range debianTools {
		testenv.Tools(t, "apt-get install "+pkg, tools...)
	}
}

// toolCase is one program, run alone (single) or as a server and a client
// with the same arguments plus the server's address.
type toolCase struct {
	name   string
	prog   string
	args   []string // without the port flag, which each run adds
	single bool     // one process, no port
	// check inspects one side's output ("server", "client" or "" for
	// single) and returns its result line, or why it is not a success.
	check func(side, out string) (string, error)
}

// pingpongIters matches both report lines of ibv_*_pingpong.
var (
	pingpongBytesRE = regexp.MustCompile(`(\d+) bytes in ([0-9.]+) seconds = ([0-9.]+) Mbit/sec`)
	pingpongItersRE = regexp.MustCompile(`(\d+) iters in ([0-9.]+) seconds = ([0-9.]+) usec/iter`)
)

// checkPingpong wants both report lines, iters iterations and a rate > 0.
func checkPingpong(iters int) func(side, out string) (string, error) {
	return func(side, out string) (string, error) {
		b := pingpongBytesRE.FindStringSubmatch(out)
		it := pingpongItersRE.FindStringSubmatch(out)
		if b == nil || it == nil {
			return "", errors.New("no \"bytes in ... seconds\" / \"iters in ... seconds\" report")
		}
		if it[1] != strconv.Itoa(iters) {
			return "", fmt.Errorf("%s iterations, want %d", it[1], iters)
		}
		if rate, _ := strconv.ParseFloat(b[3], 64); rate <= 0 {
			return "", fmt.Errorf("rate %s Mbit/sec", b[3])
		}
		return b[0] + ", " + it[3] + " usec/iter", nil
	}
}

// perfRow is perftest's result row: #bytes, #iterations, then the figures
// (bw: peak, average MB/sec, Mpps; lat: min, max, typical, avg, stdev, 99%, 99.9%).
var perfRow = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)((?:\s+[0-9.]+){3,})\s*$`)

// perftestClockWarning is what perftest prints when it cannot estimate its
// CPU clock (get_cpu_mhz's fit of timestamps against cycles is too poor, as
// on a loaded virtual machine): it then divides by a 0 MHz clock and every
// figure of the run, on both sides, reads 0.00. The transfer itself is not
// in doubt: the row still counts its iterations.
const perftestClockWarning = "Correlation coefficient r^2"

// checkPerf wants perftest's row for size and iters with a positive BW
// average (bw) or average latency (lat), or, where perftest says it could
// not measure its clock (perftestClockWarning), the row alone. The read_lat server measures
// nothing and prints no row (perftest's read_lat.c), so it only has to have
// connected.
func checkPerf(lat bool, size, iters int, serverSilent bool) func(side, out string) (string, error) {
	return func(side, out string) (string, error) {
		if side == "server" && serverSilent {
			if !strings.Contains(out, "remote address:") {
				return "", errors.New("never connected (no \"remote address:\" line)")
			}
			return "connected, no result row (as perftest's read_lat server)", nil
		}
		m := perfRow.FindStringSubmatch(out)
		if m == nil {
			return "", errors.New("no result row")
		}
		row := strings.Join(strings.Fields(m[0]), " ")
		if m[1] != strconv.Itoa(size) || m[2] != strconv.Itoa(iters) {
			return "", fmt.Errorf("row %q: want %d bytes x %d iterations", row, size, iters)
		}
		figs := strings.Fields(m[3])
		col, what := 1, "BW average[MB/sec]" // bw: peak, average, Mpps
		if lat {
			col, what = 3, "t_avg[usec]" // lat: min, max, typical, avg, ...
		}
		if col >= len(figs) {
			return "", fmt.Errorf("row %q: no %s column", row, what)
		}
		if v, _ := strconv.ParseFloat(figs[col], 64); v <= 0 {
			if strings.Contains(out, perftestClockWarning) {
				return fmt.Sprintf("%s unmeasured: perftest could not estimate its clock (row: %s)", what, row), nil
			}
			return "", fmt.Errorf("%s = %s", what, figs[col])
		}
		return fmt.Sprintf("%s = %s (row: %s)", what, figs[col], row), nil
	}
}

func pingpongCase(prog string, size, iters int) toolCase {
	return toolCase{name: prog, prog: prog, check: checkPingpong(iters),
		args: []string{"-d", "rxe0", "-g", "1", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}}
}

// perfCase is an ib_<verb>_<kind> run with the interop suite's flags.
func perfCase(verb string, lat bool, size, iters int, extra ...string) toolCase {
	kind := "bw"
	if lat {
		kind = "lat"
	}
	prog := "ib_" + verb + "_" + kind
	name := prog
	for _, e := range extra {
		if !strings.HasPrefix(e, "-") {
			name += "_" + strings.ToLower(e)
		}
	}
	args := append([]string{"-d", "rxe0", "-x", "1", "-F", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}, extra...)
	return toolCase{name: name, prog: prog, args: args, check: checkPerf(lat, size, iters, lat && verb == "read")}
}

// debianToolCases: every binary of debianTools with the flags the
// interop suite gives it, two runs with the programs' defaults (pingpong
// needs -g on RoCE; perftest needs nothing) and pingpong on a completion
// channel.
func debianToolCases(addr string) []toolCase {
	devinfoRE := regexp.MustCompile(`(?m)^hca_id:\s+rxe0$[\s\S]*state:\s+PORT_ACTIVE \(4\)[\s\S]*GID\[\s*1\]:\s+::ffff:` + regexp.QuoteMeta(addr) + `, RoCE v2`)
	return []toolCase{
		{name: "ibv_devices", prog: "ibv_devices", single: true, check: func(_, out string) (string, error) {
			m := regexp.MustCompile(`(?m)^\s+rxe0\s+[0-9a-f]{16}$`).FindString(out)
			if m == "" {
				return "", errors.New("rxe0 not listed")
			}
			return strings.TrimSpace(m), nil
		}},
		{name: "ibv_devinfo", prog: "ibv_devinfo", args: []string{"-v"}, single: true, check: func(_, out string) (string, error) {
			if !devinfoRE.MatchString(out) {
				return "", fmt.Errorf("want rxe0, PORT_ACTIVE and GID[1] ::ffff:%s", addr)
			}
			return "rxe0, PORT_ACTIVE, GID[1] ::ffff:" + addr, nil
		}},
		pingpongCase("ibv_rc_pingpong", 4096, 10),
		pingpongCase("ibv_uc_pingpong", 2048, 10),
		pingpongCase("ibv_ud_pingpong", 512, 10),
		pingpongCase("ibv_srq_pingpong", 4096, 10),
		{name: "ibv_rc_pingpong_defaults", prog: "ibv_rc_pingpong", args: []string{"-g", "1"}, check: checkPingpong(1000)},
		// -e: completions through a completion channel (ibv_get_cq_event).
		{name: "ibv_rc_pingpong_events", prog: "ibv_rc_pingpong", args: []string{"-d", "rxe0", "-g", "1", "-e", "-n", "10"}, check: checkPingpong(10)},
		perfCase("write", false, 4096, 20),
		perfCase("read", false, 4096, 20),
		perfCase("send", false, 4096, 20),
		perfCase("atomic", false, 8, 20),
		perfCase("atomic", false, 8, 20, "-A", "CMP_AND_SWAP"),
		perfCase("write", true, 64, 20),
		perfCase("read", true, 64, 20),
		perfCase("send", true, 64, 20),
		{name: "ib_write_bw_defaults", prog: "ib_write_bw", check: checkPerf(false, 65536, 5000, false)},
	}
}

// toolLink is where the two processes run: the daemon sockets of the
// server and the client (the same one for mem) and the server's address.
type toolLink struct {
	name           string
	server, client string
	addr           string
	// serverDaemon serves the server's socket; a test asks its
	// connection manager whether the server program listens yet.
	serverDaemon *testDaemon
}

// startToolLinks starts the daemons for both setups and closes them at the
// end of the test.
func startToolLinks(t *testing.T) []toolLink {
	dir := t.TempDir()
	start := func(lf linkFlags, sock string) *testDaemon {
		d, err := startDaemon(lf, "rxe0", sock)
		require.NoError(t, err, "daemon on %s link at %s", lf.Link, lf.Addr)
		t.Cleanup(func() {
			require.True(t, Answers(sock), "daemon %s died during the test", sock)
			require.NoError(t, d.Close())
		})
		return d
	}
	mem := filepath.Join(dir, "mem.sock")
	memD := start(linkFlags{Link: "mem", Addr: "10.0.0.1"}, mem)
	udpA, udpB := filepath.Join(dir, "udp-a.sock"), filepath.Join(dir, "udp-b.sock")
	udpD := start(linkFlags{Link: "udp", Addr: "127.0.77.2"}, udpA)
	start(linkFlags{Link: "udp", Addr: "127.0.77.3"}, udpB)
	return []toolLink{
		{name: "mem", server: mem, client: mem, addr: "10.0.0.1", serverDaemon: memD},
		{name: "udp", server: udpA, client: udpB, addr: "127.0.77.2", serverDaemon: udpD},
	}
}

// TestDebianVerbsTools runs Debian's ibverbs-utils and perftest binaries,
// unmodified, with both ends on softroce on one machine.
func TestDebianVerbsTools(t *testing.T) {
	if testing.Short() {
		t.Skip("34 program pairs, about a minute: not with -short (CI runs them without)")
	}
	needDebianTools(t)
	lib := buildLib(t)
	for _, l := range startToolLinks(t) {
		for _, tc := range debianToolCases(l.addr) {
			t.Run(l.name+"/"+tc.name, func(t *testing.T) {
				runToolCase(t, lib, l, tc)
			})
		}
	}
}

// toolTimeout bounds one case; the defaults runs (1000 pingpong iterations,
// 5000 64 KiB writes) are the longest.
const toolTimeout = 90 * time.Second

// toolRun is one finished program.
type toolRun struct {
	out  bytes.Buffer
	err  error
	done chan struct{}
	pid  int
}

// startTool starts prog with the drop-in library in front of the system's,
// talking to the daemon on sock: what `softroce run --socket sock` does.
func startTool(ctx context.Context, lib, sock, prog string, args ...string) (*toolRun, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	r := &toolRun{done: make(chan struct{})}
	cmd.Stdout = &r.out
	cmd.Stderr = &r.out
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = Env(os.Environ(), lib, sock)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", prog, err)
	}
	r.pid = cmd.Process.Pid
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

func runToolCase(t *testing.T, lib string, l toolLink, tc toolCase) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	if tc.single {
		r, err := startTool(ctx, lib, l.server, tc.prog, tc.args...)
		require.NoError(t, err)
		<-r.done
		out := r.out.String()
		require.NoError(t, r.err, "%s %s:\n%s", tc.prog, strings.Join(tc.args, " "), out)
		res, err := tc.check("", out)
		require.NoError(t, err, "%s output:\n%s", tc.prog, out)
		t.Logf("%s: %s", tc.prog, res)
		return
	}

	port := freeTCPPort(t)
	args := append(append([]string{}, tc.args...), "-p", strconv.Itoa(port))
	srv, err := startTool(ctx, lib, l.server, tc.prog, args...)
	require.NoError(t, err)
	defer func() { cancel(); <-srv.done }()
	if err := waitListen(ctx, port, srv.done); err != nil {
		<-srv.done
		t.Fatalf("%s server never listened on %d: %v (exit: %v)\n--- server output:\n%s", tc.prog, port, err, srv.err, srv.out.String())
	}
	cli, err := startTool(ctx, lib, l.client, tc.prog, append(args, "127.0.0.1")...)
	require.NoError(t, err)
	<-cli.done
	if cli.err != nil {
		// A client that failed leaves the server waiting: give it a
		// moment to notice, then stop it.
		select {
		case <-srv.done:
		case <-time.After(3 * time.Second):
			cancel()
			<-srv.done
		}
	}
	<-srv.done
	outs := fmt.Sprintf("%s %s\n--- server (socket %s):\n%s\n--- client (socket %s):\n%s",
		tc.prog, strings.Join(args, " "), l.server, srv.out.String(), l.client, cli.out.String())
	require.NotErrorIs(t, ctx.Err(), context.DeadlineExceeded, "timed out after %v: %s", toolTimeout, outs)
	require.NoError(t, srv.err, "server exit: %s", outs)
	require.NoError(t, cli.err, "client exit: %s", outs)
	for _, side := range []struct {
		name string
		r    *toolRun
	}{{"server", srv}, {"client", cli}} {
		out := side.r.out.String()
		if strings.Contains(outs, perftestClockWarning) && !strings.Contains(out, perftestClockWarning) {
			// A server prints the figures its client measured.
			out += "\n" + perftestClockWarning + " (the peer's)\n"
		}
		res, err := tc.check(side.name, out)
		require.NoError(t, err, "%s: %s", side.name, outs)
		t.Logf("%s: %s", side.name, res)
	}
}

// freeTCPPort returns a TCP port nothing listens on now, for the
// programs' out-of-band exchange, so that cases and concurrent test runs
// do not clash on the default 18515.
func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitListen waits until a socket listens on TCP port, as /proc/net/tcp
// and tcp6 show it: the servers accept one connection only, so they must
// not be probed by connecting.
func waitListen(ctx context.Context, port int, exited <-chan struct{}) error {
	suffix := fmt.Sprintf(":%04X", port)
	for {
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(b), "\n") {
				fs := strings.Fields(line)
				if len(fs) > 3 && strings.HasSuffix(fs[1], suffix) && fs[3] == "0A" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("server exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pyverbsGeneric is pyverbs.sh's summary line for the generic modules.
var pyverbsGeneric = regexp.MustCompile(`(?m)^generic: passed (\d+), skipped (\d+), failed (\d+), errors (\d+)$`)

// TestPyverbsSuite runs rdma-core's pyverbs tests (Debian's python3-pyverbs)
// through libibverbs/tests/pyverbs.sh against a server in this process:
// every generic test, needing neither rdma_cm nor vendor
// extensions, must pass or skip for want of an optional feature.
func TestPyverbsSuite(t *testing.T) {
	const tests = "/usr/share/doc/rdma-core/tests/run_tests.py"
	_, err := os.Stat(tests)
	pyverbs := err == nil && exec.Command("/usr/bin/python3", "-c", "import pyverbs.device").Run() == nil
	if !pyverbs {
		msg := "/usr/bin/python3 with pyverbs and " + tests + " not found (apt-get install python3-pyverbs)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + ": CI must install it")
		}
		t.Skip(msg)
	}
	lib := buildLib(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "pyverbs.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.1"}, "rxe0", sock)
	require.NoError(t, err)
	defer d.Close()
	script, err := filepath.Abs("libibverbs/tests/pyverbs.sh")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	log := filepath.Join(dir, "pyverbs.log")
	cmd := exec.CommandContext(ctx, "sh", script, "--direct", "--socket", sock, "--lib", lib,
		"--log", log, "--test-timeout", "120")
	out, err := cmd.CombinedOutput()
	full, _ := os.ReadFile(log)
	m := pyverbsGeneric.FindStringSubmatch(string(out))
	require.NotNil(t, m, "pyverbs.sh printed no summary (%v):\n%s\n--- unittest output:\n%s", err, out, full)
	t.Logf("pyverbs.sh:\n%s", out)
	passed, _ := strconv.Atoi(m[1])
	require.Positive(t, passed, "no generic pyverbs test passed")
	require.Equal(t, []string{"0", "0"}, m[3:5], "generic failures and errors:\n%s\n--- unittest output:\n%s", out, full)
	require.NoError(t, err, "pyverbs.sh:\n%s", out)
}

// TestCheckPerfClockWarning: a row of zeros fails unless perftest said it
// could not measure its clock; a row of the wrong size fails either way.
func TestCheckPerfClockWarning(t *testing.T) {
	check := checkPerf(false, 4096, 20, false)
	zeros := " 4096       20               0.00               0.00   		   0.000000\n"
	_, err := check("client", zeros)
	assert.Error(t, err)
	_, err = check("client", "Correlation coefficient r^2: 0.89 < 0.9\n"+zeros)
	assert.NoError(t, err)
	_, err = check("client", "Correlation coefficient r^2: 0.89 < 0.9\n 4096 19 0.00 0.00 0.000000\n")
	assert.Error(t, err)
	res, err := check("client", " 4096 20 12.5 11.0 0.0028\n")
	require.NoError(t, err)
	assert.Contains(t, res, "11.0")
}
