package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/softroce/softroce/sim"
)

// Write writes a run's result and report into dir: result.json (the
// whole Result), flows.csv (per flow and sample: time, sending rate,
// goodput, rate-limiter setting), queues.csv (per link direction that
// queued anything, per sample: time, bytes), summary.txt and the plots
// (plot.go).
func Write(dir string, res *sim.Result) error {
	if res.Report == nil {
		return fmt.Errorf("write report: the run gathered no report")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	r := res.Report
	ts := func(k int) string { return strconv.FormatInt(int64(k+1)*r.Interval, 10) }
	var flows [][]string
	flows = append(flows, []string{"flow", "time_ns", "sent_bps", "goodput_bps", "rate_bps", "target_bps", "alpha"})
	for _, f := range r.Flows {
		for k := range f.Throughput {
			flows = append(flows, []string{f.Name, ts(k), strconv.FormatFloat(f.Sent[k], 'f', 0, 64),
				strconv.FormatFloat(f.Throughput[k], 'f', 0, 64), strconv.FormatInt(f.Rate[k], 10),
				strconv.FormatInt(f.Target[k], 10), strconv.FormatFloat(f.Alpha[k], 'f', 6, 64)})
		}
	}
	if err := writeCSV(filepath.Join(dir, "flows.csv"), flows); err != nil {
		return err
	}
	queues := [][]string{{"link", "time_ns", "bytes"}}
	for _, q := range r.Queues {
		if q.MaxBytes == 0 {
			continue
		}
		for k, v := range q.Bytes {
			queues = append(queues, []string{q.Link, ts(k), strconv.Itoa(v)})
		}
	}
	if err := writeCSV(filepath.Join(dir, "queues.csv"), queues); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(res.Summary()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := writeFCT(dir, res.FCT); err != nil {
		return err
	}
	return writePlots(dir, res)
}

// writeFCT writes a flows workload's completion times: fct.csv, one row
// per flow, and fct.txt in the HPCC simulator's format (sip dip sport dport
// size start_ns fct_ns standalone_ns, addresses in hex), which its
// fct_analysis.py reads as it is.
func writeFCT(dir string, f *sim.FCTResult) error {
	if f == nil {
		return nil
	}
	rows := [][]string{{"flow", "src", "dst", "size", "start_ns", "fct_ns", "ideal_ns", "slowdown"}}
	var txt []byte
	for _, x := range f.Flows {
		rows = append(rows, []string{x.Name, x.Src, x.Dst, strconv.FormatInt(x.Size, 10), strconv.FormatInt(x.Start, 10),
			strconv.FormatInt(x.FCT, 10), strconv.FormatInt(x.Ideal, 10), strconv.FormatFloat(x.Slowdown, 'f', 4, 64)})
		if x.FCT < 0 {
			continue
		}
		txt = fmt.Appendf(txt, "%s %s %d %d %d %d %d %d\n", hexIP(x.SrcIP), hexIP(x.DstIP), x.SrcPort, 4791,
			x.Size, x.Start, x.FCT, x.Ideal)
	}
	if err := writeCSV(filepath.Join(dir, "fct.csv"), rows); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "fct.txt"), txt, 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// hexIP writes an IPv4 address as the HPCC simulator does: eight hex digits.
func hexIP(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return s
	}
	b := a.As4()
	return fmt.Sprintf("%02x%02x%02x%02x", b[0], b[1], b[2], b[3])
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}
