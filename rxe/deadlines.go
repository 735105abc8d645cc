package rxe

import "github.com/softroce/softroce/qp"

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
//
// The heap is container/heap's binary heap written out for *QP: the same
// comparisons and swaps in the same order (so QPs due at the same instant
// come out as they always did, and runs replay), without an interface call
// for each (3-4% of a simulation of a thousand QPs).
type deadlineHeap []*QP

func (h deadlineHeap) less(i, j int) bool { return h[i].dlAt < h[j].dlAt }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dlIdx, h[j].dlIdx = i, j
}

func (h *deadlineHeap) push(x *QP) {
	x.dlIdx = len(*h)
	*h = append(*h, x)
	h.up(len(*h) - 1)
}

// pop removes and returns the QP with the earliest deadline.
func (h *deadlineHeap) pop() *QP { return h.remove(0) }

// remove removes and returns the QP at index i.
func (h *deadlineHeap) remove(i int) *QP {
	n := len(*h) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	old := *h
	x := old[n]
	old[n] = nil
	*h = old[:n]
	x.dlIdx = -1
	return x
}

// fix restores the order after the deadline of the QP at index i changed.
func (h deadlineHeap) fix(i int) {
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

func (h deadlineHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h deadlineHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
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
			d.timers.remove(x.dlIdx)
		}
	case x.dlIdx >= 0:
		if dl != x.dlAt {
			x.dlAt = dl
			d.timers.fix(x.dlIdx)
		}
	default:
		x.dlAt = dl
		d.timers.push(x)
	}
}

// dropDeadline takes a destroyed QP out of the timer queue.
func (d *Device) dropDeadline(x *QP) {
	if x.dlIdx >= 0 {
		d.timers.remove(x.dlIdx)
	}
}

// Tick runs the timers of every QP whose deadline has passed (retransmit,
// RNR wait), and the connection manager's, at time now. Each due QP is
// ticked once, even if its next deadline has passed too.
func (d *Device) Tick(now qp.Time) {
	d.mu.Lock()
	due := d.due[:0]
	for len(d.timers) > 0 && d.timers[0].dlAt <= now {
		due = append(due, d.timers.pop())
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
