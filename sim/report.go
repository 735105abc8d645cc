package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/sim/netsim"
)

// Report is what a run's time series show: per flow, the bytes its
// operations completed and its sending rate, and per link direction, its
// output queue, each sampled once per Interval of virtual time. It is
// gathered only when Options.Report asks for it; sampling reads state
// between events and adds none, so a run's event log is the same with or
// without it.
type Report struct {
	Interval int64         `json:"interval_ns"`
	Samples  int           `json:"samples"`
	Flows    []FlowReport  `json:"flows"`
	Queues   []QueueReport `json:"queues"`
}

// FlowReport is one flow (a QP pair running a workload) over time.
type FlowReport struct {
	Name  string `json:"name"`
	From  string `json:"from"`
	To    string `json:"to"`
	Ops   int    `json:"ops"`
	Bytes uint64 `json:"bytes"`
	// Start is when its first operation was posted, End when its last
	// completed (ns; -1: never).
	Start int64 `json:"start_ns"`
	End   int64 `json:"end_ns"`
	// Throughput is the payload its operations completed in each interval,
	// in bit/s: goodput, in steps of whole operations.
	Throughput []float64 `json:"throughput_bps"`
	// Sent is the payload its requester put on the wire in each interval
	// (retransmissions included), in bit/s: the sending rate congestion
	// control acts on.
	Sent []float64 `json:"sent_bps"`
	// Rate is its requester's rate-limiter setting at each sample (bit/s;
	// 0: not rate limited, the line rate); Target and Alpha are its
	// reaction point's target rate and α then (DCQCN's Rt and α; 0 when
	// not rate limited): the control state behind each rate change.
	Rate   []int64   `json:"rate_bps"`
	Target []int64   `json:"target_bps"`
	Alpha  []float64 `json:"alpha"`
}

// QueueReport is one link direction's output queue over time.
type QueueReport struct {
	Link      string `json:"link"`
	MaxBytes  int    `json:"max_bytes"`
	ECNMarked uint64 `json:"ecn_marked"`
	Dropped   uint64 `json:"drop_queue"`
	// PausedNs is how long PAUSEs stopped this port (PFC).
	PausedNs int64 `json:"paused_ns,omitempty"`
	// Bytes is the queue's depth at each sample.
	Bytes []int `json:"bytes"`
}

// reporter samples a run.
type reporter struct {
	run      *runState
	interval netsim.Time
	next     netsim.Time
	rep      Report
	last     []uint64 // per flow: bytes done at the previous sample
	// Payload bytes each flow's requester sent in the current interval,
	// found by (sending host, receiving host, destination QPN).
	// Keys without pointers, read straight from the frame: with netip.Addr
	// and an array key, the two lookups were 3% of a run.
	wire   []uint64
	byDest map[uint64]int   // destKey
	hostIP map[[16]byte]int // a host's address in its 16-byte form
	hosts  uint64
}

// destKey is byDest's key for a request from host from to QP qpn of host to.
func (r *reporter) destKey(from, to int, qpn uint32) uint64 {
	return (uint64(from)*r.hosts+uint64(to))<<24 | uint64(qpn&0xFFFFFF)
}

// sent counts a frame a host emitted: the payload of a request to a
// flow's responder.
func (r *reporter) sent(hr *hostRT, fr *packet.Frame) {
	b := packet.BTH(fr.Transport)
	var dst [16]byte
	if fr.IsIPv4() {
		dst[10], dst[11] = 0xff, 0xff // the IPv4-mapped form, as As16 gives it
		copy(dst[12:], fr.IP[16:20])
	} else {
		copy(dst[:], fr.IP[24:40])
	}
	to, ok := r.hostIP[dst]
	if !ok {
		return
	}
	i, ok := r.byDest[r.destKey(hr.info.Index, to, b.DestQP())]
	if !ok {
		return
	}
	n := len(fr.Transport) - b.Opcode().Info().HdrLen - int(b.PadCnt()) - packet.ICRCLen
	if n > 0 {
		r.wire[i] += uint64(n)
	}
}

func newReporter(run *runState, interval netsim.Time) *reporter {
	r := &reporter{run: run, interval: interval, next: interval}
	r.rep.Interval = int64(interval)
	for _, f := range run.flows {
		r.rep.Flows = append(r.rep.Flows, FlowReport{Name: f.name, From: f.a.info.Name, To: f.b.info.Name, Start: -1, End: -1})
	}
	r.last = make([]uint64, len(run.flows))
	r.wire = make([]uint64, len(run.flows))
	r.byDest = map[uint64]int{}
	r.hosts = uint64(len(run.w.infos))
	for i, f := range run.flows {
		if f.qb != nil {
			r.byDest[r.destKey(f.a.info.Index, f.b.info.Index, f.qb.QPN())] = i
		}
	}
	r.hostIP = map[[16]byte]int{}
	for _, hi := range run.w.infos {
		r.hostIP[hi.IP.As16()] = hi.Index
	}
	for _, p := range run.w.net.Pipes() {
		r.rep.Queues = append(r.rep.Queues, QueueReport{Link: p.Name()})
	}
	return r
}

// sampleUntil takes the samples of every interval that ended by now.
func (r *reporter) sampleUntil(now netsim.Time) {
	for r.next <= now {
		r.sample()
		r.next += r.interval
	}
}

func (r *reporter) sample() {
	r.rep.Samples++
	secs := float64(r.interval) / float64(netsim.Second)
	for i, f := range r.run.flows {
		fr := &r.rep.Flows[i]
		fr.Throughput = append(fr.Throughput, float64(f.bytesDone-r.last[i])*8/secs)
		r.last[i] = f.bytesDone
		fr.Sent = append(fr.Sent, float64(r.wire[i])*8/secs)
		r.wire[i] = 0
		var st qp.RateState
		if f.qa != nil {
			st, _ = f.a.dev.d.QPRate(f.qa.QPN())
		}
		fr.Rate = append(fr.Rate, st.Rate)
		fr.Target = append(fr.Target, st.Target)
		fr.Alpha = append(fr.Alpha, st.Alpha)
	}
	for i, p := range r.run.w.net.Pipes() {
		q := &r.rep.Queues[i]
		q.Bytes = append(q.Bytes, p.QueueBytes())
	}
}

// finish fills in the totals at the end of the run.
func (r *reporter) finish(end netsim.Time) *Report {
	r.sampleUntil(end)
	for i, f := range r.run.flows {
		fr := &r.rep.Flows[i]
		fr.Ops, fr.Bytes = f.completed, f.bytesDone
		if f.posted > 0 {
			fr.Start = int64(f.ops[0].postedAt)
		}
		if f.completed > 0 {
			fr.End = int64(f.lastDone)
		}
	}
	for i, p := range r.run.w.net.Pipes() {
		c := p.Counters()
		q := &r.rep.Queues[i]
		q.MaxBytes, q.ECNMarked, q.Dropped = c.MaxQueueBytes, c.ECNMarked, c.DropQueue
		paused, _ := p.PausedTime()
		q.PausedNs = int64(paused)
	}
	return &r.rep
}

// defaultReportInterval is the sampling period when a scenario's
// expectations need samples and the caller asked for none.
const defaultReportInterval = 100 * netsim.Microsecond

// reportInterval is the sampling period a run uses: the caller's, or the
// default when the scenario's expectations need samples.
func reportInterval(sc *Scenario, opt Options) netsim.Time {
	if opt.Report > 0 {
		return opt.Report
	}
	if len(sc.Expect.Fair) > 0 || len(sc.Expect.Queues) > 0 || len(sc.Expect.Rates) > 0 {
		return defaultReportInterval
	}
	return 0
}

// Jain returns Jain's fairness index of xs: (Σx)²/(n·Σx²), 1 when all are
// equal, 1/n when one takes everything.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// WindowMean returns the mean of a series sampled by the report (such as
// a flow's Sent) over the samples in [from, until).
func (r *Report) WindowMean(series []float64, from, until netsim.Time) float64 {
	lo, hi := int(from/netsim.Time(r.Interval)), int(until/netsim.Time(r.Interval))
	hi = min(hi, len(series))
	if hi <= lo {
		return 0
	}
	var s float64
	for _, x := range series[lo:hi] {
		s += x
	}
	return s / float64(hi-lo)
}

// checkSharing checks the scenario's fairness, rate and queue
// expectations against the report.
func (run *runState) checkSharing() {
	ex := run.w.sc.Expect
	r := run.report
	if r == nil {
		return
	}
	for _, fs := range ex.Fair {
		from, until := netsim.Time(fs.From), netsim.Time(fs.Until)
		var names []string
		var xs []float64
		for i := range r.Flows {
			f := &r.Flows[i]
			if len(fs.Flows) > 0 {
				if !contains(fs.Flows, f.Name) {
					continue
				}
			} else if f.Start < 0 || netsim.Time(f.Start) > from || netsim.Time(f.End) < until {
				continue
			}
			names = append(names, f.Name)
			xs = append(xs, r.WindowMean(f.Sent, from, until))
		}
		if len(xs) < 2 {
			run.violate(invCongestion, "", "fairness over %s..%s: %d flows ran throughout; need two", from, until, len(xs))
			continue
		}
		parts := make([]string, len(xs))
		var total float64
		for i := range xs {
			parts[i] = fmt.Sprintf("%s %.2f Gb/s", names[i], xs[i]/1e9)
			total += xs[i]
		}
		if j := Jain(xs); j < fs.Jain {
			run.violate(invCongestion, "", "fairness over %s..%s: Jain's index %.3f < %.3f (%s)",
				from, until, j, fs.Jain, strings.Join(parts, ", "))
		}
		if total < float64(fs.MinTotal) {
			run.violate(invCongestion, "", "fairness over %s..%s: the flows sent %.2f Gb/s together, below %.2f (%s)",
				from, until, total/1e9, float64(fs.MinTotal)/1e9, strings.Join(parts, ", "))
		}
	}
	for _, rb := range ex.Rates {
		i := slices.IndexFunc(r.Flows, func(f FlowReport) bool { return f.Name == rb.Flow })
		if i < 0 {
			run.violate(invCongestion, "", "rate bound: no flow %s", rb.Flow)
			continue
		}
		x := r.WindowMean(r.Flows[i].Sent, netsim.Time(rb.From), netsim.Time(rb.Until))
		if (rb.Min > 0 && x < float64(rb.Min)) || (rb.Max > 0 && x > float64(rb.Max)) {
			run.violate(invCongestion, rb.Flow, "sent %.2f Gb/s over %s..%s, outside [%.2f, %.2f] Gb/s", x/1e9,
				netsim.Time(rb.From), netsim.Time(rb.Until), float64(rb.Min)/1e9, float64(rb.Max)/1e9)
		}
	}
	for _, qs := range ex.Queues {
		i := slices.IndexFunc(r.Queues, func(q QueueReport) bool { return q.Link == qs.Link })
		if i < 0 {
			run.violate(invCongestion, "", "queue bound: no link direction %s", qs.Link)
			continue
		}
		q := &r.Queues[i]
		if qs.Max > 0 && q.MaxBytes > int(qs.Max) {
			run.violate(invCongestion, "", "queue %s reached %d bytes, above its bound %d", qs.Link, q.MaxBytes, int64(qs.Max))
		}
		if qs.Below > 0 {
			for k := int(netsim.Time(qs.Settle) / netsim.Time(r.Interval)); k < len(q.Bytes); k++ {
				if q.Bytes[k] >= int(qs.Below) {
					run.violate(invCongestion, "", "queue %s held %d bytes at %s, after settling at %s it must stay below %d",
						qs.Link, q.Bytes[k], netsim.Time(int64(k+1)*r.Interval), netsim.Time(qs.Settle), int64(qs.Below))
					break
				}
			}
		}
	}
}
