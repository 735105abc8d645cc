package sim

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/qp"
)

// Scenario is a simulation: a topology, faults over time and workloads. It
// is read from JSON (see the package documentation for the format).
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Duration bounds the simulated time: work still outstanding then fails
	// the liveness invariant. Default 1s.
	Duration Duration `json:"duration,omitempty"`
	// Drain is how long after the last fault heals all work must complete
	// (the liveness bound). Default: the rest of Duration.
	Drain Duration `json:"drain,omitempty"`
	// AllowErrors accepts failed completions (a partition longer than the
	// retry budget ends in RETRY_EXC_ERR, as the spec requires); without it
	// every operation must succeed.
	AllowErrors bool `json:"allow_errors,omitempty"`
	// MTU is the default IP MTU of hosts (default 1500 → path MTU 1024).
	MTU int `json:"mtu,omitempty"`
	// Hosts lists hosts by name; HostCount adds h0..h{n-1} after them.
	Hosts     []HostSpec   `json:"hosts,omitempty"`
	HostCount int          `json:"host_count,omitempty"`
	Switches  []SwitchSpec `json:"switches,omitempty"`
	// Links joins hosts and switches. Star, when set, adds one switch and a
	// link from every host to it.
	Links []LinkSpec `json:"links,omitempty"`
	Star  *StarSpec  `json:"star,omitempty"`
	// FatTree and LeafSpine generate a data-centre topology with its hosts
	// (topology.go); switches forward by ECMP where paths are equal.
	FatTree   *FatTreeSpec   `json:"fat_tree,omitempty"`
	LeafSpine *LeafSpineSpec `json:"leaf_spine,omitempty"`
	// HPCCTopology imports the HPCC ns-3 simulator's topology file
	// (hpcc.go).
	HPCCTopology *HPCCTopologySpec `json:"hpcc_topology,omitempty"`
	Faults       []FaultSpec       `json:"faults,omitempty"`
	Partitions   []PartitionSpec   `json:"partitions,omitempty"`
	// PFCStorms are hosts whose NICs pause their switch port without end.
	PFCStorms []StormSpec    `json:"pfc_storms,omitempty"`
	Workloads []WorkloadSpec `json:"workloads"`
	// Congestion turns on the hosts' ECN, CNPs and DCQCN (congestion.go).
	Congestion *CongestionSpec `json:"congestion,omitempty"`
	// FastRecovery gives the hosts softroce's faster loss recovery
	// (rxe.Config.FastRecovery); without it they retransmit and NAK when
	// kernel rxe's would.
	FastRecovery bool `json:"fast_recovery,omitempty"`
	// Parallel runs the hosts and the switches as two shards of the
	// network, each on a core of its own where there are two (parallel.go):
	// the run is as deterministic as any, and the same on one core or two,
	// but simultaneous events in different shards run in another order
	// than in a serial run, so its event log and details differ from the
	// same scenario's without Parallel.
	Parallel bool       `json:"parallel,omitempty"`
	Expect   ExpectSpec `json:"expect,omitempty"`
}

// ExpectSpec states what a run must show beyond the invariants.
type ExpectSpec struct {
	// Statuses lists the completion statuses allowed (names as
	// qp.WCStatus prints them); empty means SUCCESS only, or any status with
	// AllowErrors.
	Statuses []string `json:"statuses,omitempty"`
	// Sometimes lists events the run must exercise at least once, to show
	// that its faults reached the code they are meant to test:
	// retransmit, rnr, nak_seq, duplicate_request, corrupt, drop_queue,
	// partition, retry_exceeded, uc_loss, ud_loss.
	Sometimes []string `json:"sometimes,omitempty"`
	// Fair lists windows of virtual time over which the flows that ran
	// throughout must share: Jain's fairness index of their sending rates
	// (payload on the wire) at least Jain.
	Fair []FairSpec `json:"fair,omitempty"`
	// Queues bounds link directions' output queues.
	Queues []QueueSpec `json:"queues,omitempty"`
	// Rates bounds single flows' sending rates over windows of time.
	Rates []RateBound `json:"rates,omitempty"`
	// FCT bounds the FCT slowdown of a flows workload's size groups
	// ("0-50%", "50-80%", "80-95%", "95-100%", "all").
	FCT []FCTBound `json:"fct,omitempty"`
}

// RateBound bounds one flow's mean sending rate (payload on the wire) over
// [From, Until]: at least Min, at most Max (0: unbounded).
type RateBound struct {
	Flow  string    `json:"flow"`
	From  Duration  `json:"from"`
	Until Duration  `json:"until"`
	Min   Bandwidth `json:"min,omitempty"`
	Max   Bandwidth `json:"max,omitempty"`
}

// FCTBound bounds one size group's slowdown percentiles (0: unbounded).
type FCTBound struct {
	Group  string  `json:"group"`
	P50Max float64 `json:"p50_max,omitempty"`
	P95Max float64 `json:"p95_max,omitempty"`
	P99Max float64 `json:"p99_max,omitempty"`
}

// FairSpec is a fairness expectation over [From, Until].
type FairSpec struct {
	From  Duration `json:"from"`
	Until Duration `json:"until"`
	Jain  float64  `json:"jain"`
	// MinTotal, when set, is the least their rates may add up to (bit/s):
	// sharing by all going slow is not sharing.
	MinTotal Bandwidth `json:"min_total,omitempty"`
	// Flows, when set, names the flows that must share (as the report
	// names them: workload/from->to/k); by default, every flow that
	// completed work both before From and after Until.
	Flows []string `json:"flows,omitempty"`
}

// QueueSpec bounds one link direction's queue ("A->B"): its largest depth
// over the run, and, from Settle on, its depth at every report sample.
type QueueSpec struct {
	Link   string   `json:"link"`
	Max    ByteSize `json:"max,omitempty"`
	Settle Duration `json:"settle,omitempty"`
	Below  ByteSize `json:"below,omitempty"`
}

// HostSpec is one host. IP defaults to 10.0.i/16 addressing; MAC to
// 02:00:00:00:hi:lo of the host index.
type HostSpec struct {
	Name string `json:"name"`
	IP   string `json:"ip,omitempty"`
	MAC  string `json:"mac,omitempty"`
	MTU  int    `json:"mtu,omitempty"`
}

// SwitchSpec is one switch.
type SwitchSpec struct {
	Name    string   `json:"name"`
	Latency Duration `json:"latency,omitempty"` // forwarding latency
	PFC     *PFCSpec `json:"pfc,omitempty"`     // priority flow control (lossless ports)
}

// PFCSpec turns on a switch's priority flow control (netsim.PFC): an
// ingress port with XOff bytes queued pauses its upstream, XOn resumes it,
// Headroom absorbs what is in flight meanwhile. Quanta is the pause time
// (512-bit-time units; 0: 65535).
type PFCSpec struct {
	XOff     ByteSize `json:"xoff"`
	XOn      ByteSize `json:"xon"`
	Headroom ByteSize `json:"headroom"`
	Quanta   int      `json:"quanta,omitempty"`
	// Priorities lists the lossless priorities (0-7), each with its own
	// queue, XOFF count and PAUSE (a frame's priority is its DSCP/8; see
	// WorkloadSpec.DSCP); every switch gives the same list. Empty: one
	// lossless class for every priority below 6, paused as priority 3.
	Priorities []int `json:"priorities,omitempty"`
	// WatchdogDetect and WatchdogRestore turn on the PFC watchdog: a port
	// paused without a break this long, frames waiting, is in a storm;
	// for WatchdogRestore its PAUSEs are ignored and its frames dropped.
	WatchdogDetect  Duration `json:"watchdog_detect,omitempty"`
	WatchdogRestore Duration `json:"watchdog_restore,omitempty"`
}

// StormSpec makes a host's NIC send PAUSEs without end from From until
// Until (0: the end), refreshing them before they run out, as a NIC whose
// receive path is stuck does: a PFC storm.
type StormSpec struct {
	Host  string   `json:"host"`
	From  Duration `json:"from"`
	Until Duration `json:"until,omitempty"`
}

// PipeSpec is the shape of one link direction.
type PipeSpec struct {
	Bandwidth   Bandwidth `json:"bandwidth,omitempty"`    // default 10Gbps
	Delay       Duration  `json:"delay,omitempty"`        // propagation delay, default 1us
	Queue       ByteSize  `json:"queue,omitempty"`        // output queue bound in bytes; 0: unbounded
	QueueFrames int       `json:"queue_frames,omitempty"` // output queue bound in frames; 0: unbounded
	ECN         *REDSpec  `json:"ecn,omitempty"`          // ECN marking (RED) on the output queue
}

// LinkSpec joins nodes A and B. PipeSpec applies to both directions unless
// BA overrides the B->A direction; Fault (a fault.Spec string) applies to
// both directions for the whole run unless FaultBA overrides B->A.
type LinkSpec struct {
	A, B string
	PipeSpec
	BA      *PipeSpec `json:"ba,omitempty"`
	Fault   string    `json:"fault,omitempty"`
	FaultBA *string   `json:"fault_ba,omitempty"`
}

// StarSpec puts every host on one switch.
type StarSpec struct {
	Switch string `json:"switch,omitempty"` // default "sw0"
	SwitchSpec
	PipeSpec
	// Downlink, when set, shapes the switch->host direction (the switch's
	// output queues) differently from host->switch.
	Downlink *PipeSpec `json:"downlink,omitempty"`
	Fault    string    `json:"fault,omitempty"`
}

// FaultSpec applies a fault model to a link between From and Until
// (Until 0: to the end). Link is "A-B" (both directions), "A->B" or "*"
// (every link direction).
type FaultSpec struct {
	Link  string   `json:"link"`
	Spec  string   `json:"spec"`
	From  Duration `json:"from,omitempty"`
	Until Duration `json:"until,omitempty"`
}

// PartitionSpec cuts a link (as FaultSpec names them) at Start and heals it
// at Heal (0: never).
type PartitionSpec struct {
	Link  string   `json:"link"`
	Start Duration `json:"start"`
	Heal  Duration `json:"heal,omitempty"`
}

// WorkloadSpec is traffic between hosts: for every (from, to) pair of the
// cross product of From and To (a host never talks to itself), QPs queue
// pairs, each running Count operations.
type WorkloadSpec struct {
	Name string `json:"name,omitempty"`
	// From and To are host names; "*" is every host.
	From []string `json:"from"`
	To   []string `json:"to"`
	// QPs is the number of QP pairs per host pair (default 1).
	QPs       int    `json:"qps,omitempty"`
	Transport string `json:"transport,omitempty"` // RC (default), UC or UD
	// Ops weighs operations: SEND, SEND_IMM, WRITE, WRITE_IMM, READ, CAS,
	// FADD. Default {"SEND": 1}.
	Ops  map[string]int `json:"ops,omitempty"`
	Size SizeSpec       `json:"size"`
	// Count is the operations each QP posts (default 100).
	Count int `json:"count,omitempty"`
	// Window bounds operations outstanding per QP (default 1). Rate, when
	// set, posts operations at this many per second per QP (still within
	// Window).
	Window int      `json:"window,omitempty"`
	Rate   float64  `json:"rate,omitempty"`
	Start  Duration `json:"start,omitempty"`
	// RecvDepth is how many receives the responder keeps posted per QP
	// (default Window+1, or none when no operation consumes one: a
	// workload without SEND, SEND_IMM and WRITE_IMM). RecvDelay, when
	// set, makes the responder post each replacement receive this long
	// after a receive completes: an RNR storm when it is slow.
	RecvDepth int      `json:"recv_depth,omitempty"`
	RecvDelay Duration `json:"recv_delay,omitempty"`
	// MTU is the QPs' path MTU (default: the largest that fits the hosts).
	MTU int `json:"mtu,omitempty"`
	// Timeout, RetryCnt and RNRRetry set the requester's attributes
	// (defaults 14, 7, 7; rnr_retry 7 retries forever). MinRNRTimer is the responder's RNR timer code
	// (default 1: 0.01 ms).
	Timeout     *int `json:"timeout,omitempty"`
	RetryCnt    *int `json:"retry_cnt,omitempty"`
	RNRRetry    *int `json:"rnr_retry,omitempty"`
	MinRNRTimer *int `json:"min_rnr_timer,omitempty"`
	// MaxRdAtomic bounds the READ and atomic requests a requester keeps
	// outstanding, and the responder's resources for them (default 16).
	MaxRdAtomic *int `json:"max_rd_atomic,omitempty"`
	// DSCP marks the workload's packets (0-63, default 0): its QPs'
	// address vectors carry traffic class DSCP<<2. Switches map DSCP/8 to
	// a PFC priority (26, AF31, is priority 3, where RoCE usually runs).
	DSCP *int `json:"dscp,omitempty"`
	// Flows, when set, makes the workload a stream of flows drawn from a
	// flow-size CDF at a target load (flows.go) instead of QP pairs running
	// Count operations each; From and To are the sources and destinations.
	Flows *FlowsSpec `json:"flows,omitempty"`
	// Connect is how the QPs are connected: "" (directly, as if their
	// numbers had been traded out of band) or "cm": the connection
	// manager's REQ, REP and RTU on QP 1, through the simulated network and
	// its faults, before the operations start (RC and UC).
	Connect string `json:"connect,omitempty"`
}

// SizeSpec draws message sizes: Fixed, a uniform range [Min, Max], or a
// uniform choice from List. The zero value is 1024 bytes. Atomics are always
// 8 bytes.
type SizeSpec struct {
	Fixed int   `json:"fixed,omitempty"`
	Min   int   `json:"min,omitempty"`
	Max   int   `json:"max,omitempty"`
	List  []int `json:"list,omitempty"`
}

// Load reads a scenario from a JSON file, and the files it names (an HPCC
// topology, flow files), relative to it.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := parse(b, func(name string) ([]byte, error) {
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(path), name)
		}
		return os.ReadFile(name)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a scenario from JSON, rejecting unknown fields and trailing
// data with the line and column of the fault, and checks it. A scenario
// that names files needs Load.
func Parse(b []byte) (*Scenario, error) {
	return parse(b, func(name string) ([]byte, error) {
		return nil, fmt.Errorf("%s: a scenario that names files is read with Load, which finds them next to it", name)
	})
}

// parse is Parse with a way to read the files the scenario names.
func parse(b []byte, read func(name string) ([]byte, error)) (*Scenario, error) {
	var s Scenario
	if err := decodeStrict(b, &s); err != nil {
		return nil, fmt.Errorf("parse scenario: %w", err)
	}
	if h := s.HPCCTopology; h != nil {
		data, err := read(h.File)
		if err != nil {
			return nil, fmt.Errorf("hpcc_topology: %w", err)
		}
		h.data = data
	}
	for i := range s.Workloads {
		if f := s.Workloads[i].Flows; f != nil && f.File != "" {
			data, err := read(f.File)
			if err != nil {
				return nil, fmt.Errorf("workload %d: flows: %w", i, err)
			}
			f.data = data
		}
	}
	if x, err := s.withTopology(); err != nil {
		return nil, err
	} else {
		s = *x
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Workload limits: a window or receive depth, and a message, beyond which a
// scenario is surely a typo (and would allocate absurd memory).
const (
	maxWindow  = 4096
	maxMessage = 1 << 24
	maxCount   = 10_000_000
	maxQPs     = 1 << 16
	maxHosts   = 1 << 14 // default addresses number hosts in 16 bits

	// Limits on the products that drive a run's memory and time, each
	// field being within its own limit: QP pairs over all workloads (host
	// pairs x qps), bytes in flight (QP pairs x window x largest message,
	// which the hosts' buffers hold) and operations (QP pairs x count).
	// An operation weight is bounded so that a workload's sum cannot
	// overflow.
	maxQPPairs    = 1 << 16
	maxInFlight   = 1 << 30
	maxOperations = 100_000_000
	maxWeight     = 1 << 20
)

// coveragePoints are the names Expect.Sometimes accepts.
var coveragePoints = []string{"retransmit", "rnr", "nak_seq", "duplicate_request", "corrupt",
	"drop_queue", "partition", "retry_exceeded", "uc_loss", "ud_loss", "cm_retransmit",
	"ecn_marked", "cnp", "rate_cut", "pfc_pause", "drop_headroom", "pfc_storm", "pfc_deadlock"}

// wcStatusNames lists the completion status names.
func wcStatusNames() []string {
	var out []string
	for st := qp.WCSuccess; st <= qp.WCGeneralErr; st++ {
		out = append(out, st.String())
	}
	return out
}

// opNames are the operations a workload may weigh.
var opNames = []string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "CAS", "FADD"}

// productTotals sums the products of checkProducts over the workloads.
type productTotals struct{ pairs, inFlight, ops int64 }

// checkProducts bounds what a workload's fields drive together, each one
// being within its own limit (check): QP pairs, bytes in flight and
// operations, summed over the scenario's workloads in t.
func (s *Scenario) checkProducts(name string, w WorkloadSpec, t *productTotals) error {
	hosts := int64(s.HostCount + len(s.Hosts))
	side := func(l []string) int64 {
		if contains(l, "*") {
			return hosts
		}
		return int64(len(l))
	}
	qps := int64(max(w.QPs, 1))
	pairs := side(w.From) * side(w.To) * qps
	size := int64(max(w.Size.Fixed, w.Size.Max))
	for _, v := range w.Size.List {
		size = max(size, int64(v))
	}
	count := int64(w.Count)
	if count == 0 {
		count = 100
	}
	// Checked in this order, each product fits in 64 bits: pairs is at
	// most maxHosts^2 x maxQPs, and bounded before it multiplies.
	t.pairs += pairs
	if t.pairs > maxQPPairs {
		return fmt.Errorf("workload %s: %d QP pairs (host pairs x qps; %d in the scenario so far): at most %d in a scenario",
			name, pairs, t.pairs, maxQPPairs)
	}
	t.inFlight += pairs * int64(max(w.Window, 1)) * max(size, 1)
	t.ops += pairs * count
	switch {
	case t.inFlight > maxInFlight:
		return fmt.Errorf("workload %s: QP pairs x window x largest message = %d MiB in flight (%d MiB in the scenario so far): at most %d MiB in a scenario",
			name, (pairs*int64(max(w.Window, 1))*max(size, 1))>>20, t.inFlight>>20, maxInFlight>>20)
	case t.ops > maxOperations:
		return fmt.Errorf("workload %s: QP pairs x count = %d operations (%d in the scenario so far): at most %d in a scenario",
			name, pairs*count, t.ops, maxOperations)
	}
	return nil
}

// check validates the scenario (without building it).
func (s *Scenario) check() error {
	if s.HostCount < 0 || s.HostCount+len(s.Hosts) > maxHosts {
		return fmt.Errorf("at most %d hosts", maxHosts)
	}
	var totals productTotals
	for i, w := range s.Workloads {
		name := w.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		tr := strings.ToUpper(w.Transport)
		switch tr {
		case "", "RC", "UC", "UD":
		default:
			return fmt.Errorf("workload %s: unknown transport %q", name, w.Transport)
		}
		if w.QPs < 0 || w.Count < 0 || w.Window < 0 || w.RecvDepth < 0 {
			return fmt.Errorf("workload %s: qps, count, window and recv_depth cannot be negative", name)
		}
		for _, a := range []struct {
			name   string
			v      *int
			lo, hi int
		}{{"timeout", w.Timeout, 0, 31}, {"retry_cnt", w.RetryCnt, 0, 7}, {"rnr_retry", w.RNRRetry, 0, 7},
			{"min_rnr_timer", w.MinRNRTimer, 0, 31}, {"max_rd_atomic", w.MaxRdAtomic, 1, 16}, {"dscp", w.DSCP, 0, 63}} {
			if a.v != nil && (*a.v < a.lo || *a.v > a.hi) {
				return fmt.Errorf("workload %s: %s %d outside %d..%d", name, a.name, *a.v, a.lo, a.hi)
			}
		}
		if w.MTU != 0 && !qp.MTU(w.MTU).Valid() {
			return fmt.Errorf("workload %s: mtu %d is not 256, 512, 1024, 2048 or 4096", name, w.MTU)
		}
		if w.Count > maxCount || w.QPs > maxQPs {
			return fmt.Errorf("workload %s: count is at most %d and qps at most %d", name, maxCount, maxQPs)
		}
		if w.Window > maxWindow || w.RecvDepth > maxWindow {
			return fmt.Errorf("workload %s: window and recv_depth are at most %d", name, maxWindow)
		}
		for _, v := range w.Size.List {
			if v < 0 || v > maxMessage {
				return fmt.Errorf("workload %s: size %d outside 0..%d", name, v, maxMessage)
			}
		}
		if w.Size.Fixed > maxMessage || w.Size.Max > maxMessage {
			return fmt.Errorf("workload %s: sizes are at most %d", name, maxMessage)
		}
		ops := make([]string, 0, len(w.Ops))
		for op := range w.Ops {
			ops = append(ops, op)
		}
		sort.Strings(ops) // report the same error whatever the map order
		for _, op := range ops {
			wt := w.Ops[op]
			if !contains(opNames, op) {
				return fmt.Errorf("workload %s: unknown operation %q (want one of %s)", name, op, strings.Join(opNames, ", "))
			}
			if wt < 0 || wt > maxWeight {
				return fmt.Errorf("workload %s: weight %d for %s outside 0..%d", name, wt, op, maxWeight)
			}
			if wt > 0 && !opAllowed(tr, op) {
				return fmt.Errorf("workload %s: %s is not possible on %s", name, op, trOrRC(tr))
			}
		}
		if len(w.From) == 0 || len(w.To) == 0 {
			return fmt.Errorf("workload %s: from and to are required", name)
		}
		sz := w.Size
		if sz.Min > sz.Max || sz.Fixed < 0 || sz.Min < 0 {
			return fmt.Errorf("workload %s: bad size %+v", name, sz)
		}
		if w.Rate < 0 {
			return fmt.Errorf("workload %s: negative rate", name)
		}
		if w.Flows != nil {
			// A flow per arrival, not per host pair: the arrivals are
			// bounded as they are drawn (maxFlows).
			continue
		}
		if err := s.checkProducts(name, w, &totals); err != nil {
			return err
		}
	}
	for _, name := range s.Expect.Sometimes {
		if !contains(coveragePoints, name) {
			return fmt.Errorf("expect: unknown coverage point %q (want one of %s)", name, strings.Join(coveragePoints, ", "))
		}
	}
	for _, st := range s.Expect.Statuses {
		if !contains(wcStatusNames(), st) {
			return fmt.Errorf("expect: unknown completion status %q", st)
		}
	}
	for _, f := range s.Faults {
		if _, err := fault.Parse(f.Spec); err != nil {
			return fmt.Errorf("fault on %s: %w", f.Link, err)
		}
		if f.Until != 0 && f.Until < f.From {
			return fmt.Errorf("fault on %s: until before from", f.Link)
		}
	}
	for _, p := range s.Partitions {
		if p.Heal != 0 && p.Heal < p.Start {
			return fmt.Errorf("partition of %s: heal before start", p.Link)
		}
	}
	if s.MTU < 0 {
		return fmt.Errorf("negative mtu")
	}
	for _, h := range s.Hosts {
		if h.MTU < 0 {
			return fmt.Errorf("host %s: negative mtu", h.Name)
		}
		if h.IP != "" {
			if _, err := netip.ParseAddr(h.IP); err != nil {
				return fmt.Errorf("host %s: %w", h.Name, err)
			}
		}
	}
	return nil
}

func trOrRC(tr string) string {
	if tr == "" {
		return "RC"
	}
	return tr
}

// opAllowed reports whether a transport carries an operation.
func opAllowed(tr, op string) bool {
	switch trOrRC(tr) {
	case "RC":
		return true
	case "UC":
		return op == "SEND" || op == "SEND_IMM" || op == "WRITE" || op == "WRITE_IMM"
	case "UD":
		return op == "SEND" || op == "SEND_IMM"
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
