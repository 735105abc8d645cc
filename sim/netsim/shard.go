package netsim

import "fmt"

// A shard is the part of a network one Loop runs: its nodes, the pipes that
// leave them (output queues, serializers, faults), the deliveries to them,
// and the frame buffers and pending records of all of those. A network has
// one shard unless AddShard makes more; then each shard's loop may run on a
// goroutine of its own, a window of virtual time at a time.
//
// Shards meet only where a pipe leads from one to another, and such a pipe
// delivers no sooner than its propagation delay after it launches a frame:
// the lookahead. So a window of the lookahead's length ([t, t+lookahead))
// runs in every shard without anything from the others arriving in it; at
// its end, with every shard stopped, Exchange makes the frames that crossed
// ready, and each shard, at the start of its next window, Imports those
// sent to it and schedules their deliveries. What runs in a window, and in
// what order, depends only on the shards' states at its start: one
// goroutine running the shards one after another gives the same events,
// bit for bit, as a goroutine per shard.
//
// A frame crosses with its buffer, not a copy: its sender no longer
// touches it, and the shard that frees it hands it back to its own at the
// next Exchange.
type shard struct {
	net  *Network
	loop *Loop
	pend pendingFrames
	// serialID is the handler of PFC ports' serializer events (pfc.go).
	serialID HandlerID
	ev       TraceEvent // the event being traced: Trace's argument, not allocated per call
	idx      int32      // the shard's number
	// Frame buffers, in slabs (see getBuf), and the free ones by capacity
	// class; other shards' buffers this one freed, by shard, until the
	// next Exchange, and then until their shards take them back.
	chunks       [maxChunks]*[chunkSlabs]slab
	nslabs       int32
	newSlab      []int32 // by class: the slab whose slots are not all handed out yet, or -1
	freeBufs     [][]int32
	returns      [][]int32
	readyReturns [][]int32
	// rx is what the network knows of the frame being delivered to a node,
	// for a switch to pass along with it; rxIn says a delivery is going on.
	rx   carried
	rxIn bool
	// rxBuf is the buffer of the frame being delivered to a node, which the
	// node may take over (takeRx) while rxOwned.
	rxBuf   int32
	rxOwned bool
	// Trace, when set, is called for every drop, delivery and partition in
	// the shard (a delivery is the receiving shard's).
	Trace func(*TraceEvent)

	// Frames launched towards another shard in this window, until
	// Exchange; then those of the last window, ready for the shards they
	// go to to Import, and the earliest of their times. A frame keeps its
	// buffer (pd.buf) on the way.
	crossing []crossing
	ready    []crossing
	readyMin Time
}

// crossing is a frame in flight to another shard: its delivery, due at at.
type crossing struct {
	at Time
	pd pending
}

func (n *Network) newShard(loop *Loop) *shard {
	if len(n.shards) >= 1<<(31-shardShift) {
		panic("netsim: too many shards")
	}
	sh := &shard{net: n, loop: loop, idx: int32(len(n.shards)), readyMin: Never}
	for _, o := range n.shards {
		o.returns = append(o.returns, nil)
		o.readyReturns = append(o.readyReturns, nil)
	}
	sh.returns = make([][]int32, len(n.shards)+1)
	sh.readyReturns = make([][]int32, len(n.shards)+1)
	sh.pend.net, sh.pend.sh = n, sh
	sh.pend.id = loop.Handle(&sh.pend)
	sh.pend.laneID = loop.Handle((*laneHead)(&sh.pend))
	n.shards = append(n.shards, sh)
	return sh
}

// AddShard adds a shard that loop runs, and returns its number (the first
// shard, NewNetwork's, is 0). Put nodes in it with SetShard.
func (n *Network) AddShard(loop *Loop) int {
	n.newShard(loop)
	return len(n.shards) - 1
}

// ShardLoop returns the loop of shard k.
func (n *Network) ShardLoop(k int) *Loop { return n.shards[k].loop }

// SetShardTrace sets the Trace function of shard k (Network.Trace is shard
// 0's).
func (n *Network) SetShardTrace(k int, f func(*TraceEvent)) { n.shards[k].Trace = f }

// SetShard puts node id in shard k. Call it before connecting the node.
func (n *Network) SetShard(id NodeID, k int) error {
	if k < 0 || k >= len(n.shards) {
		return fmt.Errorf("node %s: no shard %d", n.names[id], k)
	}
	if len(n.ports[id]) > 0 {
		return fmt.Errorf("node %s: connected before it was put in shard %d", n.names[id], k)
	}
	n.shardOf[id] = int32(k)
	if sw, ok := n.nodes[id].(*Switch); ok {
		sw.sh = n.shards[k]
		sw.lane = sw.sh.pend.newLane()
	}
	return nil
}

// ShardOf returns the shard of node id.
func (n *Network) ShardOf(id NodeID) int { return int(n.shardOf[id]) }

// IntactAt is Intact for a node of any shard: during a Receive of node
// id, whether its frame arrived as its sender sent it.
func (n *Network) IntactAt(id NodeID) bool { return n.shards[n.shardOf[id]].Intact() }

// Lookahead returns the least propagation delay of the pipes between
// shards: how long a window may be. It is 0 when a pipe between shards has
// no delay (shards cannot run apart), and Never when no pipe crosses.
func (n *Network) Lookahead() Time {
	la := Never
	for _, p := range n.pipes {
		if p.sh != p.rsh {
			la = min(la, p.cfg.Delay)
		}
	}
	return la
}

// cross holds a frame launched towards another shard until Exchange.
func (n *shard) cross(at Time, pd pending) {
	n.crossing = append(n.crossing, crossing{at: at, pd: pd})
}

// Exchange ends a window: the frames that crossed between shards in it
// become ready for the shards they arrive in, each of which schedules
// their deliveries when it Imports them, at the start of its next window,
// on its own goroutine. Call it only while no shard's loop runs, and only
// after every shard imported what the last Exchange made ready.
func (n *Network) Exchange() {
	for _, sh := range n.shards {
		sh.ready, sh.crossing = sh.crossing, sh.ready[:0]
		for k := range sh.returns {
			sh.readyReturns[k], sh.returns[k] = sh.returns[k], sh.readyReturns[k][:0]
		}
		sh.readyMin = Never
		for i := range sh.ready {
			sh.readyMin = min(sh.readyMin, sh.ready[i].at)
		}
	}
}

// Ready returns the earliest delivery the last Exchange made ready, or
// Never: the next window starts no later.
func (n *Network) Ready() Time {
	t := Never
	for _, sh := range n.shards {
		t = min(t, sh.readyMin)
	}
	return t
}

// Import schedules the deliveries, in shard k, of the frames the last
// Exchange made ready for it, in the order they were launched (shard by
// shard). Every shard may import at the same time, each from the goroutine
// that runs it.
func (n *Network) Import(k int) {
	r := n.shards[k]
	for _, sh := range n.shards {
		for _, i := range sh.readyReturns[k] {
			r.putBuf(i)
		}
		for _, c := range sh.ready {
			if p := n.pipes[c.pd.pipe]; p.rsh == r {
				r.pend.atLane(p.lane, c.at, c.pd)
			}
		}
	}
}
