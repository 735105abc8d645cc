package dropin

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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

// SetNice sets the nice value of every thread of this process to nice and
// reports the first thread it could not change. Linux keeps a nice value
// per thread, and a thread starts with its creator's: once the threads that
// exist have it, the Go runtime's later threads inherit it. Lowering the
// value below the current one needs CAP_SYS_NICE or a matching RLIMIT_NICE
// (the error then wraps unix.EACCES or unix.EPERM).
func SetNice(nice int) error {
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
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread has exited
				}
				return fmt.Errorf("set nice %d on thread %d: %w", nice, tid, err)
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
