package netsim

import (
	"fmt"
	"net/netip"
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
}

// port is one end of a link at a node.
type port struct {
	out *Pipe // the pipe leaving the node through this port
}

// Network is a set of nodes joined by links, run by one Loop.
type Network struct {
	loop  *Loop
	nodes []Node
	names []string
	ports [][]port
	pipes []*Pipe
	free  [][]byte
	// Trace, when set, is called for every drop, delivery and partition.
	Trace func(*TraceEvent)
}

// NewNetwork returns an empty network driven by loop.
func NewNetwork(loop *Loop) *Network { return &Network{loop: loop} }

// Loop returns the network's event loop.
func (n *Network) Loop() *Loop { return n.loop }

// AddNode adds a node and returns its ID.
func (n *Network) AddNode(name string, node Node) NodeID {
	n.nodes = append(n.nodes, node)
	n.names = append(n.names, name)
	n.ports = append(n.ports, nil)
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
	}
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

func (n *Network) trace(ev TraceEvent) {
	if n.Trace != nil {
		n.Trace(&ev)
	}
}

// getBuf returns a buffer of length size from the free list.
func (n *Network) getBuf(size int) []byte {
	for k := len(n.free) - 1; k >= 0 && k >= len(n.free)-4; k-- {
		if b := n.free[k]; cap(b) >= size {
			n.free[k] = n.free[len(n.free)-1]
			n.free = n.free[:len(n.free)-1]
			return b[:size]
		}
	}
	return make([]byte, size, max(size, 2048))
}

func (n *Network) putBuf(b []byte) {
	if len(n.free) < 4096 {
		n.free = append(n.free, b)
	}
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
	// Visit hosts in node order so that the result does not depend on map
	// iteration.
	for id := range n.nodes {
		addrs, ok := hosts[NodeID(id)]
		if !ok {
			continue
		}
		dist, via := n.bfs(NodeID(id))
		for s, node := range n.nodes {
			sw, ok := node.(*Switch)
			if !ok || dist[s] < 0 {
				continue
			}
			for _, a := range addrs {
				sw.learn(a, via[s])
			}
		}
	}
	for s, node := range n.nodes {
		if sw, ok := node.(*Switch); ok && len(sw.outs) == 0 {
			return fmt.Errorf("route: switch %s has no ports", n.names[s])
		}
	}
	return nil
}

// bfs returns, for every node, its hop distance to dst (-1 if unreachable)
// and the port through which it forwards towards dst.
func (n *Network) bfs(dst NodeID) ([]int, []int) {
	dist := make([]int, len(n.nodes))
	via := make([]int, len(n.nodes))
	for i := range dist {
		dist[i] = -1
	}
	dist[dst] = 0
	queue := []NodeID{dst}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		// Every pipe into cur: its source forwards through that port.
		for _, p := range n.pipes {
			if p.to != cur || dist[p.from] >= 0 {
				continue
			}
			// Only switches relay frames; hosts are leaves.
			if _, ok := n.nodes[cur].(*Switch); !ok && cur != dst {
				continue
			}
			dist[p.from] = dist[cur] + 1
			via[p.from] = n.portOf(p)
			queue = append(queue, p.from)
		}
	}
	return dist, via
}

func (n *Network) portOf(p *Pipe) int {
	for i, pt := range n.ports[p.from] {
		if pt.out == p {
			return i
		}
	}
	return -1
}
