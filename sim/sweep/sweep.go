// Package sweep runs one simulator scenario over many seeds and parameter
// values, spread over the cores of one machine and, by shards, over
// machines, and merges what the runs measured into one table.
package sweep

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/softroce/softroce/sim"
)

// Param is one swept setting: a congestion-control parameter under its
// mlx5 name (as `--cc` and a scenario's congestion params take it), and
// the values to run.
type Param struct {
	Name   string
	Values []string
}

// ParseParam reads "name=v1,v2,...".
func ParseParam(s string) (Param, error) {
	name, vals, ok := strings.Cut(s, "=")
	if !ok || name == "" || vals == "" {
		return Param{}, fmt.Errorf("sweep parameter %q: want name=value[,value...]", s)
	}
	return Param{Name: name, Values: strings.Split(vals, ",")}, nil
}

// Job is one run of a sweep: a seed and one value per parameter.
type Job struct {
	Index  int               `json:"index"`
	Seed   uint64            `json:"seed"`
	Params map[string]string `json:"params,omitempty"`
}

// Name is the job's directory name: its index, seed and values.
func (j Job) Name() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%04d-seed%d", j.Index, j.Seed)
	keys := make([]string, 0, len(j.Params))
	for k := range j.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "-%s=%s", k, j.Params[k])
	}
	return b.String()
}

// Jobs lists the cartesian product of seeds and parameter values, in a
// fixed order, and keeps those of shard (0-based) of shards: job i belongs
// to shard i mod shards, so that every machine of an indexed batch job
// takes its share of seeds and values.
func Jobs(seeds []uint64, params []Param, shard, shards int) ([]Job, error) {
	if shards < 1 || shard < 0 || shard >= shards {
		return nil, fmt.Errorf("shard %d of %d: want 0 <= shard < shards", shard, shards)
	}
	combos := []map[string]string{{}}
	for _, p := range params {
		var next []map[string]string
		for _, c := range combos {
			for _, v := range p.Values {
				m := map[string]string{p.Name: v}
				for k, x := range c {
					m[k] = x
				}
				next = append(next, m)
			}
		}
		combos = next
	}
	var out []Job
	i := 0
	for _, c := range combos {
		for _, s := range seeds {
			if i%shards == shard {
				j := Job{Index: i, Seed: s}
				if len(c) > 0 {
					j.Params = c
				}
				out = append(out, j)
			}
			i++
		}
	}
	return out, nil
}

// Outcome is what one job measured, as Merge tabulates it.
type Outcome struct {
	Job
	OK       bool           `json:"ok"`
	Error    string         `json:"error,omitempty"`
	Failures string         `json:"failures,omitempty"`
	SimNs    int64          `json:"sim_time_ns"`
	Events   uint64         `json:"events"`
	Frames   uint64         `json:"frames"`
	Goodput  float64        `json:"goodput_bps"`
	MaxQueue int            `json:"max_queue_bytes"` // the deepest queue of the network
	Marked   uint64         `json:"ecn_marked"`
	CNPs     uint64         `json:"cnps"`
	Pauses   uint64         `json:"pfc_xoff"`
	Drops    uint64         `json:"drops"`
	FCT      []sim.FCTGroup `json:"fct,omitempty"`
}

// Run runs jobs of scenario sc with workers goroutines, writing each
// job's outcome.json (and, if dir is not empty, its whole result.json)
// under dir/NAME, and returns the outcomes in job order. each, when set,
// hears every outcome as it finishes.
func Run(sc *sim.Scenario, jobs []Job, workers int, dir string, each func(Outcome)) ([]Outcome, error) {
	out := make([]Outcome, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := runJob(sc, jobs[i])
				if dir != "" {
					if err := writeJob(dir, o); err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
					}
				}
				out[i] = o
				if each != nil {
					mu.Lock()
					each(o)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runJob runs one job on its own copy of the scenario.
func runJob(base *sim.Scenario, j Job) Outcome {
	o := Outcome{Job: j}
	sc := *base
	if len(j.Params) > 0 {
		cc := sim.CongestionSpec{}
		if base.Congestion != nil {
			cc = *base.Congestion
		}
		params := map[string]json.RawMessage{}
		for k, v := range cc.Params {
			params[k] = v
		}
		for k, v := range j.Params {
			params[k] = json.RawMessage(strconv.Quote(v))
		}
		cc.Params = params
		sc.Congestion = &cc
	}
	res, err := sim.Run(&sc, j.Seed)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	o.OK = res.OK()
	if !o.OK {
		o.Failures = res.Failures()
	}
	o.SimNs, o.Events, o.Frames, o.Goodput = res.SimTime, res.Events, res.Network.Sent, res.Goodput
	o.Marked, o.Drops = res.Network.ECNMarked, res.Network.Dropped()
	o.MaxQueue = res.Network.MaxQueueBytes
	for _, d := range res.Devices {
		o.CNPs += d["np_cnp_sent"]
	}
	for _, c := range res.PFC {
		o.Pauses += c.XOffSent
	}
	if res.FCT != nil {
		o.FCT = res.FCT.Groups
	}
	return o
}

func writeJob(dir string, o Outcome) error {
	d := filepath.Join(dir, o.Name())
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d, "outcome.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

// Load reads the outcomes under dirs (the output directories of one or
// more sweeps or shards), for Merge.
func Load(dirs ...string) ([]Outcome, error) {
	var out []Outcome
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*", "outcome.json"))
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("sweep: %w", err)
			}
			var o Outcome
			if err := json.Unmarshal(b, &o); err != nil {
				return nil, fmt.Errorf("sweep: %s: %w", p, err)
			}
			out = append(out, o)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}

// Merge tabulates outcomes: one row per parameter combination, with how
// many seeds ran and held their invariants, and the mean (min..max over
// seeds) of goodput, deepest queue, CNPs, PFC pauses, drops and the FCT
// slowdown of all flows (p50, p99).
func Merge(outs []Outcome) string {
	type row struct {
		key  string
		outs []Outcome
	}
	var rows []*row
	byKey := map[string]*row{}
	for _, o := range outs {
		k := paramKey(o.Params)
		r := byKey[k]
		if r == nil {
			r = &row{key: k}
			byKey[k] = r
			rows = append(rows, r)
		}
		r.outs = append(r.outs, o)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %5s %5s %22s %22s %18s %14s %10s %16s %16s\n", "params", "seeds", "ok",
		"goodput Gb/s", "max queue KB", "CNPs", "PFC XOFF", "drops", "FCT p50 (all)", "FCT p99 (all)")
	for _, r := range rows {
		ok := 0
		for _, o := range r.outs {
			if o.OK {
				ok++
			}
		}
		hasFCT := false
		for _, o := range r.outs {
			hasFCT = hasFCT || len(o.FCT) > 0
		}
		stat := func(f func(Outcome) float64, prec int) string {
			lo, hi, sum := 0.0, 0.0, 0.0
			for i, o := range r.outs {
				v := f(o)
				if i == 0 || v < lo {
					lo = v
				}
				if i == 0 || v > hi {
					hi = v
				}
				sum += v
			}
			p := strconv.Itoa(prec)
			return fmt.Sprintf("%."+p+"f (%."+p+"f..%."+p+"f)", sum/float64(len(r.outs)), lo, hi)
		}
		fctAll := func(p func(sim.FCTGroup) float64) func(Outcome) float64 {
			return func(o Outcome) float64 {
				for _, g := range o.FCT {
					if g.Name == "all" {
						return p(g)
					}
				}
				return 0
			}
		}
		name := r.key
		if name == "" {
			name = "(scenario's own)"
		}
		fmt.Fprintf(&b, "%-40s %5d %5d %22s %22s %18s %14s %10s %16s %16s\n", name, len(r.outs), ok,
			stat(func(o Outcome) float64 { return o.Goodput / 1e9 }, 1),
			stat(func(o Outcome) float64 { return float64(o.MaxQueue) / 1e3 }, 0),
			stat(func(o Outcome) float64 { return float64(o.CNPs) }, 0),
			stat(func(o Outcome) float64 { return float64(o.Pauses) }, 0),
			stat(func(o Outcome) float64 { return float64(o.Drops) }, 0),
			orDash(hasFCT, func() string { return stat(fctAll(func(g sim.FCTGroup) float64 { return g.P50 }), 2) }),
			orDash(hasFCT, func() string { return stat(fctAll(func(g sim.FCTGroup) float64 { return g.P99 }), 2) }))
	}
	return b.String()
}

func paramKey(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, " ")
}

// ParseSeeds reads "N" (seeds 1..N) or "A-B".
func ParseSeeds(s string) ([]uint64, error) {
	a, b, ok := strings.Cut(s, "-")
	lo, hi := uint64(1), uint64(0)
	var err error
	if ok {
		if lo, err = strconv.ParseUint(a, 10, 64); err == nil {
			hi, err = strconv.ParseUint(b, 10, 64)
		}
	} else {
		hi, err = strconv.ParseUint(s, 10, 64)
	}
	if err != nil || hi < lo || hi-lo >= 1_000_000 {
		return nil, fmt.Errorf("seeds %q: want N (1..N) or A-B, at most a million", s)
	}
	out := make([]uint64, 0, hi-lo+1)
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out, nil
}

// orDash is f() when ok, else "-".
func orDash(ok bool, f func() string) string {
	if !ok {
		return "-"
	}
	return f()
}
