package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/softroce/softroce/sim/netsim"
)

// Invariant names.
const (
	invIntegrity   = "integrity"     // payloads arrive as sent
	invExactlyOnce = "exactly-once"  // RC: every message once, in order
	invOrder       = "posting-order" // send completions in posting order per QP
	invModel       = "memory-model"  // READ/atomic results and final remote memory equal the reference model
	invCompletion  = "completion"    // completions carry the opcode and status the spec requires
	invStatus      = "status"        // no failed completion unless the scenario allows errors
	invLiveness    = "liveness"      // all work completes, within the drain bound after faults heal
	invCounters    = "counters"      // device counters agree with the trace
	invCorruption  = "corruption"    // no corrupted frame is accepted
	invCoverage    = "coverage"      // the run exercised what the scenario expects
	invCongestion  = "congestion"    // flows share fairly and queues stay within the bounds the scenario states
)

var allInvariants = []string{invIntegrity, invExactlyOnce, invOrder, invModel, invCompletion, invStatus, invLiveness, invCounters, invCorruption, invCoverage, invCongestion}

// maxDetails bounds the violation messages kept per invariant.
const maxDetails = 10

// Verdict is the outcome of one invariant.
type Verdict struct {
	Name       string   `json:"name"`
	OK         bool     `json:"ok"`
	Violations int      `json:"violations"`
	Details    []string `json:"details,omitempty"`
}

// Latency holds completion-latency percentiles in simulated nanoseconds.
type Latency struct {
	Count int   `json:"count"`
	Min   int64 `json:"min_ns"`
	P50   int64 `json:"p50_ns"`
	P90   int64 `json:"p90_ns"`
	P99   int64 `json:"p99_ns"`
	P999  int64 `json:"p999_ns"`
	Max   int64 `json:"max_ns"`
	Mean  int64 `json:"mean_ns"`
}

// LinkResult is one link direction's counters, and on a PFC port how long
// PAUSEs stopped it and how many it obeyed.
type LinkResult struct {
	Name string `json:"name"`
	netsim.PipeCounters
	PausedNs int64  `json:"paused_ns,omitempty"`
	Pauses   uint64 `json:"pauses,omitempty"`
}

// Result is what a run did and whether its invariants held.
type Result struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	// SimTime is the simulated time at the end of the run (ns).
	SimTime int64 `json:"sim_time_ns"`
	// Events is how many events the loop ran.
	Events uint64 `json:"events"`
	Flows  int    `json:"flows"`
	// Operations by final status ("SUCCESS", "RETRY_EXC_ERR", ...) and by
	// kind; Posted is how many were posted, Unfinished how many had no
	// completion when the run ended.
	Posted     uint64            `json:"posted"`
	Completed  uint64            `json:"completed"`
	Unfinished uint64            `json:"unfinished"`
	ByStatus   map[string]uint64 `json:"by_status"`
	ByOp       map[string]uint64 `json:"by_op"`
	// Bytes is the payload of successful operations; Goodput is Bytes per
	// simulated second between the first post and the last completion.
	Bytes   uint64  `json:"bytes"`
	Goodput float64 `json:"goodput_bps"`
	Latency Latency `json:"latency"`
	// Receives completed at responders (successful, failed/flushed); UC and
	// UD messages never received; UC and UD messages received out of order
	// or twice; short UC and UD messages that carry no sequence number and
	// so were not checked.
	Recvs        uint64 `json:"recvs"`
	RecvErrors   uint64 `json:"recv_errors"`
	LostUC       uint64 `json:"lost_uc_messages"`
	LostUD       uint64 `json:"lost_ud_messages"`
	Reordered    uint64 `json:"reordered_or_dup"`
	Unidentified uint64 `json:"unidentified"`
	// Transport events from the devices' counters, summed over hosts.
	Retransmits uint64 `json:"retransmits"`
	RNRNaksSent uint64 `json:"rnr_naks_sent"`
	RNRNaksRcvd uint64 `json:"rnr_naks_rcvd"`
	// NAKs by kind, counted on the wire (frames hosts sent).
	NAKs     map[string]uint64            `json:"naks"`
	Frames   uint64                       `json:"frames"` // frames hosts sent
	Links    []LinkResult                 `json:"links"`
	Network  netsim.PipeCounters          `json:"network"`
	Devices  map[string]map[string]uint64 `json:"devices,omitempty"`
	LastHeal int64                        `json:"last_heal_ns"`
	LastDone int64                        `json:"last_completion_ns"`
	EventLog string                       `json:"event_log_sha256"`
	LogLines uint64                       `json:"event_log_lines"`
	Verdicts []Verdict                    `json:"invariants"`
	// Report holds the run's time series, when Options.Report asked.
	Report *Report `json:"report,omitempty"`
	// FCT holds the flow completion times of flows workloads (fct.go).
	FCT *FCTResult `json:"fct,omitempty"`
	// PFC holds the flow-control counters of the switches that have it.
	PFC map[string]netsim.PFCCounters `json:"pfc,omitempty"`
	// Deadlocks lists the PFC deadlocks found: cycles of paused ports,
	// each waiting on the next, that held across two checks.
	Deadlocks []Deadlock `json:"pfc_deadlocks,omitempty"`
}

// Deadlock is a PFC deadlock: when it was found and its cycle of ports.
type Deadlock struct {
	At    int64    `json:"at_ns"`
	Cycle []string `json:"cycle"`
}

// OK reports whether every invariant held.
func (r *Result) OK() bool {
	for _, v := range r.Verdicts {
		if !v.OK {
			return false
		}
	}
	return true
}

// Failures describes the invariants that failed, one per line.
func (r *Result) Failures() string {
	var b strings.Builder
	for _, v := range r.Verdicts {
		if v.OK {
			continue
		}
		fmt.Fprintf(&b, "%s: %d violation(s)\n", v.Name, v.Violations)
		for _, d := range v.Details {
			fmt.Fprintf(&b, "  %s\n", d)
		}
	}
	return b.String()
}

// Summary is a short human-readable account of the run.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s seed %d: %s simulated, %d events, %d flows\n",
		r.Scenario, r.Seed, netsim.Time(r.SimTime), r.Events, r.Flows)
	fmt.Fprintf(&b, "ops: %d posted, %d completed, %d unfinished; by status %s\n",
		r.Posted, r.Completed, r.Unfinished, formatCounts(r.ByStatus))
	fmt.Fprintf(&b, "bytes %d, goodput %.3f Gb/s; latency p50 %s p99 %s max %s\n",
		r.Bytes, r.Goodput/1e9, netsim.Time(r.Latency.P50), netsim.Time(r.Latency.P99), netsim.Time(r.Latency.Max))
	fmt.Fprintf(&b, "frames %d; retransmits %d; RNR NAKs %d sent %d received; NAKs %s\n",
		r.Frames, r.Retransmits, r.RNRNaksSent, r.RNRNaksRcvd, formatCounts(r.NAKs))
	n := r.Network
	fmt.Fprintf(&b, "network: %d sent, %d delivered, dropped %d queue %d loss %d burst %d partition, %d corrupted, %d duplicated, %d reordered\n",
		n.Sent, n.Delivered, n.DropQueue, n.DropLoss, n.DropBurst, n.DropPartition, n.Corrupted, n.Duplicated, n.Reordered)
	if line := r.congestionLine(); line != "" {
		b.WriteString(line)
	}
	for _, v := range r.Verdicts {
		state := "ok"
		if !v.OK {
			state = fmt.Sprintf("FAILED (%d)", v.Violations)
		}
		fmt.Fprintf(&b, "  %-14s %s\n", v.Name, state)
	}
	if r.FCT != nil {
		b.WriteString(r.FCT.Summary())
	}
	fmt.Fprintf(&b, "event log sha256 %s\n", r.EventLog)
	return b.String()
}

func formatCounts(m map[string]uint64) string {
	if len(m) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// percentiles fills a Latency from samples, which it reorders. It selects
// each percentile's sample rather than sorting them all: a run of a
// thousand QPs has tens of thousands of samples, and sorting them was a
// percent of its time.
func percentiles(s []int64) Latency {
	if len(s) == 0 {
		return Latency{}
	}
	at := func(p float64) int { return int(p*float64(len(s)-1) + 0.5) }
	l := Latency{Count: len(s), Min: s[0], Max: s[0]}
	var sum int64
	for _, v := range s {
		sum += v
		l.Min, l.Max = min(l.Min, v), max(l.Max, v)
	}
	l.Mean = sum / int64(len(s))
	// Each selection leaves what is above its sample to its right, where
	// the next, higher one is.
	lo := 0
	for _, x := range []struct {
		p   float64
		out *int64
	}{{0.5, &l.P50}, {0.9, &l.P90}, {0.99, &l.P99}, {0.999, &l.P999}} {
		i := at(x.p)
		selectNth(s[lo:], i-lo)
		*x.out = s[i]
		lo = i
	}
	return l
}

// selectNth reorders s so that s[k] is the value sorting would put there,
// with nothing greater before it and nothing smaller after it
// (quickselect: median-of-three pivots, Hoare partitioning, which splits
// runs of equal values evenly).
func selectNth(s []int64, k int) {
	for len(s) > 16 {
		m := len(s) / 2
		// The median of the first, middle and last as the pivot.
		if s[m] < s[0] {
			s[m], s[0] = s[0], s[m]
		}
		if s[len(s)-1] < s[m] {
			s[len(s)-1], s[m] = s[m], s[len(s)-1]
			if s[m] < s[0] {
				s[m], s[0] = s[0], s[m]
			}
		}
		pivot := s[m]
		i, j := -1, len(s)
		for {
			for i++; s[i] < pivot; i++ {
			}
			for j--; s[j] > pivot; j-- {
			}
			if i >= j {
				break
			}
			s[i], s[j] = s[j], s[i]
		}
		// s[:j+1] <= pivot <= s[j+1:].
		if k <= j {
			s = s[:j+1]
		} else {
			s, k = s[j+1:], k-(j+1)
		}
	}
	slices.Sort(s)
}

// congestionLine summarizes ECN, DCQCN and PFC activity, or is empty when
// there was none.
func (r *Result) congestionLine() string {
	var cnps, cuts uint64
	for _, d := range r.Devices {
		cnps += d["np_cnp_sent"]
		cuts += d["rp_cnp_handled"]
	}
	var pfc netsim.PFCCounters
	for _, c := range r.PFC {
		pfc.XOffSent += c.XOffSent
		pfc.XOnSent += c.XOnSent
		pfc.DropHeadroom += c.DropHeadroom
		pfc.Storms += c.Storms
		pfc.DropWatchdog += c.DropWatchdog
	}
	if r.Network.ECNMarked == 0 && cnps == 0 && r.PFC == nil {
		return ""
	}
	s := fmt.Sprintf("congestion: %d ECN-marked, %d CNPs sent, %d handled", r.Network.ECNMarked, cnps, cuts)
	if r.PFC != nil {
		s += fmt.Sprintf("; PFC %d XOFF %d XON, %d headroom drops, %d storms (%d dropped), %d deadlocks",
			pfc.XOffSent, pfc.XOnSent, pfc.DropHeadroom, pfc.Storms, pfc.DropWatchdog, len(r.Deadlocks))
	}
	return s + "\n"
}
