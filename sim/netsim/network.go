package netsim

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// NodeID names a node of a Network: its position in the order of AddNode.
type NodeID int

// Node is something frames arrive at: a host or a switch.
type Node interface {
	// Receive is called when a frame arrives on one of the node's ports (in
	// the order they were connected). frame is valid only during the call.
	Receive(port int, frame []byte)
}

// TraceKind says what a TraceEvent records.
type TraceKind uint8

// Trace kinds.
const (
	TraceDrop      TraceKind = iota + 1 // a frame was dropped (Cause says why)
	TraceDeliver                        // a copy arrived at the far end of a pipe
	TracePartition                      // a pipe was cut or healed
)

// TraceEvent is one thing that happened to a frame, reported as it happens
// (at the loop's current time).
type TraceEvent struct {
	Kind      TraceKind
	Pipe      *Pipe
	Frame     []byte // valid only during the trace call
	Cause     DropCause
	Dup       bool // the second copy of a duplicated frame
	Reordered bool
	Corrupt   bool
	Cut       bool // TracePartition: cut (true) or healed (false)

	sum   uint32 // Sum of Frame, if sumOK
	sumOK bool
	seen  bool // traced before, unchanged since (see SumKnown)
}

// Sum returns a fingerprint of the frame for the event log: the CRC-32
// (IEEE) of its first sumHead bytes and its last 4, or of all of it when
// it is short. The head holds every header up to the RoCE transport
// headers; a RoCE frame's last 4 bytes are its ICRC, a CRC the sender
// computed over the transport headers and the payload, so the fingerprint
// tells apart what the whole frame's CRC would, at the cost of 68 bytes
// instead of a payload's worth (a tenth of a large frame's simulation time
// went to it). A frame crosses several pipes unchanged (host to switch to
// host): the network remembers the sum with the frame, so that it is
// computed once, not once per trace.
func (ev *TraceEvent) Sum() uint32 {
	if !ev.sumOK {
		ev.sum, ev.sumOK = frameSum(ev.Frame), true
	}
	return ev.sum
}

// SumKnown reports whether the frame was traced on an earlier hop, its Sum
// carried with it: the frame is, byte for byte, one traced before.
func (ev *TraceEvent) SumKnown() bool { return ev.seen }

// sumHead is how much of a frame's start Sum covers.
const sumHead = 64

func frameSum(f []byte) uint32 {
	if len(f) <= sumHead+4 {
		return packet.UpdateCRC32(0, f)
	}
	return packet.UpdateCRC32(packet.UpdateCRC32(0, f[:sumHead]), f[len(f)-4:])
}

// port is one end of a link at a node.
type port struct {
	out *Pipe // the pipe leaving the node through this port
}

// Network is a set of nodes joined by links. Its nodes run in shards
// (shard.go), each on its own Loop: one, unless AddShard made more.
type Network struct {
	// shard is the first shard: the one NewNetwork's loop runs, and that
	// of every node not put in another.
	*shard
	shards  []*shard
	shardOf []int32 // by node
	// pfcMask is the lossless priorities the switches with PFC agree on
	// (pfcSet: some switch has PFC); 0: the single lossless class (pfc.go).
	pfcMask uint8
	pfcSet  bool
	nodes   []Node
	names   []string
	ports   [][]port
	pipes   []*Pipe
}

// NewNetwork returns an empty network driven by loop.
func NewNetwork(loop *Loop) *Network {
	n := &Network{}
	n.shard = n.newShard(loop)
	return n
}

// Loop returns the network's event loop.
func (n *Network) Loop() *Loop { return n.loop }

// AddNode adds a node and returns its ID.
func (n *Network) AddNode(name string, node Node) NodeID {
	n.nodes = append(n.nodes, node)
	n.names = append(n.names, name)
	n.ports = append(n.ports, nil)
	n.shardOf = append(n.shardOf, 0)
	return NodeID(len(n.nodes) - 1)
}

// NodeName returns the name a node was added with.
func (n *Network) NodeName(id NodeID) string { return n.names[id] }

// Node returns a node.
func (n *Network) Node(id NodeID) Node { return n.nodes[id] }

// Nodes returns how many nodes there are.
func (n *Network) Nodes() int { return len(n.nodes) }

// Connect joins a and b with a link whose a->b direction is ab and b->a
// direction ba. It returns the two pipes. Each node's new port number is its
// number of earlier links.
func (n *Network) Connect(a, b NodeID, ab, ba PipeConfig) (*Pipe, *Pipe) {
	pa := len(n.ports[a])
	pb := len(n.ports[b])
	fwd := n.newPipe(a, b, pb, ab)
	rev := n.newPipe(b, a, pa, ba)
	fwd.reverse, rev.reverse = rev, fwd
	n.ports[a] = append(n.ports[a], port{out: fwd})
	n.ports[b] = append(n.ports[b], port{out: rev})
	return fwd, rev
}

func (n *Network) newPipe(from, to NodeID, toPort int, cfg PipeConfig) *Pipe {
	p := &Pipe{
		name:   n.names[from] + "->" + n.names[to],
		index:  len(n.pipes),
		net:    n,
		cfg:    cfg,
		from:   from,
		to:     to,
		toPort: toPort,
		sh:     n.shards[n.shardOf[from]],
		rsh:    n.shards[n.shardOf[to]],
	}
	p.lane = p.rsh.pend.newLane() // its deliveries run in the receiver's shard
	n.pipes = append(n.pipes, p)
	return p
}

// Ports returns how many ports a node has.
func (n *Network) Ports(id NodeID) int { return len(n.ports[id]) }

// Out returns the pipe leaving node id through port i.
func (n *Network) Out(id NodeID, i int) *Pipe { return n.ports[id][i].out }

// Pipes returns every pipe, in creation order.
func (n *Network) Pipes() []*Pipe { return n.pipes }

// Pipe returns the pipe named "from->to", or nil.
func (n *Network) Pipe(name string) *Pipe {
	for _, p := range n.pipes {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Totals sums the counters of every pipe.
func (n *Network) Totals() PipeCounters {
	var t PipeCounters
	for _, p := range n.pipes {
		t.add(&p.counters)
	}
	return t
}

// trace reports ev, and returns the frame's Sum if known (passed in, or
// computed by the Trace function).
func (n *shard) trace(ev TraceEvent) (uint32, bool) {
	if n.Trace == nil {
		return ev.sum, ev.sumOK
	}
	n.ev = ev
	n.Trace(&n.ev)
	sum, ok := n.ev.sum, n.ev.sumOK
	n.ev = TraceEvent{}
	return sum, ok
}

// carried is what the network knows of a frame and carries with it from hop
// to hop: its Sum, once computed (by the first trace, or as a host sent it),
// whether it was traced, and whether a fault flipped bits in it on some hop.
type carried struct {
	sum     uint32
	sumOK   bool
	seen    bool
	flipped bool
}

// changed returns c for the frame after its bytes changed (an ECN mark, a
// fault's flip): its Sum is no longer known, nor was it traced as it is.
func (c carried) changed() carried {
	c.sumOK, c.seen = false, false
	return c
}

// traced returns c for the frame after a trace that found its Sum.
func (c carried) traced(sum uint32, ok bool) carried {
	c.sum, c.sumOK, c.seen = sum, ok, ok
	return c
}

// event returns a trace event of kind for frame on p, with what c knows.
func (c carried) event(kind TraceKind, p *Pipe, frame []byte) TraceEvent {
	return TraceEvent{Kind: kind, Pipe: p, Frame: frame, sum: c.sum, sumOK: c.sumOK, seen: c.seen}
}

// flags returns c as pending flags.
func (c carried) flags() uint8 {
	var f uint8
	if c.sumOK {
		f |= pendSum
	}
	if c.seen {
		f |= pendSeen
	}
	if c.flipped {
		f |= pendFlipped
	}
	return f
}

// carried returns what pd carries of its frame.
func (pd *pending) carried() carried {
	return carried{sum: pd.sum, sumOK: pd.flags&pendSum != 0, seen: pd.flags&pendSeen != 0, flipped: pd.flags&pendFlipped != 0}
}

// Intact reports, during a node's Receive, whether the frame arrived as its
// sender sent it: no fault flipped its bits on any hop. Switches change only
// what the ICRC leaves out (an ECN mark in the traffic class, the IPv4
// checksum), so a receiver may take an intact frame's ICRC as checked, the
// way a NIC checks it in hardware before the host sees the frame; only
// frames that were not intact need the check in software.
func (n *shard) Intact() bool { return n.rxIn && !n.rx.flipped }

// pending is a frame held until an event: a copy in flight to the far end of
// a pipe, or a frame a switch forwards after its latency. It names its pipe
// and buffer by index, so that the slots hold no pointers for the GC to
// scan or for write barriers to track.
type pending struct {
	pipe  int32  // index in Network.pipes
	buf   int32  // buffer index (Network.buf)
	n     int32  // frame length
	sum   uint32 // Sum of the frame, if flags&pendSum
	in    int32  // the port a forwarded frame came in by
	flags uint8
}

// pending flags.
const (
	pendForward   uint8 = 1 << iota // a switch sends it on pipe (else pipe delivers it)
	pendDup                         // the second copy of a duplicated frame
	pendReordered                   // given the fault model's reorder delay
	pendCorrupt                     // bits flipped on this pipe
	pendSum                         // sum holds the frame's Sum
	pendFlipped                     // bits flipped on this pipe or an earlier hop
	pendSeen                        // traced on an earlier hop, unchanged since
)

// pendingFrames keeps the network's pending frames in slots reused through
// a free list, and is the Handler of their events (the argument is the
// slot), so that a frame in flight costs no allocation.
type pendingFrames struct {
	net    *Network
	sh     *shard
	id     HandlerID
	laneID HandlerID // lane events (lane.go)
	slots  []pending
	free   []uint32
	lanes  []lane
}

// store puts pd in a free slot and returns the slot.
func (pf *pendingFrames) store(pd pending) uint32 {
	if k := len(pf.free); k > 0 {
		i := pf.free[k-1]
		pf.free = pf.free[:k-1]
		pf.slots[i] = pd
		return i
	}
	pf.slots = append(pf.slots, pd)
	return uint32(len(pf.slots) - 1)
}

// at schedules pd for time t, as an event of its own.
func (pf *pendingFrames) at(t Time, pd pending) {
	pf.sh.loop.Call(t, pf.id, uint64(pf.store(pd)))
}

// Fire delivers or forwards the frame in slot i. The buffer goes back to
// the pool unless a pipe or a switch took it over (see rxOwned).
func (pf *pendingFrames) Fire(i uint64) {
	pd := pf.slots[i]
	pf.free = append(pf.free, uint32(i))
	pf.fire(pd)
}

// fire delivers or forwards the frame pd holds.
func (pf *pendingFrames) fire(pd pending) {
	n := pf.sh
	p := pf.net.pipes[pd.pipe]
	buf := n.buf(pd.buf, pd.n)
	if pd.flags&pendForward != 0 {
		if !p.send(buf, pd.buf, pd.carried(), pd.in) {
			n.putBuf(pd.buf)
		}
		return
	}
	n.rxBuf, n.rxOwned = pd.buf, true
	p.deliver(buf, pd)
	if n.rxOwned {
		n.putBuf(pd.buf)
	}
	n.rxOwned = false
}

// takeRx takes over the buffer of the frame being delivered, if nobody has:
// a switch that forwards the frame later keeps it instead of a copy.
func (n *shard) takeRx() (int32, bool) {
	if !n.rxOwned {
		return 0, false
	}
	n.rxOwned = false
	return n.rxBuf, true
}

// bufClass is the granularity of the network's frame buffers: a buffer's
// capacity is a multiple of it, and a buffer is reused for frames of its
// capacity class, so that the pool stays as large as the frames in flight
// and an ACK does not hold a buffer the size of a full frame.
const bufClass = 256

// slab holds slabSlots frame buffers of one capacity class, back to back.
// Buffer i is slot i%slabSlots of slab i/slabSlots: finding a frame's bytes
// reads the small slab table, which stays in cache, where a slice header per
// buffer (as many as frames in flight) would cost a cache miss per frame.
type slab struct {
	size int // bytes per slot: the class times bufClass
	used int // slots handed out so far
	data []byte
}

const slabSlots = 64

// Buffer indexes name their shard in their top bits: a frame handed to
// another shard keeps its buffer, which goes back to its own shard when
// freed (see Exchange).
const (
	shardShift = 27
	localMask  = 1<<shardShift - 1
	chunkSlabs = 1024 // slabs per chunk of a shard's table
	maxChunks  = 1024
)

// slabOf returns the slab of buffer i, whichever shard's it is. A shard's
// slabs are in a table of fixed chunks, never moved, so that another shard
// may read a slab while this one adds others.
func (n *shard) slabOf(i int32) *slab {
	o := n
	if k := i >> shardShift; k != n.idx {
		o = n.net.shards[k]
	}
	j := (i & localMask) / slabSlots
	return &o.chunks[j/chunkSlabs][j%chunkSlabs]
}

// buf returns the first n bytes of buffer i.
func (n *shard) buf(i, size int32) []byte {
	s := n.slabOf(i)
	off := int(i%slabSlots) * s.size
	return s.data[off : off+int(size) : off+s.size]
}

// getBuf returns a buffer of length size, and its index.
func (n *shard) getBuf(size int) (int32, []byte) {
	c := max(1, (size+bufClass-1)/bufClass)
	for len(n.freeBufs) <= c {
		n.freeBufs = append(n.freeBufs, nil)
		n.newSlab = append(n.newSlab, -1)
	}
	if f := n.freeBufs[c]; len(f) > 0 {
		i := f[len(f)-1]
		n.freeBufs[c] = f[:len(f)-1]
		return i, n.buf(i, int32(size))
	}
	k := n.newSlab[c]
	if k < 0 {
		k = n.nslabs
		if k/chunkSlabs >= maxChunks {
			panic("netsim: more frame buffers than a shard holds")
		}
		if n.chunks[k/chunkSlabs] == nil {
			n.chunks[k/chunkSlabs] = new([chunkSlabs]slab)
		}
		n.chunks[k/chunkSlabs][k%chunkSlabs] = slab{size: c * bufClass, data: newSlabData(c)}
		n.nslabs++
		n.newSlab[c] = k
	}
	s := &n.chunks[k/chunkSlabs][k%chunkSlabs]
	i := n.idx<<shardShift | k*slabSlots + int32(s.used)
	if s.used++; s.used == slabSlots {
		n.newSlab[c] = -1
	}
	return i, n.buf(i, int32(size))
}

// putBuf frees buffer i: into this shard's pool, or, another shard's, onto
// the list that goes back to it at the next Exchange.
func (n *shard) putBuf(i int32) {
	if k := i >> shardShift; k != n.idx {
		n.returns[k] = append(n.returns[k], i)
		return
	}
	c := n.slabOf(i).size / bufClass
	n.freeBufs[c] = append(n.freeBufs[c], i)
}

// Addr is what a switch needs to know about a host to forward to it.
type Addr struct {
	MAC [6]byte
	IP  netip.Addr
}

// Route fills every switch's forwarding table: for each host address in
// hosts (keyed by the host's node), the port on the shortest path to it,
// breaking ties by lowest port number. Call it after every Connect.
func (n *Network) Route(hosts map[NodeID][]Addr) error {
	for s, node := range n.nodes {
		if sw, ok := node.(*Switch); ok {
			sw.outs = n.outsOf(NodeID(s))
		}
	}
	// The pipes into each node and each pipe's port number, once: a BFS
	// per host over them is O(nodes + pipes), so routing H hosts is
	// O(H x (nodes + pipes)) rather than a scan of every pipe per visited
	// node (a 2,048-host star took 21.7 s, 16,384 hosts would take hours).
	g := routeGraph{in: make([][]*Pipe, len(n.nodes)), port: make(map[*Pipe]int, len(n.pipes))}
	for _, p := range n.pipes {
		g.in[p.to] = append(g.in[p.to], p)
	}
	for from, pts := range n.ports {
		for i, pt := range pts {
			if pt.out != nil && pt.out.from == NodeID(from) {
				g.port[pt.out] = i
			}
		}
	}
	dist := make([]int, len(n.nodes))
	via := make([]int, len(n.nodes))
	queue := make([]NodeID, 0, len(n.nodes))
	var ports []int
	// Visit hosts in node order so that the result does not depend on map
	// iteration.
	for id := range n.nodes {
		addrs, ok := hosts[NodeID(id)]
		if !ok {
			continue
		}
		queue = n.bfs(NodeID(id), &g, dist, via, queue)
		for s, node := range n.nodes {
			sw, ok := node.(*Switch)
			if !ok || dist[s] < 0 {
				continue
			}
			// Every port towards a neighbour one hop nearer is an equal-cost
			// next hop (ECMP); a single one is the common case.
			ports = g.nextHops(NodeID(s), n, dist, ports[:0])
			out := via[s]
			if len(ports) > 1 {
				out = sw.group(ports)
			}
			for _, a := range addrs {
				sw.learn(a, out)
			}
		}
	}
	for s, node := range n.nodes {
		if sw, ok := node.(*Switch); ok {
			if len(sw.outs) == 0 {
				return fmt.Errorf("route: switch %s has no ports", n.names[s])
			}
			sw.denseIP4()
		}
	}
	return nil
}

// routeGraph is the network as Route's searches walk it.
type routeGraph struct {
	in   [][]*Pipe     // by node: the pipes into it, in creation order
	port map[*Pipe]int // a pipe's port number at its source
}

// nextHops appends to out, in port order, the ports of switch s that lead
// to a node one hop nearer the destination of the last search.
func (g *routeGraph) nextHops(s NodeID, n *Network, dist []int, out []int) []int {
	for i, pt := range n.ports[s] {
		p := pt.out
		if p == nil || p.from != s {
			continue
		}
		if d := dist[p.to]; d >= 0 && d == dist[s]-1 {
			if _, relay := n.nodes[p.to].(*Switch); relay || d == 0 {
				out = append(out, i)
			}
		}
	}
	return out
}

// bfs fills, for every node, its hop distance to dst (-1 if unreachable)
// and the port through which it forwards towards dst, reusing dist, via
// and queue's storage (returned for the next call).
func (n *Network) bfs(dst NodeID, g *routeGraph, dist, via []int, queue []NodeID) []NodeID {
	for i := range dist {
		dist[i], via[i] = -1, 0
	}
	dist[dst] = 0
	queue = append(queue[:0], dst)
	for head := 0; head < len(queue); head++ {
		cur := queue[head]
		// Only switches relay frames; hosts are leaves.
		if _, ok := n.nodes[cur].(*Switch); !ok && cur != dst {
			continue
		}
		// Every pipe into cur: its source forwards through that port.
		for _, p := range g.in[cur] {
			if dist[p.from] >= 0 {
				continue
			}
			dist[p.from] = dist[cur] + 1
			via[p.from] = g.port[p]
			queue = append(queue, p.from)
		}
	}
	return queue
}

// Name returns a node's name.
func (n *Network) Name(id NodeID) string { return n.names[id] }
