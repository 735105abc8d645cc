package replay

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// gsiQPN is QP1: connection management datagrams, which replays skip.
const gsiQPN = 1

// Side is one end of a flow: a host's address and its QP number.
type Side struct {
	Addr netip.Addr
	QPN  uint32
}

func (s Side) String() string { return fmt.Sprintf("%s qp %#x", s.Addr, s.QPN) }

// Flow is the traffic of one QP pair: RC or UC frames between two hosts with
// one UDP source port (rxe's source port is symmetric in the two QPNs),
// or UD datagrams between two QPs.
type Flow struct {
	Type qp.Type
	// A sent the flow's first frame; B is the other side.
	A, B   Side
	Frames []*Frame // capture order
	// Start says why the flow begins where an earlier one of the same
	// QPs ended (restarts), "" for the first.
	Start string
	// oobAfter: the flow's out-of-band records come after this frame
	// number (the end of the run before it, 0 for the first).
	oobAfter int
}

func (f *Flow) String() string {
	return fmt.Sprintf("%s %s <-> %s, %d frames", f.Type, f.A, f.B, len(f.Frames))
}

// Side returns the side at addr.
func (f *Flow) Side(addr netip.Addr) (host, peer Side, ok bool) {
	switch addr {
	case f.A.Addr:
		return f.A, f.B, true
	case f.B.Addr:
		return f.B, f.A, true
	}
	return Side{}, Side{}, false
}

// Responder returns the side that answered the flow's first request: the
// destination of its first request (for UD, of its first datagram).
func (f *Flow) Responder() Side {
	for _, c := range f.Frames {
		if !isResponse(&c.Pkt) {
			if c.Dst == f.A.Addr {
				return f.A
			}
			return f.B
		}
	}
	return f.B
}

// Flows splits the capture's RoCE frames into flows, in the order of their
// first frames. RC and UC frames are first split into one-way streams by
// addresses and UDP source port; a stream pairs with the reverse stream of
// the same source port (rxe's port is symmetric in the two QPNs), or, when
// the two hosts' ports differ (a peer that is not rxe), with the only
// unpaired reverse stream between the same hosts. UD datagrams pair by
// addresses and QPNs. Packets to or from QP1 (connection management) and
// other transports are left out. A QP pair only one side of which ever sent
// is left out too: its other QPN is unknown.
func (c *Capture) Flows() []*Flow {
	type stream struct {
		src, dst netip.Addr
		sport    uint16
		t        packet.Transport
	}
	type udKey struct {
		a, b   netip.Addr
		qa, qb uint32
	}
	// One-way RC/UC streams, in order of their first frames.
	var streams []stream
	seen := map[stream]bool{}
	for _, fr := range c.Frames {
		t := fr.Pkt.BTH.Opcode.Transport()
		if t != packet.TransportRC && t != packet.TransportUC {
			continue
		}
		st := stream{fr.Src, fr.Dst, fr.SrcPort, t}
		if !seen[st] {
			seen[st] = true
			streams = append(streams, st)
		}
	}
	pair := map[stream]int{} // stream -> flow id
	next := 0
	for _, st := range streams {
		rev := stream{st.dst, st.src, st.sport, st.t}
		if _, done := pair[st]; !done && seen[rev] {
			if _, taken := pair[rev]; !taken {
				pair[st], pair[rev] = next, next
				next++
			}
		}
	}
	unpaired := func(src, dst netip.Addr, t packet.Transport) []stream {
		var out []stream
		for _, st := range streams {
			if _, ok := pair[st]; !ok && st.src == src && st.dst == dst && st.t == t {
				out = append(out, st)
			}
		}
		return out
	}
	for _, st := range streams {
		if _, ok := pair[st]; ok {
			continue
		}
		if fwd, rev := unpaired(st.src, st.dst, st.t), unpaired(st.dst, st.src, st.t); len(fwd) == 1 && len(rev) == 1 {
			pair[st], pair[rev[0]] = next, next
			next++
		}
	}

	byID := map[int]*Flow{}
	byUD := map[udKey]*Flow{}
	var out []*Flow
	qpns := map[*Flow]map[netip.Addr]uint32{}
	for _, fr := range c.Frames {
		t := fr.Pkt.BTH.Opcode.Transport()
		var f *Flow
		switch t {
		case packet.TransportRC, packet.TransportUC:
			id, ok := pair[stream{fr.Src, fr.Dst, fr.SrcPort, t}]
			if !ok {
				continue
			}
			if f = byID[id]; f == nil {
				f = &Flow{Type: qp.RC}
				if t == packet.TransportUC {
					f.Type = qp.UC
				}
				byID[id] = f
			}
		case packet.TransportUD:
			if fr.Pkt.BTH.DestQP == gsiQPN || fr.Pkt.DETH.SrcQP == gsiQPN {
				continue
			}
			k := udKey{fr.Src, fr.Dst, fr.Pkt.DETH.SrcQP, fr.Pkt.BTH.DestQP}
			if fr.Dst.Less(fr.Src) {
				k = udKey{fr.Dst, fr.Src, fr.Pkt.BTH.DestQP, fr.Pkt.DETH.SrcQP}
			}
			if f = byUD[k]; f == nil {
				f = &Flow{Type: qp.UD}
				byUD[k] = f
			}
		default:
			continue
		}
		if len(f.Frames) == 0 {
			f.A, f.B = Side{Addr: fr.Src}, Side{Addr: fr.Dst}
			qpns[f] = map[netip.Addr]uint32{}
			out = append(out, f)
		}
		f.Frames = append(f.Frames, fr)
		qpns[f][fr.Dst] = fr.Pkt.BTH.DestQP
		if t == packet.TransportUD {
			qpns[f][fr.Src] = fr.Pkt.DETH.SrcQP
		}
	}
	var flows []*Flow
	for _, f := range out {
		qa, oka := qpns[f][f.A.Addr]
		qb, okb := qpns[f][f.B.Addr]
		if !oka || !okb {
			continue
		}
		f.A.QPN, f.B.QPN = qa, qb
		flows = append(flows, c.restarts(f)...)
	}
	return flows
}

// CheckOOB cross-checks the flow against the capture's out-of-band
// records: a record that names one of the flow's sides (its GID and QPN) must
// give the PSN of its first request, and a perftest record the
// remote key the peer's RETHs and AtomicETHs use for the sender's memory,
// at addresses from the record's on. It returns the records that matched,
// each once, and an error for the first one that disagrees.
func (c *Capture) CheckOOB(f *Flow) ([]OOBRecord, error) {
	var matched []OOBRecord
	for _, o := range c.OOB {
		if !f.inRun(o.No) {
			continue
		}
		// The GID names the side: the TCP exchange may run over another
		// address (rc_pingpong_ipv6 trades link-local GIDs over IPv4).
		s, _, ok := f.Side(o.GID)
		if !ok || o.QPN != s.QPN {
			continue
		}
		if psn, ok := f.firstPSN(s); ok && psn != o.PSN {
			return matched, fmt.Errorf("out-of-band record %s: the first request of %s has PSN %#06x", o, s, psn)
		}
		if o.Perftest {
			for _, fr := range f.Frames {
				if fr.Dst != s.Addr {
					continue
				}
				info := fr.Pkt.Info()
				var key uint32
				var va uint64
				switch {
				case info.Is(packet.HdrRETH):
					key, va = fr.Pkt.RETH.RKey, fr.Pkt.RETH.VA
				case info.Is(packet.HdrAtomicETH):
					key, va = fr.Pkt.AtomicETH.RKey, fr.Pkt.AtomicETH.VA
				default:
					continue
				}
				if key != o.RKey || va < o.VA {
					return matched, fmt.Errorf("out-of-band record %s: frame %d addresses rkey %#x va %#x", o, fr.No, key, va)
				}
			}
		}
		dup := false
		for _, m := range matched {
			m.No = o.No
			dup = dup || m == o
		}
		if !dup { // perftest sends its record again at every synchronisation
			matched = append(matched, o)
		}
	}
	return matched, nil
}

// inRun reports whether frame no may hold a record of f's run: after the
// run before it and before f's own last frame.
func (f *Flow) inRun(no int) bool {
	return no > f.oobAfter && no <= f.Frames[len(f.Frames)-1].No
}

// firstPSN is the PSN of the first request s sent in f, which its
// connection record (out-of-band or rdma_cm) must have announced.
func (f *Flow) firstPSN(s Side) (uint32, bool) {
	if first := firstRequest(sentBy(f.Frames, s.Addr)); first != nil {
		return first.Pkt.BTH.PSN, true
	}
	return 0, false
}

func sentBy(fs []*Frame, a netip.Addr) []*Frame {
	var out []*Frame
	for _, c := range fs {
		if c.Src == a {
			out = append(out, c)
		}
	}
	return out
}

func isResponse(p *packet.Packet) bool {
	switch p.Info().Kind {
	case packet.KindAck, packet.KindAtomicAck, packet.KindReadResponse:
		return true
	}
	return false
}

// Lossy reports whether the flow shows loss: a NAK, a request PSN sent
// twice or a gap in a side's request PSNs. The requester of a lossy flow
// cannot be rebuilt (its messages have packets the capture lacks); its
// responder can be replayed with Options.ResponderOnly.
func (f *Flow) Lossy() bool {
	if f.Type == qp.UD {
		return false
	}
	next := map[netip.Addr]uint32{}
	seen := map[netip.Addr]bool{}
	for _, c := range f.Frames {
		p := &c.Pkt
		if p.Info().Is(packet.HdrAETH) && p.AETH.Syndrome.IsNAK() {
			return true
		}
		if isResponse(p) {
			continue
		}
		if seen[c.Src] && p.BTH.PSN != next[c.Src] {
			return true
		}
		seen[c.Src] = true
		n := uint32(1)
		if p.Info().Kind == packet.KindReadRequest {
			n = uint32(packet.ReadResponsePackets(p.RETH.Length, int(pathMTU(f.Frames))))
		}
		next[c.Src] = (p.BTH.PSN + n) & 0xFFFFFF
	}
	return false
}
