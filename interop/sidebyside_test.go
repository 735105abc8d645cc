package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSideBySide runs the same Debian perftest binaries in the same two
// guests (TCG, one emulated CPU each) over kernel rxe and then over
// softroce's drop-in libibverbs.so.1 (`softroce run`, a device of its own
// per program on the udp link, rdma_rxe unloaded): ib_write_bw, ib_send_lat
// and ib_read_lat, guest a the server and b the client, the median of three
// runs each. Both run under the same emulated CPU, which is the point and
// the caveat: the ratio says what softroce's userspace data path costs
// against the kernel's where both pay the same for every instruction. A
// measurement, not part of CI: SOFTROCE_SIDEBYSIDE=1 bash interop/sidebyside.sh.
// The table goes to the log and to sidebyside.json in SOFTROCE_INTEROP_OUT.
func TestSideBySide(t *testing.T) {
	skipUnlessInterop(t, "SOFTROCE_SIDEBYSIDE", "interop/sidebyside.sh")
	share := guestShare(t)
	s := newSuite(t, 40*time.Minute, share)
	require.NotEmpty(t, s.libDir, "the drop-in library could not be built")
	lib, err := os.ReadFile(filepath.Join(s.libDir, "libibverbs.so.1"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(share, "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(share, "lib", "libibverbs.so.1"), lib, 0o755))

	var rows []sideRow
	for _, impl := range []string{"rxe", "softroce"} {
		if impl == "softroce" {
			s.guestsToSoftroce(t)
		}
		for _, tc := range sideCases {
			var vals []float64
			for range 3 {
				v, err := s.sideRun(t, impl, tc)
				require.NoError(t, err, "%s %s", impl, tc.prog)
				t.Logf("%-8s %-12s %8.2f %s", impl, tc.prog, v, tc.unit)
				vals = append(vals, v)
			}
			rows = append(rows, sideRow{Impl: impl, Prog: tc.prog, Unit: tc.unit, Runs: vals, Median: medianOf(vals)})
		}
	}
	t.Log("\n" + sideTable(rows))
	js, err := json.MarshalIndent(rows, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(s.outDir, "sidebyside.json"), js, 0o644))
}

type sideCase struct {
	prog, args, unit string
	col              int // the result row's field that is the figure
}

// sideCases: bandwidth is perftest's BW average; latency its t_typical.
var sideCases = []sideCase{
	{"ib_write_bw", "-s 65536 -n 2000", "MB/s", 4},
	{"ib_send_lat", "-s 2 -n 2000", "us", 5},
	{"ib_read_lat", "-s 2 -n 2000", "us", 5},
}

type sideRow struct {
	Impl   string    `json:"impl"`
	Prog   string    `json:"program"`
	Unit   string    `json:"unit"`
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
}

var resultRowRE = regexp.MustCompile(`(?m)^\s*(65536|2)\s+2000\s+.*$`)

// sideRun runs one perftest pair between the guests and returns its figure.
func (s *suite) sideRun(t *testing.T, impl string, tc sideCase) (float64, error) {
	args := fmt.Sprintf("%s -d rxe0 -x 1 -m 1024 %s", tc.prog, tc.args)
	server, client := args, args+" "+s.a.IP.String()
	if impl == "softroce" {
		run := func(ip string) string {
			return fmt.Sprintf("/mnt/host/softroce run --lib /mnt/host/lib --no-view --link udp --addr %s -- ", ip)
		}
		server, client = run(s.a.IP.String())+server, run(s.b.IP.String())+client
	}
	job, err := s.a.Start(s.ctx, server, 200*time.Second)
	if err != nil {
		return 0, err
	}
	defer job.Kill()
	if r, err := s.a.Run(s.ctx, waitListenScript, 30*time.Second); err != nil || r.Status != 0 {
		return 0, fmt.Errorf("server never listened: %v %s", err, r.Output)
	}
	cli, err := s.b.Run(s.ctx, client, 180*time.Second)
	if err != nil {
		return 0, err
	}
	if cli.Status != 0 {
		job.Kill()
	}
	srv, err := job.Wait()
	if err != nil {
		return 0, err
	}
	row := resultRowRE.FindString(cli.Output)
	f := strings.Fields(row)
	if cli.Status != 0 || len(f) <= tc.col-1 {
		return 0, fmt.Errorf("client exit %d:\n%s\nserver exit %d:\n%s", cli.Status, cli.Output, srv.Status, srv.Output)
	}
	return strconv.ParseFloat(f[tc.col-1], 64)
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// sideTable prints the README's table: kernel rxe, softroce, and the ratio
// softroce/rxe (above 1 is slower for latency, faster for bandwidth).
func sideTable(rows []sideRow) string {
	at := map[string]sideRow{}
	for _, r := range rows {
		at[r.Impl+" "+r.Prog] = r
	}
	var b strings.Builder
	b.WriteString("| program | kernel rxe | softroce drop-in | softroce / rxe |\n|---|---|---|---|\n")
	for _, tc := range sideCases {
		k, sr := at["rxe "+tc.prog], at["softroce "+tc.prog]
		fmt.Fprintf(&b, "| %s | %.2f %s | %.2f %s | %.2f |\n", tc.prog, k.Median, tc.unit, sr.Median, tc.unit, sr.Median/k.Median)
	}
	return b.String()
}

// guestShare builds a static softroce into a folder the guests mount over
// 9p (newSuite's share), for the measurements that run softroce inside them.
func guestShare(t *testing.T) string {
	share := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(share, "softroce"), "../cmd/softroce")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // no libc assumptions in the guest
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build softroce for the guests: %s", out)
	return share
}

// guestsToSoftroce unloads kernel rxe in both guests (its UDP socket holds
// port 4791) and mounts the share at /mnt/host.
func (s *suite) guestsToSoftroce(t *testing.T) {
	for _, vm := range []*VM{s.a, s.b} {
		r, err := vm.Run(s.ctx, "rdma link delete rxe0 && rmmod rdma_rxe && mkdir -p /mnt/host && mount -t 9p -o trans=virtio,version=9p2000.L host /mnt/host && /mnt/host/softroce --help >/dev/null", 60*time.Second)
		require.NoError(t, err)
		require.Equal(t, 0, r.Status, "%s: unload rxe, mount the share: %s", vm.Name, r.Output)
	}
}
