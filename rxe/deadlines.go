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
	if x.rnrSlot > dl {
		dl = x.rnrSlot // held for its RNR retry slot
	}
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
		due[i] = nil
		if d.holdRNRRetry(now, x) {
			d.noteDeadline(x)
			continue
		}
		x.q.Tick(now)
		d.markReady(x)
		d.noteDeadline(x)
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
	dl := d.gsi.due
	if len(d.timers) > 0 {
		dl = min(dl, d.timers[0].dlAt)
	}
	return dl
}

// rnrInterval is the gap between RNR retry slots at rate per second (0:
// none, for rate <= 0).
func rnrInterval(rate int) qp.Time {
	if rate <= 0 {
		return 0
	}
	return max(qp.Second/qp.Time(rate), 1)
}

// rnrBurst is how many RNR retry slots may be taken at once after a quiet
// spell.
const rnrBurst = 16

// holdRNRRetry books x's RNR retry a slot when its RNR timer has run out
// and reports whether x must wait for it. Slots go in the order QPs come
// due, one per rnrInterval, up to rnrBurst at once. Both Tick and Output
// ask: the requester may send again as soon as its timer has run out,
// whichever of the two comes to it first.
func (d *Device) holdRNRRetry(now qp.Time, x *QP) bool {
	if d.rnrInterval == 0 || !x.q.RNRRetryDue(now) {
		x.rnrSlot = 0
		return false
	}
	if x.rnrSlot != 0 {
		if x.rnrSlot > now {
			return true
		}
		x.rnrSlot = 0
		return false // its slot has come
	}
	slot := max(d.rnrNext, now-rnrBurst*d.rnrInterval)
	d.rnrNext = slot + d.rnrInterval
	if slot <= now {
		return false
	}
	x.rnrSlot = slot
	d.cnt.RNRRetriesHeld++
	return true
}
