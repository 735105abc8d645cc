package sim

import (
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/sim/netsim"
)

// Options are optional outputs of a run.
type Options struct {
	// Pcap, when set, receives a pcapng capture of every frame on every
	// link direction, stamped with virtual time (time.Unix(0, t)).
	Pcap io.Writer
	// Log, when set, receives the event log, one line per event.
	Log io.Writer
	// Report, when positive, samples the run every Report of virtual time
	// into Result.Report (report.go).
	Report netsim.Time
}

// afterSetup, when set (by tests), runs after a run's flows are created and
// before the loop starts, to inject misbehaviour the invariants must catch.
var afterSetup func(run *runState)

// grace bounds how long a run continues after the last operation completes,
// so that messages still in flight (UC, UD) reach their receivers.
const grace = 100 * netsim.Millisecond

// runStats accumulates the workload's outcome.
type runStats struct {
	posted, completed uint64
	byStatus          [32]uint64
	byOp              [numOpKinds]uint64
	bytes             uint64
	lat               []int64
	firstPost         netsim.Time
	lastDone          netsim.Time
	recvs, recvErr    uint64
	reordered         uint64
	unidentified      uint64
	fenced            uint64
}

func (s *runStats) complete(op *opRec, wc *qp.WC, now netsim.Time) {
	s.completed++
	s.byStatus[wc.Status&31]++
	s.byOp[op.kind]++
	s.lastDone = now
	if wc.Status == qp.WCSuccess {
		s.bytes += uint64(op.size)
		s.lat = append(s.lat, int64(now-op.postedAt))
	}
}

// violation tally for one invariant.
type tally struct {
	n       int
	details []string
}

// runState is one run of a scenario.
type runState struct {
	w       *world
	hosts   []*hostRT
	flows   []*flow
	models  modelScratch // the flows' models' shared scratch
	mem     arena        // the bytes of the flows' regions and models
	active  int
	idleAt  netsim.Time // when active fell to 0
	simEnd  netsim.Time // the time of the last event
	stats   runStats
	tallies map[string]*tally
	err     error
	naks    map[string]uint64
	frames  uint64
	// cmFlows: some flow is connected by the connection manager, whose
	// events are taken after every step (cm.go).
	cmFlows bool
	// rep samples the run and report holds what it gathered, when asked
	// for or needed by the scenario's expectations (report.go).
	rep    *reporter
	report *Report
	fct    *FCTResult // flows workloads' completion times (fct.go)
	// deadlocks are the PFC deadlocks watchDeadlocks found; lastCycle
	// is the cycle its previous check saw.
	deadlocks []Deadlock
	lastCycle string
}

func (run *runState) violate(inv, flow, format string, args ...any) {
	t := run.tallies[inv]
	if t == nil {
		t = &tally{}
		run.tallies[inv] = t
	}
	t.n++
	if len(t.details) < maxDetails {
		msg := fmt.Sprintf(format, args...)
		if flow != "" {
			msg = flow + ": " + msg
		}
		msg = fmt.Sprintf("at %s: %s", run.w.loop.Now(), msg)
		t.details = append(t.details, msg)
		run.w.rec.event("violation", inv, strconv.Quote(msg))
	}
}

// fail records an error that stops the run (a setup or API failure, not a
// protocol outcome).
func (run *runState) fail(err error) {
	if run.err == nil {
		run.err = err
	}
}

func (run *runState) logOp(f *flow, what string, i int, s string, n int) {
	run.w.rec.op(what, f.name, i, s, n)
}

// onEmit counts what hosts put on the wire: NAKs by kind.
func (run *runState) onEmit(hr *hostRT, frame []byte) {
	run.frames++
	// Locals, not fields: see icrcOK.
	var fr packet.Frame
	var pkt packet.Packet
	if packet.ParseFrameUnverified(frame, &fr) != nil || len(fr.Transport) < packet.BTHLen {
		return
	}
	if run.rep != nil {
		run.rep.sent(hr, &fr)
	}
	if !packet.BTH(fr.Transport).Opcode().Info().Is(packet.HdrAETH) {
		return // only what carries an AETH can be a NAK: skip decoding the rest
	}
	if pkt.Decode(fr.Transport) != nil {
		return
	}
	if !pkt.Info().Is(packet.HdrAETH) {
		return
	}
	syn := pkt.AETH.Syndrome
	switch {
	case syn.IsRNR():
		run.naks["RNR"]++
	case syn.IsNAK():
		run.naks[nakName(syn.Value())]++
	}
}

func nakName(code uint8) string {
	switch code {
	case 0:
		return "PSN_SEQ_ERR"
	case 1:
		return "INV_REQ"
	case 2:
		return "REM_ACCESS"
	case 3:
		return "REM_OP"
	case 4:
		return "INV_RD_REQ"
	}
	return "NAK_" + strconv.Itoa(int(code))
}

// Run runs a scenario with a seed and checks its invariants. The error is
// for scenarios that cannot run (bad topology, a refused verbs call);
// protocol misbehaviour shows in the Result's verdicts.
func Run(sc *Scenario, seed uint64) (*Result, error) { return RunWith(sc, seed, Options{}) }

// RunWith runs a scenario with optional outputs.
func RunWith(sc *Scenario, seed uint64, opt Options) (*Result, error) {
	var pw *pcapio.Writer
	if opt.Pcap != nil {
		var err error
		if pw, err = pcapio.NewWriter(opt.Pcap); err != nil {
			return nil, err
		}
	}
	run := &runState{tallies: map[string]*tally{}, naks: map[string]uint64{}}
	defer run.mem.release()
	w, err := build(sc, seed, func(h hostInfo, s uint64) (Device, error) { return newRxeDevice(h, s, sc.FastRecovery, &run.mem) },
		func(l *netsim.Loop) *recorder { return newRecorder(l, opt.Log, pw) })
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	defer w.net.Release()
	defer w.discardDevices()
	run.w = w
	if err := run.setup(); err != nil {
		w.rec.close()
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if afterSetup != nil {
		afterSetup(run)
	}
	end := netsim.Time(sc.Duration)
	if end == 0 {
		end = defaultDuration
	}
	var rep *reporter
	if interval := reportInterval(sc, opt); interval > 0 {
		rep = newReporter(run, interval)
		run.rep = rep
	}
	if w.swLoop != nil {
		if opt.Pcap != nil {
			w.rec.close()
			return nil, fmt.Errorf("scenario %s: parallel: no capture (run it without parallel for one)", sc.Name)
		}
		run.simEnd = run.runParallel(end, rep)
	} else {
		run.runSerial(end, rep)
	}
	if run.err != nil {
		w.rec.close() // the log up to the failure
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, run.err)
	}
	if rep != nil {
		run.report = rep.finish(min(run.simEnd, run.stats.lastDone+rep.interval))
	}
	run.fct = run.fcts()
	res := run.result(end)
	res.Report = run.report
	res.FCT = run.fct
	if pw != nil {
		if err := pw.Close(); err != nil {
			return nil, err
		}
	}
	if w.rec.err != nil {
		return nil, fmt.Errorf("scenario %s: writing outputs: %w", sc.Name, w.rec.err)
	}
	return res, nil
}

// runSerial is RunWith's loop: events one after another while work is
// outstanding, then for the grace period.
func (run *runState) runSerial(end netsim.Time, rep *reporter) {
	loop := run.w.loop
	if run.w.pfc {
		run.watchDeadlocks()
	}
	for run.active > 0 && run.err == nil && loop.Next() <= end {
		if rep != nil {
			rep.sampleUntil(min(loop.Next(), end))
		}
		loop.Step()
		run.pollCM()
	}
	if run.err == nil {
		// Let what is still in flight (UC and UD messages, the last ACKs)
		// arrive: run until nothing is scheduled, within a bound.
		stop := min(loop.Now()+grace, end)
		for loop.Next() <= stop {
			loop.Step()
			run.pollCM()
		}
	}
	run.simEnd = loop.Now()
}

// setup creates the host objects and flows and schedules their starts.
func (run *runState) setup() error {
	w := run.w
	perHost := make([]int, len(w.hosts))
	type pair struct {
		wl   *wlSpec
		a, b int
		flow *flowArrival // a flows workload's flow; nil: wl.QPs QP pairs
	}
	var pairs []pair
	for i, ws := range w.sc.Workloads {
		wl, err := resolveWorkload(i, ws)
		if err != nil {
			return err
		}
		from, err := expandHosts(ws.From, w.infos)
		if err != nil {
			return fmt.Errorf("workload %s: from: %w", wl.Name, err)
		}
		to, err := expandHosts(ws.To, w.infos)
		if err != nil {
			return fmt.Errorf("workload %s: to: %w", wl.Name, err)
		}
		if wl.Flows != nil {
			byName := make(map[string]int, len(w.infos))
			for _, hi := range w.infos {
				byName[hi.Name] = hi.Index
			}
			fl, err := wl.arrivals(w.seed, from, to, func(h int) int64 { return w.hosts[h].out.Config().Bandwidth }, byName)
			if err != nil {
				return err
			}
			for i := range fl {
				pairs = append(pairs, pair{wl, fl[i].src, fl[i].dst, &fl[i]})
				perHost[fl[i].src] += wl.Window + 1
				perHost[fl[i].dst] += wl.RecvDepth + 1
			}
			continue
		}
		for _, a := range from {
			for _, b := range to {
				if a == b {
					continue
				}
				pairs = append(pairs, pair{wl, a, b, nil})
				perHost[a] += wl.QPs * (wl.Window + 1)
				perHost[b] += wl.QPs * (wl.RecvDepth + 1)
			}
		}
	}
	for i, h := range w.hosts {
		hr, err := run.setupHost(h, w.infos[i], 2*perHost[i]+16)
		if err != nil {
			return fmt.Errorf("host %s: %w", h.name, err)
		}
		h.onEmit = func(frame []byte) { run.onEmit(hr, frame) }
		dev := hr.dev.d
		h.accepted = func() uint64 { c := dev.Counters(); return c.RcvdPkts }
		h.onAccept = func(frame []byte) {
			run.violate(invCorruption, "", "%s accepted a frame with a bad ICRC (%d bytes)", h.name, len(frame))
		}
		run.hosts = append(run.hosts, hr)
	}
	for i, p := range pairs {
		if p.flow != nil {
			f, err := run.newFlow(p.wl, run.hosts[p.a], run.hosts[p.b], i, p.flow)
			if err != nil {
				return err
			}
			run.flows = append(run.flows, f)
			continue
		}
		for k := 0; k < p.wl.QPs; k++ {
			f, err := run.newFlow(p.wl, run.hosts[p.a], run.hosts[p.b], k, nil)
			if err != nil {
				return err
			}
			run.flows = append(run.flows, f)
		}
	}
	run.active = len(run.flows)
	ops := 0
	for _, f := range run.flows {
		run.cmFlows = run.cmFlows || f.wl.Connect == "cm"
		ops += len(f.ops)
	}
	// One latency per successful operation: room for them all at once, not
	// grown by doubling through the run (twice their size in garbage).
	run.stats.lat = make([]int64, 0, ops)
	for _, f := range run.flows {
		f.start(run)
	}
	for _, h := range w.hosts {
		h.kick()
	}
	return nil
}

// result checks the end-of-run invariants and assembles the Result.
func (run *runState) result(end netsim.Time) *Result {
	w := run.w
	s := &run.stats
	now := run.simEnd
	events := w.loop.Fired()
	if w.swLoop != nil {
		events += w.swLoop.Fired()
	}
	res := &Result{
		Scenario: w.sc.Name, Seed: w.seed, SimTime: int64(now), Events: events,
		Flows: len(run.flows), Posted: s.posted, Completed: s.completed,
		ByStatus: map[string]uint64{}, ByOp: map[string]uint64{}, Bytes: s.bytes,
		Recvs: s.recvs, RecvErrors: s.recvErr, Reordered: s.reordered, Unidentified: s.unidentified,
		NAKs: run.naks, Frames: run.frames, Devices: map[string]map[string]uint64{},
		LastHeal: int64(w.lastHeal), LastDone: int64(s.lastDone),
	}
	for st, n := range s.byStatus {
		if n > 0 {
			res.ByStatus[qp.WCStatus(st).String()] = n
		}
	}
	for k, n := range s.byOp {
		if n > 0 {
			res.ByOp[opKind(k).String()] = n
		}
	}
	res.Unfinished = s.posted - s.completed
	if span := s.lastDone - s.firstPost; span > 0 {
		res.Goodput = float64(s.bytes) * 8 / (float64(span) / float64(netsim.Second))
	}
	res.Latency = percentiles(s.lat)

	// Per-flow end-of-run invariants.
	for _, f := range run.flows {
		if !f.finished {
			run.violate(invLiveness, f.name, "%d of %d operations posted, %d completed when the run ended at %s",
				f.posted, len(f.ops), f.completed, now)
			continue
		}
		if f.failed {
			if !w.sc.AllowErrors && len(w.sc.Expect.Statuses) == 0 {
				run.violate(invStatus, f.name, "failed with %s", f.firstErr)
			}
			continue
		}
		if f.typ != qp.RC {
			lost := uint64(0)
			for _, m := range f.msgs {
				if m.got == 0 {
					lost++
				}
			}
			if f.typ == qp.UC {
				res.LostUC += lost
			} else {
				res.LostUD += lost
			}
			continue
		}
		if f.recvNext != len(f.msgs) {
			run.violate(invExactlyOnce, f.name, "%d of %d messages delivered", f.recvNext, len(f.msgs))
		}
		for _, m := range f.msgs {
			if m.got != 1 {
				run.violate(invExactlyOnce, f.name, "message #%d delivered %d times", m.seq, m.got)
				break
			}
		}
		if got := f.remote.Bytes(); !f.bulk && f.model != nil && !f.model.matches(got) {
			model := f.model.bytes()
			first := 0
			for first < len(got) && got[first] == model[first] {
				first++
			}
			run.violate(invModel, f.name, "remote memory differs from the reference model from byte %d", first)
		}
	}
	if w.lastHeal > 0 && w.sc.Drain > 0 && s.lastDone > w.lastHeal+netsim.Time(w.sc.Drain) {
		run.violate(invLiveness, "", "last completion at %s, more than %s after the last fault healed at %s",
			s.lastDone, netsim.Time(w.sc.Drain), w.lastHeal)
	}

	// Counters against the trace.
	delivered := make([]uint64, w.net.Nodes())
	for _, p := range w.net.Pipes() {
		c := p.Counters()
		delivered[p.To()] += c.Delivered - c.PauseFrames // PAUSEs stop at the MAC
		paused, pauses := p.PausedTime()
		res.Links = append(res.Links, LinkResult{Name: p.Name(), PipeCounters: c, PausedNs: int64(paused), Pauses: pauses})
	}
	res.Network = w.net.Totals()
	res.Deadlocks = run.deadlocks
	for i, sw := range w.sws {
		if w.swPFC[i] != nil {
			if res.PFC == nil {
				res.PFC = map[string]netsim.PFCCounters{}
			}
			res.PFC[w.net.Name(sw.ID())] = sw.PFCCounters()
		}
	}
	for _, hr := range run.hosts {
		h := hr.h
		c := hr.dev.d.Counters()
		t := &c.Counters
		res.Retransmits += t.Retransmits
		res.RNRNaksSent += t.SendRNRErr
		res.RNRNaksRcvd += t.RcvdRNRErr
		m := map[string]uint64{}
		for _, kv := range c.List() {
			if kv.Value != 0 {
				m[kv.Name] = kv.Value
			}
		}
		res.Devices[h.name] = m
		rxDrops := c.NotRoCE + c.Malformed + c.BadDGID + c.UnknownOpcode + c.CNP + c.BadPKey + c.UnknownQP +
			c.GSIDropped + c.Multicast + c.QPNotReady + c.AddrMismatch + c.BadQKey + c.BadICRC
		if h.frames != delivered[h.id] {
			run.violate(invCounters, "", "%s: the network delivered %d frames, the host saw %d", h.name, delivered[h.id], h.frames)
		}
		if got := t.RcvdPkts - c.LoopbackPackets + rxDrops; got != h.frames {
			run.violate(invCounters, "", "%s: %d frames arrived but rcvd_pkts %d + receive drops %d = %d",
				h.name, h.frames, t.RcvdPkts-c.LoopbackPackets, rxDrops, got)
		}
		if got := t.SentPkts - c.TxNoRoute - c.LoopbackPackets; got != h.emits {
			run.violate(invCounters, "", "%s: sent_pkts %d - no route %d - loopback %d = %d, but %d frames left the host",
				h.name, t.SentPkts, c.TxNoRoute, c.LoopbackPackets, got, h.emits)
		}
		hr.dev.d.DropEvents()
	}
	run.checkExpect(res)
	for _, name := range allInvariants {
		v := Verdict{Name: name, OK: true}
		if t := run.tallies[name]; t != nil {
			v.OK, v.Violations, v.Details = false, t.n, t.details
		}
		res.Verdicts = append(res.Verdicts, v)
	}
	res.EventLog = w.rec.sum()
	res.LogLines = w.rec.lineCount()
	return res
}

// sometimes maps the names a scenario may expect to whether the run shows
// them.
func sometimes(res *Result, dev func(string) uint64) map[string]bool {
	return map[string]bool{
		"retransmit":        res.Retransmits > 0,
		"rnr":               res.RNRNaksRcvd > 0,
		"nak_seq":           res.NAKs["PSN_SEQ_ERR"] > 0,
		"duplicate_request": dev("duplicate_request") > 0,
		"corrupt":           res.Network.Corrupted > 0,
		"drop_queue":        res.Network.DropQueue > 0,
		"partition":         res.Network.DropPartition > 0,
		"retry_exceeded":    dev("retry_exceeded_err") > 0,
		"uc_loss":           res.LostUC > 0,
		"ud_loss":           res.LostUD > 0,
		"cm_retransmit":     dev("cm_retransmits") > 0,
		"ecn_marked":        res.Network.ECNMarked > 0,
		"cnp":               dev("np_cnp_sent") > 0,
		"rate_cut":          dev("rp_cnp_handled") > 0,
		"pfc_pause":         pfcTotal(res, func(c netsim.PFCCounters) uint64 { return c.XOffSent }) > 0,
		"drop_headroom":     pfcTotal(res, func(c netsim.PFCCounters) uint64 { return c.DropHeadroom }) > 0,
		"pfc_storm":         pfcTotal(res, func(c netsim.PFCCounters) uint64 { return c.Storms }) > 0,
		"pfc_deadlock":      len(res.Deadlocks) > 0,
	}
}

// pfcTotal sums one PFC counter over the switches.
func pfcTotal(res *Result, f func(netsim.PFCCounters) uint64) uint64 {
	var t uint64
	for _, c := range res.PFC {
		t += f(c)
	}
	return t
}

// checkExpect checks the statuses and coverage the scenario expects.
func (run *runState) checkExpect(res *Result) {
	ex := run.w.sc.Expect
	if len(ex.Statuses) > 0 {
		for st, n := range sortedCounts(res.ByStatus) {
			if !contains(ex.Statuses, st) {
				run.violate(invStatus, "", "%d operations completed with %s, which the scenario does not allow", n, st)
			}
		}
	}
	dev := func(name string) uint64 {
		var t uint64
		for _, m := range res.Devices {
			t += m[name]
		}
		return t
	}
	run.checkSharing()
	run.checkFCT()
	seen := sometimes(res, dev)
	for _, s := range ex.Sometimes {
		ok, known := seen[s]
		switch {
		case !known:
			run.violate(invCoverage, "", "unknown coverage point %q", s)
		case !ok:
			run.violate(invCoverage, "", "the run never showed %s", s)
		}
	}
}

// sortedCounts returns a map's entries in key order, for deterministic
// reporting.
func sortedCounts(m map[string]uint64) func(yield func(string, uint64) bool) {
	return func(yield func(string, uint64) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
