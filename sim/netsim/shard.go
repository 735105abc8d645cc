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
// its end, with every shard stopped, Exchange hands the frames that crossed
// to the shards they arrive in, which schedule their deliveries. What runs
// in a window, and in what order, depends only on the shards' states at its
// start: one goroutine running the shards one after another gives the same
// events, bit for bit, as a goroutine per shard.
type shard struct {
	net  *Network
	loop *Loop
	pend pendingFrames
	// serialID is the handler of PFC ports' serializer events (pfc.go).
	serialID HandlerID
	ev       TraceEvent // the event being traced: Trace's argument, not allocated per call
	// Frame buffers, in slabs (see getBuf), and the free ones by capacity
	// class.
	slabs    []slab
	newSlab  []int32 // by class: the slab whose slots are not all handed out yet, or -1
	freeBufs [][]int32
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

	// Frames launched towards another shard in this window, their bytes
	// in crossBytes, until Exchange.
	crossing   []crossing
	crossBytes []byte
}

// crossing is a frame in flight to another shard: its delivery, due at at,
// with its bytes at off in crossBytes (pd.buf is not used).
type crossing struct {
	at  Time
	pd  pending
	off int
}

func (n *Network) newShard(loop *Loop) *shard {
	sh := &shard{net: n, loop: loop}
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

// Shards returns how many shards there are.
func (n *Network) Shards() int { return len(n.shards) }

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

// cross takes a frame launched towards another shard off this one: its
// bytes are copied out and its buffer freed, until Exchange.
func (n *shard) cross(p *Pipe, at Time, pd pending) {
	off := len(n.crossBytes)
	n.crossBytes = append(n.crossBytes, n.buf(pd.buf, pd.n)...)
	n.putBuf(pd.buf)
	n.crossing = append(n.crossing, crossing{at: at, pd: pd, off: off})
}

// Exchange hands every frame that crossed between shards since the last
// Exchange to the shard it arrives in, in the order they were launched
// (shard by shard), and schedules their deliveries there. Call it only
// while no shard's loop runs, at the end of a window: the deliveries are
// due no sooner than the window's end.
func (n *Network) Exchange() {
	for _, sh := range n.shards {
		for _, c := range sh.crossing {
			p := n.pipes[c.pd.pipe]
			r := p.rsh
			i, buf := r.getBuf(int(c.pd.n))
			copy(buf, sh.crossBytes[c.off:c.off+int(c.pd.n)])
			c.pd.buf = i
			r.pend.atLane(p.lane, c.at, c.pd)
		}
		sh.crossing, sh.crossBytes = sh.crossing[:0], sh.crossBytes[:0]
	}
}
