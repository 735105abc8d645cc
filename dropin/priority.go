package dropin

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultNice is the scheduling priority (nice value) `softroce daemon`
// asks for. The daemon does the work a NIC and its kernel driver do, which
// in the kernel runs in softirq context ahead of every user thread; at the
// programs' own priority it waits for a time slice whenever they spin on
// their completion queues, as perftest and UCX do. On a 2-core machine two
// spinning programs left a daemon's goroutines waiting 4-6 ms at a time in
// the middle of a message. Debian's perftest on the drop-in, daemons at
// nice 0 against nice -5, three runs each, alternating (2026-11-27):
// ib_send_bw 244-275 against 316-440 MB/s, ib_send_lat's average 95-195
// against 60-123 us with its typical value unchanged (41-57 against 43-50
// us), ib_write_bw unchanged (565-662 against 497-649 MB/s). At nice -10
// SEND gained more (350-590 MB/s) but the typical latency lost a few
// microseconds: the daemon's own spinning threads then take the CPU from
// the program that is about to post.
const DefaultNice = -5

// DefaultRealtime is the real-time priority (SCHED_RR, 1..99) at which
// `softroce daemon` runs its threads while its device moves data in bulk
// (Boost). A nice value only weighs the daemon's share against the
// programs': a program spinning on its CQ still holds the CPU when a
// daemon thread wakes, and with two spinning programs on two CPUs the
// daemons kept waiting. A real-time thread preempts every ordinary one the
// moment it wakes, as the kernel's softirq work does, and gives the CPU
// back when it blocks, which the daemon's threads do whenever no frame,
// post or timer is due (none of them polls). Priority 1, the lowest, stays
// below every real-time thread the system has, and Linux's real-time
// throttling (kernel.sched_rt_runtime_us, 95% by default) leaves ordinary
// threads their share even if a daemon thread never blocked.
const DefaultRealtime = 1

// SetRealtime puts every thread of this process under SCHED_RR at priority
// prio (1..99) and reports the first thread it could not change. A thread
// starts with its creator's policy, so the Go runtime's later threads
// inherit it (and so would a child process: the daemon starts none). It
// needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least prio (the error then
// wraps unix.EPERM).
func SetRealtime(prio int) error {
	if prio < 1 || prio > 99 {
		return fmt.Errorf("real-time priority %d: SCHED_RR runs from 1 to 99: %w", prio, unix.EINVAL)
	}
	attr := unix.SchedAttr{Policy: unix.SCHED_RR, Priority: uint32(prio)}
	return eachThread(func(tid int) error {
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
			return fmt.Errorf("set SCHED_RR %d on thread %d: %w", prio, tid, err)
		}
		return nil
	})
}

// SetNormal puts every thread of this process under the ordinary policy
// (SCHED_OTHER) at nice value nice: it undoes SetRealtime.
func SetNormal(nice int) error {
	attr := unix.SchedAttr{Policy: schedOther, Nice: int32(nice)}
	return eachThread(func(tid int) error {
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
			return fmt.Errorf("set SCHED_OTHER nice %d on thread %d: %w", nice, tid, err)
		}
		return nil
	})
}

// schedOther is SCHED_OTHER (SCHED_NORMAL), which x/sys/unix does not name.
const schedOther = 0

// Boost decides, from the packets the device moves, when the daemon runs
// under the real-time policy. It pays where data flows in bulk and costs
// where a lone message goes back and forth. Debian's perftest on the
// drop-in, two daemons on the 2-core VM, every thread real-time for the
// whole run against nice -5 (2026-11-27): ib_write_bw 64 KiB 1307-1350
// against 722-786 MB/s, ib_read_bw 2330-2370 against 830-944, ib_send_lat's
// 99th percentile 104-110 against 1700-1900 us; but ib_read_lat's typical
// 85 against 24 us and, in another hour, ib_send_lat's 80 against 46 us. A
// real-time thread woken on the other CPU takes it at once, through an
// interrupt the hypervisor makes slow (a ping-pong round trip took four
// such interrupts instead of two), and the runtime's monitor thread, whose
// 20 us sleeps have no timer slack at real-time priority, woke 50,000
// times a second. So the daemon takes the policy while the device moves
// more than On packets a second, sent and received, and leaves it when the
// rate falls below Off: a ping-pong of small messages moves some 70,000, a
// bulk transfer a million. Three runs each, alternating, Boost against nice
// -5 alone: ib_send_lat typical 46-47 against 47-54 us, ib_write_bw
// 985-1001 against 689-707 MB/s, ib_read_bw 1294-1338 against 648-747.
// With one daemon serving both ends on the mem link it gave perftest's
// bandwidth nothing measurable (ib_write_bw 2440-2710 against 2800-2830
// MB/s, ib_read_bw 2690-2810 against 2460-2520) and cost UCX's
// latency-bound tests, whose packet rate on that link is a bulk
// transfer's (ucp_get 113 against 828 MB/s, uct fetch-add 30 against 2 us,
// Open MPI's ping-pong 29 against 13 us), so `softroce daemon` leaves it
// off there unless asked.
type Boost struct {
	On, Off float64
	on      bool
}

// DefaultBoost is the daemon's Boost.
var DefaultBoost = Boost{On: 250_000, Off: 100_000}

// Run measures the packet rate at every tick, from packets (a running
// count), and calls set when the policy should change, until ticks is
// closed.
func (b *Boost) Run(ticks <-chan time.Time, packets func() uint64, set func(on bool)) {
	last, at := packets(), time.Time{}
	for now := range ticks {
		n := packets()
		if !at.IsZero() {
			if on, changed := b.Step(float64(n-last) / now.Sub(at).Seconds()); changed {
				set(on)
			}
		}
		last, at = n, now
	}
}

// Step takes the packet rate of the last interval and reports whether the
// real-time policy should be on now, and whether that is a change.
func (b *Boost) Step(rate float64) (on, changed bool) {
	switch {
	case !b.on && rate > b.On:
		b.on = true
		return true, true
	case b.on && rate < b.Off:
		b.on = false
		return false, true
	}
	return b.on, false
}

// SetNice sets the nice value of every thread of this process to nice and
// reports the first thread it could not change. Linux keeps a nice value
// per thread, and a thread starts with its creator's: once the threads that
// exist have it, the Go runtime's later threads inherit it. Lowering the
// value below the current one needs CAP_SYS_NICE or a matching RLIMIT_NICE
// (the error then wraps unix.EACCES or unix.EPERM).
func SetNice(nice int) error {
	return eachThread(func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("set nice %d on thread %d: %w", nice, tid, err)
		}
		return nil
	})
}

// eachThread calls set once for every thread of this process, including
// those the runtime starts meanwhile, and stops at the first error (a
// thread that has exited, ESRCH, is skipped).
func eachThread(set func(tid int) error) error {
	done := map[int]bool{}
	// A thread the runtime starts while the list is read was cloned from
	// one not yet changed: go round until a pass finds no new thread.
	for pass := 0; pass < 4; pass++ {
		tids, err := threadIDs()
		if err != nil {
			return err
		}
		fresh := false
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh = true
			if err := set(tid); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread has exited
				}
				return err
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// threadIDs lists this process's threads.
func threadIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
