package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
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
	flows = append(flows, []string{"flow", "time_ns", "sent_bps", "goodput_bps", "rate_bps"})
	for _, f := range r.Flows {
		for k := range f.Throughput {
			flows = append(flows, []string{f.Name, ts(k), strconv.FormatFloat(f.Sent[k], 'f', 0, 64),
				strconv.FormatFloat(f.Throughput[k], 'f', 0, 64), strconv.FormatInt(f.Rate[k], 10)})
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
	return writePlots(dir, res)
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
