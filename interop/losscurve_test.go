package interop

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLossCurve measures RDMA WRITE and READ goodput against random loss,
// kernel rxe beside softroce under the same conditions: the same two guests
// (same emulated CPUs), the same netem loss on both guests' sends (requests,
// responses and acknowledgements alike), the same perftest parameters (64 KiB
// messages, path MTU 1024, 128 outstanding, timeout 14, retry count 7).
// First kernel rxe between the guests, then rdma_rxe is unloaded and
// `softroce perf` runs between the same guests on its udp link, with its
// default recovery (kernel rxe's) and then with --fast-recovery. It is a
// measurement, not part of CI: SOFTROCE_LOSSCURVE=1 bash interop/losscurve.sh.
// The table goes to the log and to losscurve.json in SOFTROCE_INTEROP_OUT.
func TestLossCurve(t *testing.T) {
	skipUnlessInterop(t, "SOFTROCE_LOSSCURVE", "interop/losscurve.sh")
	share := guestShare(t)
	s := newSuite(t, 60*time.Minute, share)

	var points []lossPoint
	softroceUp := false
	impls := []string{"rxe", "softroce", "softroce-fast"}
	if only := os.Getenv("SOFTROCE_LOSSCURVE_IMPLS"); only != "" {
		impls = strings.Split(only, ",") // e.g. softroce,softroce-fast
	}
	levels := lossLevels
	if only := os.Getenv("SOFTROCE_LOSSCURVE_LEVELS"); only != "" {
		levels = strings.Split(only, ",")
	}
	verbs := []string{"write", "read"}
	if only := os.Getenv("SOFTROCE_LOSSCURVE_VERBS"); only != "" {
		verbs = strings.Split(only, ",")
	}
	// A rate (netem's notation, e.g. 40mbit) below what either stack
	// reaches on the emulated CPUs makes both link-bound, so that the
	// curve compares their recovery rather than their CPU cost.
	rate := os.Getenv("SOFTROCE_LOSSCURVE_RATE")
	for _, impl := range impls {
		if impl != "rxe" && !softroceUp { // from here on kernel rxe is gone
			softroceUp = true
			s.guestsToSoftroce(t)
		}
		for _, verb := range verbs {
			for _, loss := range levels {
				// The guests' emulated CPUs make single runs vary by a
				// fifth or more: the median of lossRepeats.
				var runs []lossPoint
				for range lossRepeats {
					p := s.lossRun(t, impl, verb, loss, rate)
					t.Logf("%-8s %-5s loss %5s%%: %s", impl, verb, loss, p)
					runs = append(runs, p)
				}
				points = append(points, median(runs))
			}
		}
	}
	for _, vm := range []*VM{s.a, s.b} {
		_, _ = vm.Run(s.ctx, "tc qdisc del dev eth0 root", 10*time.Second)
	}
	t.Log("\n" + lossTable(points))
	js, err := json.MarshalIndent(points, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(s.outDir, "losscurve.json"), js, 0o644))
}

// lossLevels are the points, in netem's notation (percent).
var lossLevels = []string{"0", "0.1", "1", "5", "10"}

// lossIters keeps each run to a few seconds while heavy loss still moves
// about 2 MB.
var lossIters = map[string]int{"0": 600, "0.1": 600, "1": 200, "5": 40, "10": 30}

const lossRepeats = 3

// median is the run with the median goodput, a failed run counting as 0.
func median(runs []lossPoint) lossPoint {
	sorted := append([]lossPoint(nil), runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].MBps < sorted[j].MBps })
	return sorted[len(sorted)/2]
}

// lossPoint is one run: who, what, how much loss, and the client's report.
type lossPoint struct {
	Impl    string  `json:"impl"` // rxe, softroce or softroce-fast (--fast-recovery)
	Verb    string  `json:"verb"` // write or read
	LossPct string  `json:"loss_pct"`
	Rate    string  `json:"rate,omitempty"` // netem's rate limit on each guest's sends, if any
	Iters   int     `json:"iters"`
	MBps    float64 `json:"mb_per_s"` // the client's BW average, MB/s (perftest's MiB)
	Wall    float64 `json:"wall_s"`   // the client's run, connection set-up included
	Error   string  `json:"error,omitempty"`
	// Counters are the softroce client's device counters that moved
	// (perf --counters): retransmits, NAKs, early_retries...
	Counters []string `json:"counters,omitempty"`
}

var counterLinesRE = regexp.MustCompile(`(?m)^ (retransmits|early_retries|rcvd_seq_err|completer_retry_err|drop_stale|resp_superseded|read_resp_kept|read_repairs) +\d+$`)

func (p lossPoint) String() string {
	if p.Error != "" {
		return "failed: " + p.Error
	}
	return fmt.Sprintf("%8.2f MB/s (%d x 64 KiB, %.1f s) %s", p.MBps, p.Iters, p.Wall, strings.Join(strings.Fields(strings.Join(p.Counters, " ")), " "))
}

var bwRowRE = regexp.MustCompile(`(?m)^\s*65536\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)`)

// lossRun runs one bandwidth test between the guests, a the server and b
// the client, with netem dropping loss percent of each guest's sends and,
// if rate is set, holding them to that rate.
func (s *suite) lossRun(t *testing.T, impl, verb, loss, rate string) lossPoint {
	p := lossPoint{Impl: impl, Verb: verb, LossPct: loss, Rate: rate, Iters: lossIters[loss]}
	netem := "tc qdisc del dev eth0 root 2>/dev/null; true"
	if loss != "0" || rate != "" {
		netem = "tc qdisc replace dev eth0 root netem"
		if loss != "0" {
			netem += " loss " + loss + "%"
		}
		if rate != "" {
			netem += " rate " + rate
		}
	}
	for _, vm := range []*VM{s.a, s.b} {
		r, err := vm.Run(s.ctx, netem, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, 0, r.Status, "%s: %s: %s", vm.Name, netem, r.Output)
	}
	common := fmt.Sprintf("-s 65536 -n %d -m 1024", p.Iters)
	server, client := "", ""
	switch impl {
	case "rxe":
		server = fmt.Sprintf("ib_%s_bw -d rxe0 -x 1 %s", verb, common)
		client = server + " " + s.a.IP.String()
	default:
		// One datagram per packet, as kernel rxe sends them: netem
		// drops a UDP GSO send (up to 15 packets) whole, which would
		// turn softroce's losses into fewer, longer bursts.
		common += " --no-gso"
		if impl == "softroce-fast" {
			common += " --fast-recovery"
		}
		server = fmt.Sprintf("/mnt/host/softroce perf %s --addr %s %s", verb, s.a.IP, common)
		client = fmt.Sprintf("/mnt/host/softroce perf %s --addr %s %s --counters %s", verb, s.b.IP, common, s.a.IP)
	}
	const limit = 240 * time.Second
	job, err := s.a.Start(s.ctx, server, limit+10*time.Second)
	require.NoError(t, err)
	defer job.Kill()
	r, err := s.a.Run(s.ctx, waitListenScript, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, r.Status, "%s server never listened", impl)
	cli, err := s.b.Run(s.ctx, client, limit)
	require.NoError(t, err)
	p.Wall = cli.Elapsed.Seconds()
	if cli.Status != 0 {
		job.Kill()
	}
	srv, err := job.Wait()
	require.NoError(t, err)
	m := bwRowRE.FindStringSubmatch(cli.Output)
	switch {
	case cli.Status == 137:
		p.Error = fmt.Sprintf("not done in %v", limit)
	case cli.Status != 0 || m == nil:
		p.Error = fmt.Sprintf("client exit %d: %s", cli.Status, lastLines(cli.Output, 3))
	default:
		p.MBps, _ = strconv.ParseFloat(m[3], 64)
		p.Counters = counterLinesRE.FindAllString(cli.Output, -1)
	}
	if p.Error != "" {
		t.Logf("%s %s loss %s%%: server exit %d:\n%s\nclient:\n%s", impl, verb, loss, srv.Status, srv.Output, cli.Output)
	}
	return p
}

// lastLines returns s's last n non-empty lines, joined with " | ".
func lastLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, " | ")
}

// lossTable prints the curve as the README shows it: one row per verb and
// loss, kernel rxe beside softroce and their ratio.
func lossTable(points []lossPoint) string {
	at := map[string]lossPoint{}
	for _, p := range points {
		at[p.Impl+" "+p.Verb+" "+p.LossPct] = p
	}
	cell := func(p lossPoint) string {
		if p.Impl == "" {
			return "-" // not measured (SOFTROCE_LOSSCURVE_IMPLS)
		}
		if p.Error != "" {
			return "failed"
		}
		return fmt.Sprintf("%.2f", p.MBps)
	}
	var b strings.Builder
	b.WriteString("| verb | loss | kernel rxe MB/s | softroce MB/s | softroce / rxe | softroce --fast-recovery MB/s |\n|---|---|---|---|---|---|\n")
	for _, verb := range []string{"write", "read"} {
		for _, loss := range lossLevels {
			k, sr, kr := at["rxe "+verb+" "+loss], at["softroce "+verb+" "+loss], at["softroce-fast "+verb+" "+loss]
			ratio := "-"
			if k.Impl != "" && sr.Impl != "" && k.Error == "" && sr.Error == "" && k.MBps > 0 {
				ratio = fmt.Sprintf("%.2f", sr.MBps/k.MBps)
			}
			fmt.Fprintf(&b, "| %s | %s%% | %s | %s | %s | %s |\n", verb, loss, cell(k), cell(sr), ratio, cell(kr))
		}
	}
	return b.String()
}
