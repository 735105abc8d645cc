package netsim

import (
	"bytes"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
)

// EthernetOverhead is the bytes a frame occupies on the wire beyond its own
// length: preamble and start delimiter (8), FCS (4) and the inter-frame gap
// (12). Serialization delay counts them, so a link's goodput is what a real
// Ethernet link of that rate carries.
const EthernetOverhead = 24

// PipeConfig describes one direction of a link.
type PipeConfig struct {
	// Bandwidth in bits per second; 0 means infinitely fast.
	Bandwidth int64
	// Delay is the propagation delay.
	Delay Time
	// QueueBytes and QueueFrames bound the output queue (frames waiting or
	// being serialized); 0 means unbounded. A frame that does not fit is
	// dropped (drop-tail).
	QueueBytes  int
	QueueFrames int
}

// DropCause says why a pipe dropped a frame.
type DropCause uint8

// Drop causes.
const (
	DropNone      DropCause = iota
	DropQueue               // the output queue was full
	DropLoss                // the fault model lost it (independent loss)
	DropBurst               // the fault model lost it (Gilbert-Elliott burst)
	DropPartition           // the link was partitioned when it was sent or arrived
)

func (c DropCause) String() string {
	switch c {
	case DropNone:
		return "none"
	case DropQueue:
		return "queue"
	case DropLoss:
		return "loss"
	case DropBurst:
		return "burst"
	case DropPartition:
		return "partition"
	}
	return "unknown"
}

// PipeCounters count what happened to the frames offered to a pipe.
type PipeCounters struct {
	Sent           uint64 `json:"sent"`            // frames offered
	SentBytes      uint64 `json:"sent_bytes"`      // bytes offered
	Delivered      uint64 `json:"delivered"`       // copies handed to the far end
	DeliveredBytes uint64 `json:"delivered_bytes"` // bytes of those copies
	DropQueue      uint64 `json:"drop_queue"`
	DropLoss       uint64 `json:"drop_loss"`
	DropBurst      uint64 `json:"drop_burst"`
	DropPartition  uint64 `json:"drop_partition"`
	Corrupted      uint64 `json:"corrupted"`              // copies delivered with flipped bits
	Duplicated     uint64 `json:"duplicated"`             // frames delivered twice
	Reordered      uint64 `json:"reordered"`              // copies given the fault model's reorder delay
	ECNMarked      uint64 `json:"ecn_marked"`             // frames marked CE by the queue's RED
	PauseFrames    uint64 `json:"pause_frames,omitempty"` // PFC PAUSEs delivered, which the far end's MAC consumes
	MaxQueueBytes  int    `json:"max_queue_bytes"`
}

// Dropped returns all drops, whatever the cause.
func (c *PipeCounters) Dropped() uint64 {
	return c.DropQueue + c.DropLoss + c.DropBurst + c.DropPartition
}

func (c *PipeCounters) add(o *PipeCounters) {
	c.Sent += o.Sent
	c.SentBytes += o.SentBytes
	c.Delivered += o.Delivered
	c.DeliveredBytes += o.DeliveredBytes
	c.DropQueue += o.DropQueue
	c.DropLoss += o.DropLoss
	c.DropBurst += o.DropBurst
	c.DropPartition += o.DropPartition
	c.Corrupted += o.Corrupted
	c.Duplicated += o.Duplicated
	c.Reordered += o.Reordered
	c.ECNMarked += o.ECNMarked
	c.PauseFrames += o.PauseFrames
	c.MaxQueueBytes = max(c.MaxQueueBytes, o.MaxQueueBytes)
}

// queued is a frame in a pipe's output queue: it leaves the queue when its
// serialization ends.
type queued struct {
	end   Time
	bytes int
}

// Pipe is one direction of a link: an output queue, a serializer and a wire
// from a port of one node to a port of another.
type Pipe struct {
	name     string
	index    int
	lane     int32 // the lane of the copies in flight (lane.go), in rsh
	net      *Network
	sh, rsh  *shard // the shards of the sending and the receiving node
	cfg      PipeConfig
	from, to NodeID
	toPort   int

	faults      *fault.Model
	partitioned bool

	red    RED         // ECN marking; Kmax == 0: none
	redRNG *fault.Rand // RED's draws

	// lossless, when set, makes the pipe a PFC port (pfc.go): frames wait
	// in its queue until the serializer takes them, and a PAUSE from the
	// far end stops it.
	lossless *lossless
	reverse  *Pipe // the link's other direction, which PAUSEs arrive on

	busyUntil  Time
	q          []queued // FIFO; q[qhead:] are in the queue
	qhead      int
	queueBytes int

	counters PipeCounters
}

// Name returns the pipe's name, "from->to".
func (p *Pipe) Name() string { return p.name }

// Index returns the pipe's position in the network's list of pipes.
func (p *Pipe) Index() int { return p.index }

// From and To return the nodes the pipe connects.
func (p *Pipe) From() NodeID { return p.from }

// To returns the node the pipe delivers to.
func (p *Pipe) To() NodeID { return p.to }

// Config returns the pipe's configuration.
func (p *Pipe) Config() PipeConfig { return p.cfg }

// Counters returns the pipe's counters.
func (p *Pipe) Counters() PipeCounters { return p.counters }

// SetFaults installs a fault model (nil removes it). The model's decisions
// apply to frames sent from now on.
func (p *Pipe) SetFaults(m *fault.Model) { p.faults = m }

// Faults returns the installed fault model, or nil.
func (p *Pipe) Faults() *fault.Model { return p.faults }

// SetPartitioned cuts (true) or heals (false) the pipe. While cut, frames
// sent and frames in flight that arrive are dropped.
func (p *Pipe) SetPartitioned(cut bool) {
	p.partitioned = cut
	p.sh.trace(TraceEvent{Kind: TracePartition, Pipe: p, Cut: cut})
}

// Partitioned reports whether the pipe is cut.
func (p *Pipe) Partitioned() bool { return p.partitioned }

// QueueBytes returns the bytes in the output queue now.
func (p *Pipe) QueueBytes() int {
	p.expire(p.sh.loop.now)
	return p.queueBytes
}

// BusyUntil returns when the serializer finishes the frames queued so far
// (on a paused PFC port, counting from the pause's end).
func (p *Pipe) BusyUntil() Time {
	now := p.sh.loop.now
	l := p.lossless
	if l == nil {
		return max(p.busyUntil, now)
	}
	t := max(p.busyUntil, now)
	if p.net.pfcMask == 0 {
		// One lossless class: everything waits out its pause.
		t = max(t, l.pausedUntil[PFCPriority])
	}
	for prio := range 8 {
		if p.net.pfcMask != 0 && l.pausedUntil[prio] > now {
			continue // a paused priority holds up no other
		}
		q := &l.q[prio]
		for _, w := range q.w[q.head:] {
			t += p.serialization(int(w.n))
		}
	}
	return t
}

func (p *Pipe) expire(now Time) {
	for p.qhead < len(p.q) && p.q[p.qhead].end <= now {
		p.queueBytes -= p.q[p.qhead].bytes
		p.qhead++
	}
	p.q, p.qhead = compactFIFO(p.q, p.qhead)
}

// compactFIFO keeps a FIFO held in a slice (q[head:] waiting) from growing
// without end: emptied, it starts again at the front; past half consumed
// (and more than 64 gone), the rest moves to the front.
func compactFIFO[T any](q []T, head int) ([]T, int) {
	switch {
	case head == len(q):
		return q[:0], 0
	case head > 64 && head*2 > len(q):
		n := copy(q, q[head:])
		return q[:n], 0
	}
	return q, head
}

// serialization returns how long n bytes take to send.
func (p *Pipe) serialization(n int) Time {
	if p.cfg.Bandwidth <= 0 {
		return 0
	}
	bits := int64(n+EthernetOverhead) * 8
	return Time((bits*int64(Second) + p.cfg.Bandwidth - 1) / p.cfg.Bandwidth)
}

// Send offers a frame to the pipe at the current time. The pipe copies it;
// the caller keeps its buffer.
//
// With a trace installed, the frame's Sum is taken now, while the sender's
// bytes are in the cache, rather than by its first trace a hop later.
func (p *Pipe) Send(frame []byte) {
	var c carried
	if p.sh.Trace != nil {
		c.sum, c.sumOK = frameSum(frame), true
	}
	p.send(frame, -1, c, -1)
}

// send is Send of a frame of which the network knows c. If owned is a
// buffer index (not -1), frame is that pool buffer, and the pipe may keep
// it instead of copying frame: send reports whether it did. in is the port
// the frame came in by at the switch that sends it (-1: a host's frame),
// for the switch's PFC accounting.
func (p *Pipe) send(frame []byte, owned int32, c carried, in int32) bool {
	now := p.sh.loop.now
	pc := &p.counters
	pc.Sent++
	pc.SentBytes += uint64(len(frame))
	if p.lossless != nil {
		return p.enqueueLossless(frame, owned, c, in)
	}
	p.expire(now)
	n := len(frame)
	if (p.cfg.QueueBytes > 0 && p.queueBytes+n > p.cfg.QueueBytes) ||
		(p.cfg.QueueFrames > 0 && len(p.q)-p.qhead >= p.cfg.QueueFrames) {
		pc.DropQueue++
		ev := c.event(TraceDrop, p, frame)
		ev.Cause = DropQueue
		p.sh.trace(ev)
		return false
	}
	mark := p.redMarks()
	start := max(now, p.busyUntil)
	end := start + p.serialization(n)
	p.busyUntil = end
	p.q = append(p.q, queued{end: end, bytes: n})
	p.queueBytes += n
	pc.MaxQueueBytes = max(pc.MaxQueueBytes, p.queueBytes)
	return p.launch(frame, owned, c, mark, end)
}

// launch puts a frame whose serialization ends at end on the wire: the
// partition, the fault model's decisions, RED's mark (decided when it
// joined the queue), and its delivery a propagation delay later. It
// reports whether it kept owned (see send).
func (p *Pipe) launch(frame []byte, owned int32, fc carried, mark bool, end Time) bool {
	c := &p.counters
	n := len(frame)
	if p.partitioned {
		c.DropPartition++
		ev := fc.event(TraceDrop, p, frame)
		ev.Cause = DropPartition
		p.sh.trace(ev)
		return false
	}
	arrive := end + p.cfg.Delay
	if p.faults == nil {
		i := owned
		buf := frame
		if i < 0 {
			i, buf = p.sh.getBuf(n)
			copy(buf, frame)
		}
		if mark && p.markCE(buf) {
			fc = fc.changed()
		}
		p.deliverAt(arrive, pending{buf: i, n: int32(n), sum: fc.sum, flags: fc.flags()})
		return owned >= 0
	}
	lo, hi := corruptRange(frame)
	d := p.faults.Decide(hi - lo)
	if d.Drop {
		cause := DropLoss
		if d.Burst {
			cause = DropBurst
			c.DropBurst++
		} else {
			c.DropLoss++
		}
		ev := fc.event(TraceDrop, p, frame)
		ev.Cause = cause
		p.sh.trace(ev)
		return false
	}
	if len(d.Copies) > 1 {
		c.Duplicated++
	}
	kept := false
	for k := range d.Copies {
		cp := &d.Copies[k]
		pd := pending{n: int32(n), sum: fc.sum, flags: fc.flags()}
		if k > 0 {
			pd.flags |= pendDup
		}
		if cp.Reordered {
			c.Reordered++
			pd.flags |= pendReordered
		}
		var buf []byte
		if k == len(d.Copies)-1 && owned >= 0 && len(cp.FlipBits) == 0 {
			// The last copy, unchanged, can be the frame itself: the
			// others were copied from it already.
			pd.buf, buf, kept = owned, frame, true
		} else {
			pd.buf, buf = p.sh.getBuf(n)
			copy(buf, frame)
		}
		if mark && p.markCE(buf) {
			pd.flags &^= pendSum | pendSeen
		}
		// Two flips can meet on one bit (see flip) and cancel out.
		if len(cp.FlipBits) > 0 {
			flip(buf[lo:hi], cp.FlipBits)
			if !bytes.Equal(buf[lo:hi], frame[lo:hi]) {
				pd.flags = pd.flags&^(pendSum|pendSeen) | pendCorrupt | pendFlipped
			}
		}
		p.deliverAt(arrive+Time(cp.Delay), pd)
	}
	return kept
}

// deliverAt schedules the delivery of pd (whose buffer the pipe owns) at
// time at.
func (p *Pipe) deliverAt(at Time, pd pending) {
	pd.pipe = int32(p.index)
	if p.rsh != p.sh {
		p.sh.cross(at, pd)
		return
	}
	p.sh.pend.atLane(p.lane, at, pd)
}

// deliver hands buf, pending as pd, to the far end (the caller frees it).
func (p *Pipe) deliver(buf []byte, pd pending) {
	c := &p.counters
	r := p.rsh // deliveries run in the receiver's shard
	ev := pd.carried().event(TraceDeliver, p, buf)
	if p.partitioned {
		c.DropPartition++
		ev.Kind, ev.Cause = TraceDrop, DropPartition
		r.trace(ev)
		return
	}
	c.Delivered++
	c.DeliveredBytes += uint64(len(buf))
	ev.Dup = pd.flags&pendDup != 0
	ev.Reordered = pd.flags&pendReordered != 0
	ev.Corrupt = pd.flags&pendCorrupt != 0
	if ev.Corrupt {
		c.Corrupted++
	}
	r.rx = pd.carried().traced(r.trace(ev))
	if p.reverse != nil && p.reverse.lossless != nil {
		// A PAUSE is the MAC's: it stops the port it arrives at, and no
		// node sees it.
		if enable, times, ok := packet.ParsePause(buf); ok {
			c.PauseFrames++
			p.reverse.pause(enable, times)
			r.rx = carried{}
			return
		}
	}
	r.rxIn = true
	p.net.nodes[p.to].Receive(p.toPort, buf)
	r.rx, r.rxIn = carried{}, false
}

// flip inverts bits of b (positions as fault.Copy.FlipBits counts them).
// The BTH's byte 4 (FECN, BECN, reserved) is masked out of the ICRC, so a
// flip there would go unnoticed; such a flip moves to the next byte (the
// destination QP), which the ICRC covers, so that every corruption the
// simulator injects is one a correct receiver must catch.
func flip(b []byte, bits []int) {
	for _, pos := range bits {
		if pos/8 == 4 && len(b) > 5 {
			pos += 8
		}
		fault.FlipBits(b, []int{pos})
	}
}

// corruptRange returns the byte range of a frame that corruption may touch:
// the UDP payload of a RoCE v2 frame (BTH to ICRC), or everything after the
// Ethernet header for other frames.
func corruptRange(f []byte) (int, int) {
	const eth = 14
	if len(f) < eth {
		return 0, 0
	}
	et := uint16(f[12])<<8 | uint16(f[13])
	switch {
	case et == 0x0800 && len(f) >= eth+20+8 && f[eth]>>4 == 4:
		ihl := int(f[eth]&0x0F) * 4
		if f[eth+9] == 17 && len(f) >= eth+ihl+8 {
			return eth + ihl + 8, len(f)
		}
	case et == 0x86DD && len(f) >= eth+40+8:
		if f[eth+6] == 17 {
			return eth + 40 + 8, len(f)
		}
	}
	return eth, len(f)
}
