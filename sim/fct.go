package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/softroce/softroce/sim/netsim"
)

// FCTResult is what a run's flows workloads measured: every flow's
// completion time against the time it would take alone on an idle
// network, and the slowdown by flow-size group, as the DCQCN and HPCC
// studies report it (their fct_analysis: sizes cut at the 50th, 80th and
// 95th percentile; slowdown floored at 1).
type FCTResult struct {
	Flows  []FlowFCT  `json:"flows"`
	Groups []FCTGroup `json:"groups"`
	// Unfinished counts the flows that had not completed when the run
	// ended; they are not in the groups.
	Unfinished int `json:"unfinished"`
}

// FlowFCT is one flow's completion.
type FlowFCT struct {
	Name     string  `json:"name"`
	Src      string  `json:"src"`
	Dst      string  `json:"dst"`
	SrcIP    string  `json:"src_ip"`
	DstIP    string  `json:"dst_ip"`
	SrcPort  uint16  `json:"sport"`
	Size     int64   `json:"size"`
	Start    int64   `json:"start_ns"`
	FCT      int64   `json:"fct_ns"`   // -1: unfinished
	Ideal    int64   `json:"ideal_ns"` // alone on an idle network
	Slowdown float64 `json:"slowdown"`
}

// FCTGroup is the slowdown of the flows in one size group.
type FCTGroup struct {
	Name    string  `json:"name"`     // "0-50%": the smallest half by size, ...
	MaxSize int64   `json:"max_size"` // its largest flow
	Count   int     `json:"count"`
	P50     float64 `json:"p50"`
	P95     float64 `json:"p95"`
	P99     float64 `json:"p99"`
}

// Wire sizes of a RoCE v2 packet over IPv4 beyond its payload: Ethernet,
// IPv4, UDP, BTH and ICRC; a WRITE's first packet adds its RETH; an ACK is
// those headers and an AETH.
const (
	fctHeaders = 14 + 20 + 8 + 12 + 4
	fctRETH    = 16
	fctAck     = fctHeaders + 4
)

// fctGroups are the size quantiles the groups end at.
var fctGroups = []struct {
	name string
	upTo float64
}{{"0-50%", 0.5}, {"50-80%", 0.8}, {"80-95%", 0.95}, {"95-100%", 1}}

// fcts measures the flows of flows workloads; nil when there are none.
func (run *runState) fcts() *FCTResult {
	w := run.w
	var res FCTResult
	for _, f := range run.flows {
		if f.total == 0 {
			continue
		}
		a, b := f.a, f.b
		mtu := int64(f.mtu)
		var pkts, first int64
		for i := range f.ops {
			op := min(int64(f.wl.maxSize), f.total-int64(i)*int64(f.wl.maxSize))
			pkts += max((op+mtu-1)/mtu, 1)
		}
		wire := f.total + pkts*fctHeaders + int64(len(f.ops))*fctRETH
		first = min(f.total, mtu) + fctHeaders + fctRETH
		data, ok1 := w.net.PathLatency(a.h.id, b.h.addr, int(first))
		ack, ok2 := w.net.PathLatency(b.h.id, a.h.addr, fctAck)
		bw := a.h.out.Config().Bandwidth
		ideal := int64(data + ack)
		if bw > 0 {
			rest := wire - first + (pkts-1)*netsim.EthernetOverhead
			ideal += rest * 8 * int64(netsim.Second) / bw
		}
		ff := FlowFCT{Name: f.name, Src: a.info.Name, Dst: b.info.Name, SrcIP: a.info.IP.String(), DstIP: b.info.IP.String(),
			SrcPort: f.qa.SrcPort(), Size: f.total, Start: int64(f.startAt), FCT: -1, Ideal: ideal}
		if !ok1 || !ok2 {
			ff.Ideal = 0
		}
		if f.finished && !f.failed {
			ff.FCT = int64(f.lastDone - f.startAt)
			if ff.Ideal > 0 {
				ff.Slowdown = max(float64(ff.FCT)/float64(ff.Ideal), 1)
			}
		} else {
			res.Unfinished++
		}
		res.Flows = append(res.Flows, ff)
	}
	if len(res.Flows) == 0 {
		return nil
	}
	res.Groups = GroupFCT(res.Flows)
	return &res
}

// GroupFCT summarizes the finished flows of fs by size group: the
// smallest 50 %, the next 30 %, 15 % and the largest 5 %, then all.
func GroupFCT(fs []FlowFCT) []FCTGroup {
	var done []FlowFCT
	for _, f := range fs {
		if f.FCT >= 0 {
			done = append(done, f)
		}
	}
	sort.SliceStable(done, func(i, j int) bool { return done[i].Size < done[j].Size })
	var out []FCTGroup
	lo := 0
	for _, g := range fctGroups {
		hi := int(float64(len(done)) * g.upTo)
		if g.upTo == 1 {
			hi = len(done)
		}
		out = append(out, fctGroup(g.name, done[lo:hi]))
		lo = hi
	}
	return append(out, fctGroup("all", done))
}

// fctGroup summarizes the slowdowns of fs (sorted by size).
func fctGroup(name string, fs []FlowFCT) FCTGroup {
	g := FCTGroup{Name: name, Count: len(fs)}
	if len(fs) == 0 {
		return g
	}
	s := make([]float64, len(fs))
	for i, f := range fs {
		s[i] = f.Slowdown
		g.MaxSize = max(g.MaxSize, f.Size)
	}
	sort.Float64s(s)
	at := func(p float64) float64 { return s[min(int(p*float64(len(s))), len(s)-1)] }
	g.P50, g.P95, g.P99 = at(0.5), at(0.95), at(0.99)
	return g
}

// Summary is the FCT table as text.
func (r *FCTResult) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "FCT slowdown by flow size (%d flows, %d unfinished):\n", len(r.Flows), r.Unfinished)
	fmt.Fprintf(&b, "  %-8s %12s %6s %7s %7s %7s\n", "sizes", "up to (B)", "flows", "p50", "p95", "p99")
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "  %-8s %12d %6d %7.2f %7.2f %7.2f\n", g.Name, g.MaxSize, g.Count, g.P50, g.P95, g.P99)
	}
	return b.String()
}

// checkFCT checks the scenario's FCT bounds.
func (run *runState) checkFCT() {
	bounds := run.w.sc.Expect.FCT
	if len(bounds) == 0 {
		return
	}
	if run.fct == nil {
		run.violate(invCongestion, "", "fct bounds: the scenario has no flows workload")
		return
	}
	for _, b := range bounds {
		var g *FCTGroup
		for i := range run.fct.Groups {
			if run.fct.Groups[i].Name == b.Group {
				g = &run.fct.Groups[i]
			}
		}
		if g == nil || g.Count == 0 {
			run.violate(invCongestion, "", "fct group %q: no flows (groups: 0-50%%, 50-80%%, 80-95%%, 95-100%%, all)", b.Group)
			continue
		}
		for _, c := range []struct {
			name     string
			got, max float64
		}{{"p50", g.P50, b.P50Max}, {"p95", g.P95, b.P95Max}, {"p99", g.P99, b.P99Max}} {
			if c.max > 0 && c.got > c.max {
				run.violate(invCongestion, "", "fct group %s: %s slowdown %.2f above %.2f", b.Group, c.name, c.got, c.max)
			}
		}
	}
}
