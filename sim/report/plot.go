package report

import (
	"fmt"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/softroce/softroce/sim"
)

// maxLines bounds the series one plot draws: beyond a dozen lines a plot
// stops being readable; the CSVs hold them all.
const maxLines = 12

// writePlots draws rates.png (each flow's sending rate over time) and
// queues.png (the depth of the queues that held the most) into dir.
func writePlots(dir string, res *sim.Result) error {
	r := res.Report
	ms := func(k int) float64 { return float64(int64(k+1)*r.Interval) / 1e6 }

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, seed %d: sending rate per flow", res.Scenario, res.Seed)
	p.X.Label.Text = "time (ms)"
	p.Y.Label.Text = "Gb/s"
	var lines []any
	for i, f := range r.Flows {
		if i == maxLines {
			break
		}
		xy := make(plotter.XYs, len(f.Sent))
		for k, v := range f.Sent {
			xy[k].X, xy[k].Y = ms(k), v/1e9
		}
		lines = append(lines, f.Name, xy)
	}
	if err := save(p, lines, filepath.Join(dir, "rates.png")); err != nil {
		return err
	}

	q := plot.New()
	q.Title.Text = fmt.Sprintf("%s, seed %d: queue depth", res.Scenario, res.Seed)
	q.X.Label.Text = "time (ms)"
	q.Y.Label.Text = "KB"
	queues := append([]sim.QueueReport(nil), r.Queues...)
	sort.SliceStable(queues, func(i, j int) bool { return queues[i].MaxBytes > queues[j].MaxBytes })
	lines = nil
	for i, qr := range queues {
		// Queues that never held a hundredth of the deepest one's bytes
		// would only clutter the legend.
		if i == maxLines || qr.MaxBytes == 0 || qr.MaxBytes < queues[0].MaxBytes/100 {
			break
		}
		xy := make(plotter.XYs, len(qr.Bytes))
		for k, v := range qr.Bytes {
			xy[k].X, xy[k].Y = ms(k), float64(v)/1e3
		}
		lines = append(lines, qr.Link, xy)
	}
	if err := save(q, lines, filepath.Join(dir, "queues.png")); err != nil {
		return err
	}
	if res.FCT != nil {
		return plotFCT(res, filepath.Join(dir, "fct.png"))
	}
	return nil
}

// plotFCT draws the slowdown percentiles by flow-size group, the figure of
// the DCQCN and HPCC studies.
func plotFCT(res *sim.Result, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, seed %d: FCT slowdown by flow size", res.Scenario, res.Seed)
	p.X.Label.Text = "flow-size group (largest flow, bytes)"
	p.Y.Label.Text = "slowdown"
	var groups []sim.FCTGroup
	for _, g := range res.FCT.Groups {
		if g.Name != "all" && g.Count > 0 {
			groups = append(groups, g)
		}
	}
	names := make([]string, len(groups))
	var lines []any
	for _, pc := range []struct {
		name string
		get  func(g sim.FCTGroup) float64
	}{{"p50", func(g sim.FCTGroup) float64 { return g.P50 }}, {"p95", func(g sim.FCTGroup) float64 { return g.P95 }},
		{"p99", func(g sim.FCTGroup) float64 { return g.P99 }}} {
		xy := make(plotter.XYs, len(groups))
		for i, g := range groups {
			xy[i].X, xy[i].Y = float64(i), pc.get(g)
			names[i] = fmt.Sprintf("%s (%d)", g.Name, g.MaxSize)
		}
		lines = append(lines, pc.name, xy)
	}
	p.NominalX(names...)
	return save(p, lines, path)
}

// save adds lines (name, XYs pairs) to p and writes it as a PNG.
func save(p *plot.Plot, lines []any, path string) error {
	if len(lines) > 0 {
		if err := plotutil.AddLines(p, lines...); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	p.Legend.Top = true
	if err := p.Save(9*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
