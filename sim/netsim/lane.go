package netsim

import "github.com/softroce/softroce/internal/prefetch"

// A lane is a FIFO of pending frames whose times never decrease: the copies
// in flight on one pipe (serialized one after another, then one propagation
// delay), or the frames a switch forwards after its fixed latency. Only a
// lane's head is in the loop's heap, under the time and sequence number its
// frame was given when it was scheduled, so events run in exactly the order
// one heap event per frame gives, while the heap holds as many entries as
// there are busy lanes rather than frames in flight (tens of thousands in a
// fat-tree at load, where taking the earliest event was a sixth of the run).
type lane struct {
	q    []laneEntry
	head int
}

// laneEntry is a pending frame in a lane, with the time and sequence
// number of its event. It holds the frame's pending record itself, not a
// slot of pendingFrames: one memory access fewer per frame, where the
// simulation of a large network waits on memory more than it computes.
type laneEntry struct {
	at  Time
	seq uint64
	pd  pending
}

// newLane returns the index of a new, empty lane.
func (pf *pendingFrames) newLane() int32 {
	pf.lanes = append(pf.lanes, lane{})
	return int32(len(pf.lanes) - 1)
}

// atLane schedules pd for time t in lane ln. A frame due before the lane's
// last (a fault's extra delay took it out of order) gets an event of its
// own instead.
func (pf *pendingFrames) atLane(ln int32, t Time, pd pending) {
	l := &pf.lanes[ln]
	if n := len(l.q); n > l.head && t < l.q[n-1].at {
		pf.at(t, pd)
		return
	}
	loop := pf.sh.loop
	e := laneEntry{at: max(t, loop.now), seq: loop.reserve(), pd: pd}
	l.q = append(l.q, e)
	if len(l.q)-l.head == 1 {
		loop.callSeq(e.at, e.seq, pf.laneID, uint64(ln))
	}
}

// frameHeadLen is how much of a frame a delivery reads first: two cache
// lines hold Ethernet, IP, UDP, BTH and RETH.
const frameHeadLen = 128

// laneHead is the Handler of lane events: it takes the lane's head, puts
// the next frame's event in the heap, and delivers or forwards the head.
type laneHead pendingFrames

func (h *laneHead) Fire(ln uint64) {
	pf := (*pendingFrames)(h)
	l := &pf.lanes[ln]
	e := l.q[l.head]
	l.head++
	if l.head < len(l.q) {
		next := &l.q[l.head]
		pf.sh.loop.callSeq(next.at, next.seq, pf.laneID, ln)
		// The next frame's headers are what its delivery reads first
		// (a switch's MAC lookup, a host's parse). A frame another
		// shard wrote is in the other core's cache: ask for it now, a
		// lane event ahead (a parallel fat-tree run spent a tenth of
		// its time waiting for those lines). A frame of this shard is
		// in this core's caches, where a prefetch is only a cost.
		if next.pd.buf>>shardShift != pf.sh.idx {
			prefetch.Read(pf.sh.buf(next.pd.buf, min(next.pd.n, frameHeadLen)))
		}
	}
	l.q, l.head = compactFIFO(l.q, l.head)
	pf.fire(e.pd)
}
