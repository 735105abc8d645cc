package sim

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/sim/netsim"
)

// FlowsSpec makes a workload a stream of flows, as data-centre congestion
// studies draw them: each source host starts flows as a Poisson process
// whose rate fills Load of its link on average, each to a destination
// drawn uniformly from To (never itself), each of a size drawn from a
// flow-size CDF; a flow is one QP pair moving its bytes as RDMA WRITEs of
// at most Chunk, Window of them outstanding, and its flow completion time
// (FCT) runs from its arrival to its last completion.
type FlowsSpec struct {
	// CDF names a built-in distribution ("websearch", "fbhadoop": the
	// WebSearch and FB_Hadoop CDFs of the DCQCN and HPCC papers' traffic
	// generators) unless Points gives one: [size in bytes, percent] pairs,
	// percent rising to 100, sizes interpolated linearly between them.
	CDF    string       `json:"cdf,omitempty"`
	Points [][2]float64 `json:"points,omitempty"`
	// Load is the average offered load per source host, a fraction of its
	// link's bandwidth (0.3: 30 %).
	Load float64 `json:"load"`
	// For is how long flows keep arriving, from the workload's start.
	For Duration `json:"for"`
	// Chunk bounds one WRITE (default 64 KiB).
	Chunk ByteSize `json:"chunk,omitempty"`
	// File, instead of a CDF and a load, names an HPCC flow file
	// (hpcc.go): the flows it lists run as they are, their start times
	// less Offset (default: the first start, down to the whole second).
	File   string   `json:"file,omitempty"`
	Offset Duration `json:"offset,omitempty"`
	data   []byte
}

// Built-in flow-size CDFs: size (bytes) and cumulative percent, as the
// traffic generator of the HPCC and DCQCN studies reads them
// (../shared/data/hpcc-ws30: WebSearch_distribution.txt,
// FbHdp_distribution.txt).
var builtinCDFs = map[string][][2]float64{
	"websearch": {{0, 0}, {10000, 15}, {20000, 20}, {30000, 30}, {50000, 40}, {80000, 53}, {200000, 60},
		{1000000, 70}, {2000000, 80}, {5000000, 90}, {10000000, 97}, {30000000, 100}},
	"fbhadoop": {{0, 0}, {100, 1}, {200, 2}, {300, 5}, {350, 15}, {400, 20}, {500, 30}, {600, 40}, {700, 50},
		{1000, 60}, {2000, 67}, {7000, 70}, {30000, 72}, {50000, 82}, {80000, 87}, {120000, 90},
		{300000, 95}, {1000000, 97.5}, {2000000, 99}, {10000000, 100}},
}

// Flow-workload limits.
const (
	defaultChunk = 64 << 10
	maxFlows     = 200_000
	maxFlowSize  = 1 << 34
)

// cdf is a checked flow-size distribution.
type cdf [][2]float64

func (s *FlowsSpec) cdf() (cdf, error) {
	pts := s.Points
	if len(pts) == 0 {
		var ok bool
		if pts, ok = builtinCDFs[strings.ToLower(s.CDF)]; !ok {
			return nil, fmt.Errorf("cdf %q: want websearch, fbhadoop or points", s.CDF)
		}
	}
	if len(pts) < 2 || pts[len(pts)-1][1] != 100 {
		return nil, fmt.Errorf("cdf: want at least two points, the last at 100 %%")
	}
	for i, p := range pts {
		if p[0] < 0 || p[0] > maxFlowSize || p[1] < 0 || p[1] > 100 || math.IsNaN(p[0]) || math.IsNaN(p[1]) {
			return nil, fmt.Errorf("cdf point %d (%g, %g): want a size 0..%d and a percent 0..100", i, p[0], p[1], int64(maxFlowSize))
		}
		if i > 0 && (p[0] < pts[i-1][0] || p[1] < pts[i-1][1]) {
			return nil, fmt.Errorf("cdf point %d: sizes and percents must not fall", i)
		}
	}
	return cdf(pts), nil
}

// mean is the distribution's average size, integrating the linear pieces.
func (c cdf) mean() float64 {
	var m float64
	for i := 1; i < len(c); i++ {
		// The conversion keeps the compiler from fusing the multiply into
		// the add (FMA on some machines, not others): runs must be the
		// same everywhere.
		m += float64((c[i][1] - c[i-1][1]) / 100 * (c[i][0] + c[i-1][0]) / 2)
	}
	return m
}

// draw picks a size: a uniform percent, then the size at it by linear
// interpolation (the generator's custom_rand).
func (c cdf) draw(r *fault.Rand) int64 {
	u := float64(r.Uint64()>>11) / (1 << 53) * 100
	i := sort.Search(len(c), func(i int) bool { return c[i][1] > u })
	if i == 0 {
		return int64(c[0][0])
	}
	if i == len(c) {
		return int64(c[len(c)-1][0])
	}
	lo, hi := c[i-1], c[i]
	return int64(lo[0] + float64((u-lo[1])/(hi[1]-lo[1])*(hi[0]-lo[0])))
}

// flowArrival is one flow a flows workload starts.
type flowArrival struct {
	src, dst int
	size     int64
	at       netsim.Time
}

// arrivals draws a flows workload's flows: per source host, exponential
// gaps of mean mean_size·8/(bandwidth·load) from the workload's start
// until For has passed.
func (w *wlSpec) arrivals(seed uint64, from, to []int, bandwidth func(host int) int64, hosts map[string]int) ([]flowArrival, error) {
	fs := w.Flows
	if fs.File != "" {
		if fs.data == nil {
			return nil, fmt.Errorf("workload %s: flow file %s not read (scenarios that name files are loaded with Load)", w.Name, fs.File)
		}
		off := netsim.Time(fs.Offset)
		if off == 0 {
			off = firstStartSecond(fs.data)
		}
		fl, err := hpccFlows(fs.File, fs.data, off, hosts)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.Name, err)
		}
		sort.SliceStable(fl, func(i, j int) bool { return fl[i].at < fl[j].at })
		return fl, nil
	}
	c, err := fs.cdf()
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	if !(fs.Load > 0 && fs.Load <= 1) || fs.For <= 0 {
		return nil, fmt.Errorf("workload %s: flows want a load in (0, 1] and a positive for", w.Name)
	}
	mean := max(c.mean(), 1)
	var out []flowArrival
	for _, src := range from {
		dsts := make([]int, 0, len(to))
		for _, d := range to {
			if d != src {
				dsts = append(dsts, d)
			}
		}
		if len(dsts) == 0 {
			continue
		}
		r := fault.Stream(seed, fmt.Sprintf("flows/%s/%d", w.Name, src))
		gap := uint64(mean * 8 / (float64(bandwidth(src)) * fs.Load) * float64(netsim.Second))
		t := netsim.Time(w.Start)
		end := t + netsim.Time(fs.For)
		for {
			hi, lo := bits.Mul64(gap, negLnQ32(r.Uint64()>>11|1))
			t += netsim.Time(hi<<32 | lo>>32)
			if t >= end {
				break
			}
			out = append(out, flowArrival{src: src, dst: dsts[r.IntN(len(dsts))], size: max(c.draw(r), 1), at: t})
			if len(out) > maxFlows {
				return nil, fmt.Errorf("workload %s: more than %d flows: lower load or for", w.Name, maxFlows)
			}
		}
	}
	// Flows start in time order, then by source: QPNs and the event log
	// follow arrival order.
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out, nil
}

// negLnQ32 returns -ln(x/2^53) for 0 < x < 2^53 in 32-bit fixed point,
// with integer arithmetic only (math.Log is assembly on some machines and
// Go elsewhere, and the last bits differ): log2 by repeated squaring, then
// times ln 2. An exponential draw is gap·negLnQ32(uniform).
func negLnQ32(x uint64) uint64 {
	n := bits.Len64(x) - 1 // integer part of log2(x)
	y := x << (62 - n)     // x/2^n in [1, 2), 62 fractional bits
	var frac uint64
	for i := 31; i >= 0; i-- {
		hi, lo := bits.Mul64(y, y)
		y = hi<<2 | lo>>62 // y², still 62 fractional bits, in [1, 4)
		if y >= 2<<62 {
			frac |= 1 << i
			y >>= 1
		}
	}
	// log2(x/2^53) = n - 53 + frac/2^32, negative; negate.
	neg := uint64(53-n)<<32 - frac
	const ln2Q32 = 2977044472 // ln 2 · 2^32
	hi, lo := bits.Mul64(neg, ln2Q32)
	return hi<<32 | lo>>32
}
