package netsim

import (
	"fmt"
	"net/netip"
)

// SwitchCounters count a switch's forwarding decisions.
type SwitchCounters struct {
	Forwarded uint64 `json:"forwarded"`
	Flooded   uint64 `json:"flooded"`
	Unknown   uint64 `json:"unknown"` // frames for no known host: dropped
	Hairpin   uint64 `json:"hairpin"` // frames whose way out is the port they came in on: dropped
	ECMP      uint64 `json:"ecmp"`    // frames forwarded by a hash over equal-cost ports
}

// Switch is an Ethernet switch with static forwarding: it sends a frame out
// of the port towards its destination MAC address, or, for a MAC it was not
// told (a device that addresses frames by IP only), its destination IP
// address; broadcast and multicast frames go out of every other port. Where
// several ports lead to the destination on shortest paths (a fat-tree, a
// leaf-spine fabric), it picks one by a hash of the frame's IP addresses,
// protocol and UDP ports, seeded by the switch, as data-centre switches do
// ECMP: one RoCE QP (one UDP source port) keeps one path, and different
// QPs spread. Its output queues are its ports' pipes.
type Switch struct {
	net  *Network
	sh   *shard
	id   NodeID
	outs []*Pipe
	// Forwarding tables: a port, or -1-g for ECMP group g. The keys are
	// integers (a MAC, an IPv4 address), which hash several times faster
	// than arrays or netip.Addrs: a lookup per frame and hop.
	byMAC map[uint64]int
	byIP4 map[uint32]int
	byIP6 map[netip.Addr]int
	// ip4 is byIP4 as an array from ip4Lo, when its addresses are few
	// and close together (a simulated data centre numbers its hosts in
	// order): an index instead of a hash, at every hop of every frame.
	// Entries not in byIP4 are noRoute.
	ip4      []int32
	ip4Lo    uint32
	groups   [][]int // ECMP groups: equal-cost ports
	groupIdx map[string]int
	latency  Time
	lane     int32 // the lane of the frames waiting out the latency (lane.go)
	counters SwitchCounters
	pfc      *switchPFC // flow control (pfc.go); nil: none
}

// group returns the forwarding entry of the ECMP group of ports (-1-g),
// sharing one group among the destinations that have the same ports.
func (s *Switch) group(ports []int) int {
	key := fmt.Sprint(ports)
	g, ok := s.groupIdx[key]
	if !ok {
		if s.groupIdx == nil {
			s.groupIdx = map[string]int{}
		}
		g = len(s.groups)
		s.groups = append(s.groups, append([]int(nil), ports...))
		s.groupIdx[key] = g
	}
	return -1 - g
}

// ecmpPort picks a port of group g for frame by its flow hash.
func (s *Switch) ecmpPort(g int, frame []byte) int {
	ports := s.groups[g]
	s.counters.ECMP++
	return ports[flowHash(frame, uint64(s.id))%uint64(len(ports))]
}

// flowHash hashes a frame's IP source and destination, protocol and (for
// UDP and TCP) ports with seed: the 5-tuple ECMP hashes, RoCE v2's varying
// part being the UDP source port each QP picks. Frames that are not IP
// hash their Ethernet addresses.
func flowHash(f []byte, seed uint64) uint64 {
	h := seed*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	mix := func(b []byte) {
		for _, c := range b {
			h ^= uint64(c)
			h *= 0x100000001B3
		}
	}
	et := uint16(f[12])<<8 | uint16(f[13])
	switch {
	case et == 0x0800 && len(f) >= 14+20+4:
		ihl := int(f[14]&0x0F) * 4
		mix(f[26:34])
		mix(f[23:24])
		if (f[23] == 17 || f[23] == 6) && len(f) >= 14+ihl+4 {
			mix(f[14+ihl : 14+ihl+4])
		}
	case et == 0x86DD && len(f) >= 14+40+4:
		mix(f[22:54])
		mix(f[20:21])
		if f[20] == 17 || f[20] == 6 {
			mix(f[54:58])
		}
	default:
		mix(f[:12])
	}
	// A final avalanche, so that the low bits the modulo uses depend on
	// every input bit.
	h ^= h >> 33
	h *= 0xFF51AFD7ED558CCD
	h ^= h >> 33
	return h
}

// AddSwitch adds a switch that forwards each frame latency after it arrives.
// Connect its ports, then call Network.Route.
func (n *Network) AddSwitch(name string, latency Time) *Switch {
	sw := &Switch{net: n, sh: n.shard, byMAC: map[uint64]int{}, byIP4: map[uint32]int{}, byIP6: map[netip.Addr]int{}, latency: latency,
		lane: n.pend.newLane()}
	sw.id = n.AddNode(name, sw)
	return sw
}

// ID returns the switch's node ID.
func (s *Switch) ID() NodeID { return s.id }

// Counters returns the switch's counters.
func (s *Switch) Counters() SwitchCounters { return s.counters }

func (s *Switch) learn(a Addr, port int) {
	s.byMAC[macKey(a.MAC[:])] = port
	if ip := a.IP.Unmap(); ip.Is4() {
		s.byIP4[ip4Key(ip.As4())] = port
	} else if ip.IsValid() {
		s.byIP6[ip] = port
	}
}

// lookup returns the forwarding entry for a frame to mac (6 bytes) or,
// if the switch does not know mac, to ip.
func (s *Switch) lookup(mac []byte, ip netip.Addr) (int, bool) {
	if out, ok := s.lookupMAC(mac); ok {
		return out, true
	}
	return s.lookupIP(ip)
}

// lookupMAC returns the forwarding entry for mac (6 bytes). softroce's
// devices leave the destination MAC zero (their links address by IP): no
// host has that MAC, so its lookup is skipped.
func (s *Switch) lookupMAC(mac []byte) (int, bool) {
	k := macKey(mac)
	if k == 0 {
		return 0, false
	}
	out, ok := s.byMAC[k]
	return out, ok
}

// lookupFrame returns the forwarding entry for frame: by its destination
// MAC, or its destination IP.
func (s *Switch) lookupFrame(frame []byte) (int, bool) {
	if out, ok := s.lookupMAC(frame[:6]); ok {
		return out, true
	}
	if len(frame) >= 14+20 && frame[12] == 0x08 && frame[13] == 0x00 {
		return s.lookupIP4(ip4Key([4]byte(frame[30:34]))) // IPv4, without a netip.Addr
	}
	if ip, ok := dstIP(frame); ok {
		return s.lookupIP(ip)
	}
	return 0, false
}

// lookupIP returns the forwarding entry for a frame to ip.
func (s *Switch) lookupIP(ip netip.Addr) (int, bool) {
	if ip.Is4() {
		return s.lookupIP4(ip4Key(ip.As4()))
	}
	out, ok := s.byIP6[ip]
	return out, ok
}

func (s *Switch) lookupIP4(k uint32) (int, bool) {
	if s.ip4 != nil {
		if d := k - s.ip4Lo; d < uint32(len(s.ip4)) && s.ip4[d] != noRoute {
			return int(s.ip4[d]), true
		}
		return 0, false
	}
	out, ok := s.byIP4[k]
	return out, ok
}

// noRoute marks an address of ip4's range that byIP4 does not hold.
const noRoute = -1 << 31

// maxDenseIP4 bounds ip4: 256 KiB per switch at most.
const maxDenseIP4 = 1 << 16

// denseIP4 makes ip4 from byIP4, if its addresses span at most
// maxDenseIP4.
func (s *Switch) denseIP4() {
	s.ip4 = nil
	if len(s.byIP4) == 0 {
		return
	}
	lo, hi := ^uint32(0), uint32(0)
	for k := range s.byIP4 {
		lo, hi = min(lo, k), max(hi, k)
	}
	if hi-lo >= maxDenseIP4 {
		return
	}
	s.ip4, s.ip4Lo = make([]int32, hi-lo+1), lo
	for i := range s.ip4 {
		s.ip4[i] = noRoute
	}
	for k, out := range s.byIP4 {
		s.ip4[k-lo] = int32(out)
	}
}

func macKey(mac []byte) uint64 {
	return uint64(mac[0])<<40 | uint64(mac[1])<<32 | uint64(mac[2])<<24 | uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

func ip4Key(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

func (n *Network) outsOf(id NodeID) []*Pipe {
	outs := make([]*Pipe, len(n.ports[id]))
	for i, p := range n.ports[id] {
		outs[i] = p.out
	}
	return outs
}

// Receive forwards a frame.
func (s *Switch) Receive(in int, frame []byte) {
	if len(frame) < 14 {
		s.counters.Unknown++
		return
	}
	if frame[0]&1 != 0 { // broadcast or multicast
		s.counters.Flooded++
		for i, p := range s.outs {
			if i != in {
				if s.latency == 0 {
					// A copy each: a pipe may change its own (an ECN mark).
					p.send(frame, -1, s.sh.rx, int32(in))
				} else {
					s.send(p, frame, int32(in))
				}
			}
		}
		return
	}
	out, ok := s.lookupFrame(frame)
	if !ok {
		s.counters.Unknown++
		return
	}
	if out < 0 {
		out = s.ecmpPort(-1-out, frame)
	}
	if out == in {
		s.counters.Hairpin++
		return
	}
	s.counters.Forwarded++
	s.send(s.outs[out], frame, int32(in))
}

// send forwards frame on p, passing on what the network knows of it (its
// Sum, if the trace of its delivery here computed it; whether it was
// corrupted on the way). A frame forwarded after the switch's latency
// keeps the buffer it arrived in, if the network lets the switch take it
// (once: a flooded frame is copied for the other ports).
func (s *Switch) send(p *Pipe, frame []byte, in int32) {
	c := s.sh.rx
	if s.latency == 0 {
		// The frame is the buffer being delivered: the pipe may keep it
		// instead of a copy (once; a flooded frame is copied for the
		// other ports).
		i, took := s.sh.takeRx()
		if !took {
			i = -1
		}
		if took && !p.send(frame, i, c, in) {
			s.sh.rxBuf, s.sh.rxOwned = i, true // not kept: the deliverer frees it
		} else if !took {
			p.send(frame, -1, c, in)
		}
		return
	}
	i, took := s.sh.takeRx()
	if !took {
		var buf []byte
		i, buf = s.sh.getBuf(len(frame))
		copy(buf, frame)
	}
	s.sh.pend.atLane(s.lane, s.sh.loop.now+s.latency, pending{
		pipe: int32(p.index), buf: i, n: int32(len(frame)), sum: c.sum, in: in, flags: pendForward | c.flags(),
	})
}

// dstIP returns the destination IP address of an IPv4 or IPv6 frame.
func dstIP(f []byte) (netip.Addr, bool) {
	et := uint16(f[12])<<8 | uint16(f[13])
	switch {
	case et == 0x0800 && len(f) >= 14+20:
		return netip.AddrFrom4([4]byte(f[30:34])), true
	case et == 0x86DD && len(f) >= 14+40:
		return netip.AddrFrom16([16]byte(f[38:54])).Unmap(), true
	}
	return netip.Addr{}, false
}

// nextPort returns the port a frame to a leaves by (the first of an ECMP
// group), or -1.
func (s *Switch) nextPort(a Addr) int {
	out, ok := s.lookup(a.MAC[:], a.IP.Unmap())
	if !ok {
		return -1
	}
	if out < 0 {
		out = s.groups[-1-out][0]
	}
	return out
}

// PathLatency returns how long a frame of n bytes takes from node from
// (leaving by its first port) to the host with address to over an idle
// network: at every hop its serialization and the link's delay, at every
// switch the forwarding latency (store and forward). It is the base of an
// ideal flow completion time. ok is false when no path leads there.
func (n *Network) PathLatency(from NodeID, to Addr, frameBytes int) (t Time, ok bool) {
	p := n.Out(from, 0)
	for hops := 0; p != nil && hops <= len(n.nodes); hops++ {
		t += p.serialization(frameBytes) + p.cfg.Delay
		sw, isSwitch := n.nodes[p.to].(*Switch)
		if !isSwitch {
			return t, true
		}
		t += sw.latency
		out := sw.nextPort(to)
		if out < 0 {
			return 0, false
		}
		p = sw.outs[out]
	}
	return 0, false
}
