package sim

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/sim/netsim"
)

// CongestionSpec turns on the hosts' congestion control: DCQCN turns on
// ECN (packets sent ECT(0)), the notification point (CNPs for CE marks)
// and the reaction point (rate cuts on CNPs); ECN, NP and RP turn them on
// one by one. Params sets parameters under mlx5's names and units, as
// `softroce` --cc does (rates in Mb/s, times in microseconds), e.g.
// {"rp_ai_rate": 20, "np_min_time_between_cnps": 50}. Each host's line
// rate is its link's bandwidth unless Params sets line_rate.
type CongestionSpec struct {
	DCQCN  bool                       `json:"dcqcn,omitempty"`
	ECN    bool                       `json:"ecn,omitempty"`
	NP     bool                       `json:"np,omitempty"`
	RP     bool                       `json:"rp,omitempty"`
	Params map[string]json.RawMessage `json:"params,omitempty"`
}

// REDSpec is ECN marking on a link direction's output queue (the
// congestion point): see netsim.RED.
type REDSpec struct {
	Kmin ByteSize `json:"kmin"`
	Kmax ByteSize `json:"kmax"`
	Pmax float64  `json:"pmax"`
}

func (r *REDSpec) red() netsim.RED {
	if r == nil {
		return netsim.RED{}
	}
	return netsim.RED{Kmin: int(r.Kmin), Kmax: int(r.Kmax), Pmax: r.Pmax}
}

// settings turns the spec into a device's settings for a host whose link
// runs at line bit/s.
func (c *CongestionSpec) settings(line int64) (rxe.Congestion, error) {
	cc := rxe.DefaultCongestion()
	if c == nil {
		return cc, nil
	}
	if c.DCQCN {
		cc.Enable()
	}
	cc.ECN = cc.ECN || c.ECN
	cc.Engine.NP = cc.Engine.NP || c.NP
	cc.Engine.RP = cc.Engine.RP || c.RP
	if line > 0 {
		cc.Engine.LineRate = line
	}
	cc.Engine.Burst = 0 // virtual time paces exactly
	names := make([]string, 0, len(c.Params))
	for k := range c.Params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := strings.Trim(string(c.Params[k]), `"`)
		if err := cc.Set(k + "=" + v); err != nil {
			return cc, fmt.Errorf("congestion: %w", err)
		}
	}
	return cc, nil
}

// congestionDevice is a simulated device whose congestion control the
// scenario can set.
type congestionDevice interface {
	SetCongestion(rxe.Congestion) error
}

// setupCongestion configures every host's device and every queue's ECN
// marking, once the links are known.
func (w *world) setupCongestion(marks []staticRED) error {
	for _, h := range w.hosts {
		cd, ok := h.dev.(congestionDevice)
		if !ok {
			continue
		}
		cc, err := w.sc.Congestion.settings(h.out.Config().Bandwidth)
		if err != nil {
			return err
		}
		if err := cd.SetCongestion(cc); err != nil {
			return fmt.Errorf("host %s: %w", h.name, err)
		}
	}
	for _, m := range marks {
		if m.red == (netsim.RED{}) {
			continue
		}
		if err := m.pipe.SetECN(m.red, fault.Stream(w.seed, "ecn/"+m.pipe.Name())); err != nil {
			return err
		}
	}
	return nil
}

type staticRED struct {
	pipe *netsim.Pipe
	red  netsim.RED
}

// deadlockCheck is how often a run with PFC looks for a cycle of paused
// ports; one seen at two checks in a row is a deadlock (a PAUSE lasts at
// most 65535 quanta, 335 us at 100 Gb/s, so a cycle that outlives a
// millisecond is refreshed, not passing).
const deadlockCheck = netsim.Millisecond

// watchDeadlocks checks for PFC deadlocks every deadlockCheck while work
// is outstanding. A deadlock is reported (Result.Deadlocks) and violates
// the congestion invariant unless the scenario expects one (sometimes:
// pfc_deadlock).
func (run *runState) watchDeadlocks() {
	var tick func()
	tick = func() {
		if run.active == 0 {
			return
		}
		run.checkDeadlock()
		run.w.loop.After(deadlockCheck, tick)
	}
	run.w.loop.At(deadlockCheck, tick)
}

// checkDeadlock looks for a cycle of paused ports and reports one seen at
// two checks in a row.
func (run *runState) checkDeadlock() {
	w := run.w
	cycle := w.net.PFCDeadlock()
	key := ""
	names := make([]string, len(cycle))
	for i, p := range cycle {
		names[i] = p.Name()
	}
	if len(cycle) > 0 {
		key = strings.Join(names, " ")
	}
	if key != "" && key == run.lastCycle {
		found := len(run.deadlocks) == 0 || strings.Join(run.deadlocks[len(run.deadlocks)-1].Cycle, " ") != key
		if found {
			run.deadlocks = append(run.deadlocks, Deadlock{At: int64(w.loop.Now()), Cycle: names})
			w.rec.event("pfc-deadlock", names...)
			if !contains(w.sc.Expect.Sometimes, "pfc_deadlock") {
				run.violate(invCongestion, "", "PFC deadlock: %s, each paused with frames waiting on the next", key)
			}
		}
	}
	run.lastCycle = key
}
