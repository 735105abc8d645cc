package rxe

import (
	"container/heap"

	"github.com/softroce/softroce/qp"
)

// The device's timer queue: every live QP with a deadline (retransmit, RNR
// wait, early retry, pacing, DCQCN's timers), in a min-heap on the deadline
// it had when last noted. Tick pops the QPs that are due and nothing else,
// so a device with thousands of QPs waiting on timers pays for the timers
// that fire, not for every QP each time one does.
//
// A QP's deadline changes only in calls into it; each such call is followed
// by noteDeadline (every call but PostSend, PostRecv and Pending, which
// leave the timers alone). A heap key that is earlier than the QP's real
// deadline costs one early Tick of that QP, which does nothing but re-key
// it; a later one would be a missed timer, which is why every call that
// may move a deadline earlier notes it.
type deadlineHeap []*QP

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].dlAt < h[j].dlAt }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dlIdx, h[j].dlIdx = i, j
}
func (h *deadlineHeap) Push(v any) {
	x := v.(*QP)
	x.dlIdx = len(*h)
	*h = append(*h, x)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	x.dlIdx = -1
	return x
}

// noteDeadline records x's deadline after a call into x that may have
// changed it.
func (d *Device) noteDeadline(x *QP) {
	if x.dead {
		return
	}
	dl := x.q.Deadline()
	switch {
	case dl == qp.Never:
		if x.dlIdx >= 0 {
			heap.Remove(&d.timers, x.dlIdx)
		}
	case x.dlIdx >= 0:
		if dl != x.dlAt {
			x.dlAt = dl
			heap.Fix(&d.timers, x.dlIdx)
		}
	default:
		x.dlAt = dl
		heap.Push(&d.timers, x)
	}
}

// dropDeadline takes a destroyed QP out of the timer queue.
func (d *Device) dropDeadline(x *QP) {
	if x.dlIdx >= 0 {
		heap.Remove(&d.timers, x.dlIdx)
	}
}

// Tick runs the timers of every QP whose deadline has passed (retransmit,
// RNR wait), and the connection manager's, at time now. Each due QP is
// ticked once, even if its next deadline has passed too.
func (d *Device) Tick(now qp.Time) {
	d.mu.Lock()
	due := d.due[:0]
	for len(d.timers) > 0 && d.timers[0].dlAt <= now {
		due = append(due, heap.Pop(&d.timers).(*QP))
	}
	for i, x := range due {
		x.q.Tick(now)
		d.markReady(x)
		d.noteDeadline(x)
		due[i] = nil
	}
	d.due = due[:0]
	d.gsiTick(now)
	d.mu.Unlock()
	d.notify()
}

// Deadline returns the earliest time a QP or the connection manager needs
// Tick, or qp.Never.
func (d *Device) Deadline() qp.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.earliestLocked()
}

// deadlineHint is Deadline (once a scan, now as cheap).
func (d *Device) deadlineHint() qp.Time { return d.Deadline() }

func (d *Device) earliestLocked() qp.Time {
	dl := d.gsi.due
	if len(d.timers) > 0 {
		dl = min(dl, d.timers[0].dlAt)
	}
	return dl
}
