package interop

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// The drop-in cases: Debian's own ibv_*_pingpong and perftest binaries,
// unmodified, on the host under `softroce run` (softroce's libibverbs.so.1
// in front of the system's), against the same binaries on kernel rxe in the
// guest. Issue #7's rxe pairings.

// buildDropIn builds dropin/libibverbs/ and returns its directory, or "" (and says
// why in the log) when it cannot be built here: the drop-in cases are then
// left out and the rest of the suite still runs. Under CI (CI=true) that is
// a failure instead: the drop-in's interop evidence must not vanish.
func buildDropIn(t *testing.T, ctx context.Context) string {
	for _, prog := range []string{"ibv_rc_pingpong", "ib_write_bw"} {
		if _, err := exec.LookPath(prog); err != nil {
			dropInLeftOut(t, "drop-in cases left out: %s is not installed (apt-get install ibverbs-utils perftest)", prog)
			return ""
		}
	}
	dir, err := filepath.Abs("../dropin/libibverbs")
	if err != nil {
		dropInLeftOut(t, "drop-in cases left out: %v", err)
		return ""
	}
	out, err := exec.CommandContext(ctx, "make", "-C", dir).CombinedOutput()
	if err != nil {
		dropInLeftOut(t, "drop-in cases left out: make -C dropin/libibverbs: %v\n%s", err, out)
		return ""
	}
	return dir
}

// hostName names the host side of a case in messages.
func (hc hostCase) hostName() string {
	if hc.dropIn != nil {
		return "softroce run " + hc.dropIn[0]
	}
	return "softroce " + hc.host[0]
}

// dropInCases are every pingpong and perftest tool, the same program on both
// sides, with the arguments the softroce-command cases use.
func dropInCases() []hostCase {
	var cs []hostCase
	for _, tr := range []string{"rc", "uc", "ud", "srq"} {
		prog, size, iters := pingpongArgs(tr)
		args := []string{prog, "-d", "rxe0", "-g", "1", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
		cs = append(cs, hostCase{
			name:    "dropin_" + prog,
			guest:   fmt.Sprintf("%s -d rxe0 -g 1 -s %d -n %d {peer}", prog, size, iters),
			host:    []string{"run"},
			dropIn:  args,
			check:   func(t *testing.T, who string, r Result) { requirePingpongOK(t, who, r, iters) },
			minRoCE: 2 * iters,
		})
	}
	for _, p := range []perfSpec{
		{verb: "write", size: 4096, iters: 20},
		{verb: "read", size: 4096, iters: 20},
		{verb: "send", size: 4096, iters: 20},
		{verb: "atomic", size: 8, iters: 20},
		{verb: "write", lat: true, size: 64, iters: 20},
		{verb: "read", lat: true, size: 64, iters: 20},
		{verb: "send", lat: true, size: 64, iters: 20},
		{verb: "atomic", lat: true, size: 8, iters: 20},
	} {
		hc := p.hostCase()
		kind := "bw"
		if p.lat {
			kind = "lat"
		}
		prog := fmt.Sprintf("ib_%s_%s", p.verb, kind)
		hc.name = "dropin_" + prog
		hc.host = []string{"run"}
		hc.dropIn = []string{prog, "-d", "rxe0", "-x", "1", "-F", "-s", strconv.Itoa(p.size), "-n", strconv.Itoa(p.iters)}
		cs = append(cs, hc)
	}
	return cs
}

// dropInLeftOut logs why the drop-in cases cannot run, and fails the test
// under CI, where .ci/run installs everything they need.
func dropInLeftOut(t *testing.T, format string, args ...any) {
	t.Helper()
	if testenv.CI() {
		t.Fatalf(format, args...)
	}
	t.Logf(format, args...)
}
