package sim

import (
	"fmt"
	"runtime"

	"github.com/softroce/softroce/sim/netsim"
)

// A Parallel scenario runs its hosts and its switches as two shards of the
// network (netsim's shard.go): the hosts, their devices, flows and
// workload on the run's loop, the switches and their ports on a loop of
// their own, on a second goroutine where GOMAXPROCS allows. The shards meet
// only on the hosts' links, whose delay is the lookahead: they run a window
// of it at a time, then exchange the frames that crossed. Whatever samples
// or checks the whole network (the report's samples, the PFC deadlock
// check) runs between windows: at its time if no event ran since, else at
// the end of the window (at most the lookahead, 1 us in a data centre,
// after it).
//
// Each window's events depend only on the shards' states at its start, so
// a run is the same on one core as on two. It is not the same as a serial
// run of the scenario: events of the two shards at the same instant run in
// the order the windows give, not in the order they were scheduled.

// parallelOK reports whether a scenario can run as shards: the scenario
// features that act on the network from the hosts' loop at chosen times
// cannot.
func parallelOK(sc *Scenario) error {
	switch {
	case len(sc.Faults) > 0:
		return fmt.Errorf("parallel: timed faults are not supported (put the fault on the link)")
	case len(sc.Partitions) > 0:
		return fmt.Errorf("parallel: partitions are not supported")
	case len(sc.PFCStorms) > 0:
		return fmt.Errorf("parallel: pfc storms are not supported")
	}
	return nil
}

// shardRunner runs the switches' shard on a goroutine of its own: each
// window end sent on start, it runs the shard's events before it and
// answers on done. Until the next, it writes the event log's waiting
// windows: the switches' shard has less to do than the hosts'.
type shardRunner struct {
	start  chan netsim.Time
	done   chan struct{}
	exited chan struct{}
}

// startShard starts shard k's goroutine: log is the run's recorder (the
// first shard's), whose windows it writes in its waits.
func startShard(n *netsim.Network, k int, log *recorder) *shardRunner {
	r := &shardRunner{start: make(chan netsim.Time, 1), done: make(chan struct{}, 1), exited: make(chan struct{})}
	go func() {
		defer close(r.exited)
		for {
			var stop netsim.Time
			var ok bool
			select {
			case stop, ok = <-r.start:
			default:
				if log.writeSome() {
					continue
				}
				stop, ok = <-r.start
			}
			if !ok {
				return
			}
			runShard(n, k, stop)
			r.done <- struct{}{}
		}
	}()
	return r
}

// stop ends the goroutine and waits until it has.
func (r *shardRunner) stop() {
	close(r.start)
	<-r.exited
}

// runShard runs shard k's window until stop: the frames that crossed to it
// in the last, then its events.
func runShard(n *netsim.Network, k int, stop netsim.Time) {
	n.Import(k)
	l := n.ShardLoop(k)
	for l.Next() < stop {
		l.Step()
	}
}

// runParallel is RunWith's loop for a Parallel scenario: it runs windows
// while work is outstanding (and then, as a serial run does, for the grace
// period), and returns the time of the last event.
func (run *runState) runParallel(end netsim.Time, rep *reporter) netsim.Time {
	w := run.w
	hl, sl := w.loop, w.swLoop
	la := w.net.Lookahead()
	var sr *shardRunner
	if runtime.GOMAXPROCS(0) > 1 {
		sr = startShard(w.net, w.swShard, w.rec)
		defer sr.stop()
	}
	nextCheck := netsim.Never
	if w.pfc {
		nextCheck = deadlockCheck
	}
	var last netsim.Time
	// barrier runs what is due at t, between windows.
	barrier := func(t netsim.Time) {
		if rep != nil {
			rep.sampleUntil(t)
		}
		for nextCheck <= t {
			if run.active > 0 {
				run.checkDeadlock()
			}
			nextCheck += deadlockCheck
		}
	}
	// window runs both shards' events before stop.
	window := func(stop netsim.Time) {
		if sr != nil {
			sr.start <- stop
		} else {
			runShard(w.net, w.swShard, stop)
		}
		w.net.Import(0)
		for hl.Next() < stop {
			hl.Step()
			run.pollCM()
		}
		if sr != nil {
			// Write the log's waiting windows while the switches run.
		wait:
			for {
				select {
				case <-sr.done:
					break wait
				default:
				}
				if !w.rec.writeSome() {
					<-sr.done
					break
				}
			}
		}
		last = max(last, hl.Now(), sl.Now())
		hl.AdvanceTo(stop)
		sl.AdvanceTo(stop)
		w.net.Exchange()
		w.rec.window()
		barrier(stop)
	}
	next := func() netsim.Time { return min(hl.Next(), sl.Next(), w.net.Ready()) }
	// runUntil runs windows while cond holds and events are due by limit.
	// Windows lie on a grid of the lookahead, whatever else the run does
	// (a report, say), so that they, and the order of events, depend on
	// the scenario and the seed alone.
	runUntil := func(limit netsim.Time, cond func() bool) {
		for cond() {
			t := next()
			if t > limit {
				return
			}
			barrier(t) // nothing ran since the last window: what was due by t sees the state it would have
			window(min((t/la+1)*la, limit+1))
		}
	}
	runUntil(end, func() bool { return run.active > 0 && run.err == nil })
	if run.err == nil {
		// As a serial run: what is still in flight arrives, within a bound.
		stop := end
		if run.active == 0 {
			stop = min(run.idleAt+grace, end)
		}
		runUntil(stop, func() bool { return true })
	}
	return last
}
