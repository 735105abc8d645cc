package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/softroce/softroce/sim"
)

// ReadHPCCFCT reads the HPCC ns-3 simulator's FCT output (sip dip sport
// dport size start_ns fct_ns standalone_fct_ns per line) as flows whose
// ideal is its standalone FCT, so that GroupFCT cuts it as it cuts ours.
func ReadHPCCFCT(path string) ([]sim.FlowFCT, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read hpcc fct: %w", err)
	}
	var out []sim.FlowFCT
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 8 {
			return nil, fmt.Errorf("read hpcc fct %s: line %d: want 8 fields", path, i+1)
		}
		var v [4]int64
		for k, j := range []int{4, 5, 6, 7} {
			if v[k], err = strconv.ParseInt(f[j], 10, 64); err != nil || v[k] < 0 {
				return nil, fmt.Errorf("read hpcc fct %s: line %d: field %d: %q", path, i+1, j+1, f[j])
			}
		}
		x := sim.FlowFCT{Src: f[0], Dst: f[1], Size: v[0], Start: v[1], FCT: v[2], Ideal: v[3]}
		if x.Ideal > 0 {
			x.Slowdown = max(float64(x.FCT)/float64(x.Ideal), 1)
		}
		out = append(out, x)
	}
	return out, nil
}

// WriteComparison writes fct-compare.png and fct-compare.txt into dir: the
// slowdown percentiles by size group of a run and of another simulator's
// run of the same flows (label names it).
func WriteComparison(dir string, res *sim.Result, label string, ref []sim.FlowFCT) error {
	if res.FCT == nil {
		return fmt.Errorf("compare fct: the run has no flows workload")
	}
	ours, theirs := res.FCT.Groups, sim.GroupFCT(ref)
	var b strings.Builder
	fmt.Fprintf(&b, "FCT slowdown p50 / p95 / p99 by flow size: softroce (%d flows) vs %s (%d flows)\n", len(res.FCT.Flows), label, len(ref))
	for i := range ours {
		o, t := ours[i], theirs[i]
		fmt.Fprintf(&b, "  %-8s up to %9d B: %5.2f / %5.2f / %5.2f   vs up to %9d B: %5.2f / %5.2f / %5.2f\n",
			o.Name, o.MaxSize, o.P50, o.P95, o.P99, t.MaxSize, t.P50, t.P95, t.P99)
	}
	if err := os.WriteFile(filepath.Join(dir, "fct-compare.txt"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("compare fct: %w", err)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: FCT slowdown by flow size, softroce vs %s", res.Scenario, label)
	p.X.Label.Text = "flow-size group"
	p.Y.Label.Text = "slowdown"
	var lines []any
	var names []string
	for _, side := range []struct {
		who string
		gs  []sim.FCTGroup
	}{{"softroce", ours}, {label, theirs}} {
		for _, pc := range []struct {
			name string
			get  func(g sim.FCTGroup) float64
		}{{"p50", func(g sim.FCTGroup) float64 { return g.P50 }}, {"p99", func(g sim.FCTGroup) float64 { return g.P99 }}} {
			var xy plotter.XYs
			names = names[:0]
			for i, g := range side.gs {
				if g.Name == "all" {
					continue
				}
				xy = append(xy, plotter.XY{X: float64(i), Y: pc.get(g)})
				names = append(names, g.Name)
			}
			lines = append(lines, side.who+" "+pc.name, xy)
		}
	}
	p.NominalX(names...)
	return save(p, lines, filepath.Join(dir, "fct-compare.png"))
}
