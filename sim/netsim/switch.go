package netsim

import (
	"net/netip"
)

// SwitchCounters count a switch's forwarding decisions.
type SwitchCounters struct {
	Forwarded uint64 `json:"forwarded"`
	Flooded   uint64 `json:"flooded"`
	Unknown   uint64 `json:"unknown"` // frames for no known host: dropped
	Hairpin   uint64 `json:"hairpin"` // frames whose way out is the port they came in on: dropped
}

// Switch is an Ethernet switch with static forwarding: it sends a frame out
// of the port towards its destination MAC address, or, for a MAC it was not
// told (a device that addresses frames by IP only), its destination IP
// address; broadcast and multicast frames go out of every other port. Its
// output queues are its ports' pipes.
type Switch struct {
	net      *Network
	id       NodeID
	outs     []*Pipe
	byMAC    map[[6]byte]int
	byIP     map[netip.Addr]int
	latency  Time
	counters SwitchCounters
}

// AddSwitch adds a switch that forwards each frame latency after it arrives.
// Connect its ports, then call Network.Route.
func (n *Network) AddSwitch(name string, latency Time) *Switch {
	sw := &Switch{net: n, byMAC: map[[6]byte]int{}, byIP: map[netip.Addr]int{}, latency: latency}
	sw.id = n.AddNode(name, sw)
	return sw
}

// ID returns the switch's node ID.
func (s *Switch) ID() NodeID { return s.id }

// Counters returns the switch's counters.
func (s *Switch) Counters() SwitchCounters { return s.counters }

func (s *Switch) learn(a Addr, port int) {
	s.byMAC[a.MAC] = port
	if a.IP.IsValid() {
		s.byIP[a.IP.Unmap()] = port
	}
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
				s.send(p, frame)
			}
		}
		return
	}
	out, ok := s.byMAC[[6]byte(frame[:6])]
	if !ok {
		if ip, okIP := dstIP(frame); okIP {
			out, ok = s.byIP[ip]
		}
	}
	if !ok {
		s.counters.Unknown++
		return
	}
	if out == in {
		s.counters.Hairpin++
		return
	}
	s.counters.Forwarded++
	s.send(s.outs[out], frame)
}

// send forwards frame on p, passing on its CRC-32 if the trace of its
// delivery here computed it. A frame forwarded after the switch's latency
// keeps the buffer it arrived in, if the network lets the switch take it
// (once: a flooded frame is copied for the other ports).
func (s *Switch) send(p *Pipe, frame []byte) {
	sum, ok := s.net.rxSum, s.net.rxSumOK
	if s.latency == 0 {
		p.send(frame, -1, sum, ok)
		return
	}
	i, took := s.net.takeRx()
	if !took {
		var buf []byte
		i, buf = s.net.getBuf(len(frame))
		copy(buf, frame)
	}
	s.net.pend.at(s.net.loop.now+s.latency, pending{
		pipe: int32(p.index), buf: i, n: int32(len(frame)), sum: sum, flags: pendForward | sumFlag(ok),
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
