package replay

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// Options tune a replay.
type Options struct {
	// Strict compares whole frames from the IP header on, apart from the
	// IPv4 ID and the IP checksum and ICRC that cover it, instead of the
	// transport fields only.
	Strict bool
	// ResponderOnly replays the host as a responder only: its own requests
	// are neither posted nor compared, the peer's responses to them are not
	// fed, and only the host's responses are compared. This is what a
	// capture with loss allows: its requester's messages cannot be rebuilt
	// from packets some of which were never captured.
	ResponderOnly bool
	// OnMatch, when set, is called for every packet softroce sent as the
	// host did.
	OnMatch func(m Match)
}

// Match is a packet of the host that softroce reproduced.
type Match struct {
	Captured *Frame
	Ours     []byte // softroce's frame
}

// Difference is the first packet where softroce and the captured host part.
type Difference struct {
	// Captured is the host's packet; nil when softroce sent a packet the
	// host did not.
	Captured *Frame
	// Ours is softroce's frame; nil when it sent nothing where the host did.
	Ours []byte
	// Problems says what differs, one item per field.
	Problems []string
}

// Error describes the difference with both packets decoded.
func (d *Difference) Error() string {
	var b strings.Builder
	if d.Captured != nil {
		fmt.Fprintf(&b, "frame %d: softroce differs from the capture\n", d.Captured.No)
		fmt.Fprintf(&b, "  captured: %s\n", d.Captured)
	} else {
		b.WriteString("softroce sent a packet the capture does not have\n")
	}
	if d.Ours != nil {
		fmt.Fprintf(&b, "  softroce: %s\n", DescribeFrame(d.Ours))
	} else {
		b.WriteString("  softroce: (nothing to send)\n")
	}
	for _, p := range d.Problems {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// DescribeFrame decodes an Ethernet frame in one line, as Describe.
func DescribeFrame(data []byte) string {
	var f packet.Frame
	var p packet.Packet
	if err := packet.ParseFrame(data, &f); err != nil {
		return fmt.Sprintf("(unparsable frame: %v)", err)
	}
	if err := p.Decode(f.Transport); err != nil {
		return fmt.Sprintf("(undecodable packet: %v)", err)
	}
	a := f.Addressing()
	return fmt.Sprintf("%s -> %s %s", a.Src.Unmap(), a.Dst.Unmap(), Describe(&p))
}

// Uncaptured is a response of softroce's that the capture does not show.
type Uncaptured struct {
	Before *Frame // the captured response it came before
	Ours   []byte // softroce's frame
}

// Result is the outcome of replaying one side of a flow.
type Result struct {
	Flow       *Flow
	Host, Peer Side
	Fed        int // frames of the peer given to the device
	Matched    int // packets of the host softroce reproduced
	Skipped    int // frames of the host not compared (ResponderOnly)
	// AppWrites counts bytes of the host's memory that its application
	// changed between the peer's reads, as the read responses show.
	AppWrites int
	// Uncaptured are responses softroce sent that the capture lacks, with
	// ResponderOnly: the captured responses must be a subsequence of
	// softroce's, and those left out were lost before the capture point.
	Uncaptured []Uncaptured
	// Diff is the first difference; the replay stops there.
	Diff *Difference
	// Problems are what the checks after the walk found: completions,
	// data returned by reads and atomics, memory the peer wrote.
	Problems []string
	// Notes are what the replay inferred from the capture beyond its
	// defaults (a read/atomic depth, ...), each with the evidence.
	Notes []string
}

// OK reports whether softroce behaved as the captured host throughout.
func (r *Result) OK() bool { return r.Diff == nil && len(r.Problems) == 0 }

// Err returns nil for a replay without differences, or an error that says
// what differed.
func (r *Result) Err() error {
	if r.OK() {
		return nil
	}
	if r.Diff != nil {
		return fmt.Errorf("replay as %s: %w", r.Host, r.Diff)
	}
	return fmt.Errorf("replay as %s: %s", r.Host, strings.Join(r.Problems, "; "))
}

// Run replays the flow with softroce as the host at addr. The error is for
// a flow that cannot be rebuilt; differences are in the Result.
func Run(f *Flow, addr netip.Addr, o Options) (*Result, error) {
	s, err := newSession(f, addr, o)
	if err != nil {
		return nil, err
	}
	r := &Result{Flow: f, Host: s.host, Peer: s.peer, Notes: s.notes}
	s.walk(r)
	r.AppWrites = s.appWrites
	if r.Diff == nil {
		s.check(r)
	}
	return r, nil
}

// walk goes through the capture in order. A host message is posted when
// the capture shows its first packet, as the application posted it. After
// each frame fed and each post the device's output is drained at once (as
// over a link without delay). Requests and responses are compared as two
// streams, each in order: how the host interleaved them depends on its
// timing, not on the protocol.
func (s *session) walk(r *Result) {
	one := make([]link.Frame, 1)
	var reqQ, respQ [][]byte
	drain := func(now qp.Time) {
		for {
			k, _ := s.d.Output(now, one)
			if k == 0 {
				return
			}
			data := append([]byte(nil), one[0].Data...)
			var fr packet.Frame
			var p packet.Packet
			if packet.ParseFrame(data, &fr) != nil || p.Decode(fr.Transport) != nil {
				reqQ = append(reqQ, data) // shows up as a difference
				continue
			}
			if isResponse(&p) {
				respQ = append(respQ, data)
			} else {
				reqQ = append(reqQ, data)
			}
		}
	}
	for i, c := range s.flow.Frames {
		now := qp.Time(c.Time)
		s.d.Tick(now)
		drain(now)
		if c.Src == s.peer.Addr {
			if s.flow.Type == qp.UD && c.Pkt.BTH.DestQP != s.host.QPN {
				continue
			}
			if s.opt.ResponderOnly && isResponse(&c.Pkt) {
				continue
			}
			if err := s.postRecvFor(i); err != nil {
				r.Diff = &Difference{Captured: c, Problems: []string{err.Error()}}
				return
			}
			s.beforeFeed(c)
			before := s.d.Counters().RcvdPkts
			s.d.HandleFrame(now, link.Frame{Data: c.Data})
			r.Fed++
			if s.d.Counters().RcvdPkts == before {
				r.Diff = &Difference{Captured: c, Problems: []string{fmt.Sprintf(
					"softroce dropped the peer's frame %d, which the captured host answered or accepted", c.No)}}
				return
			}
			drain(now)
			continue
		}
		if s.opt.ResponderOnly && !isResponse(&c.Pkt) {
			r.Skipped++
			continue
		}
		if pw, ok := s.wrs[c]; ok {
			if err := s.x.PostSend(&pw.wr); err != nil {
				r.Diff = &Difference{Captured: c, Problems: []string{fmt.Sprintf("post the message of frame %d: %v", c.No, err)}}
				return
			}
			drain(now)
		}
		q := &reqQ
		if isResponse(&c.Pkt) {
			q = &respQ
		}
		if len(*q) == 0 {
			r.Diff = &Difference{Captured: c, Problems: []string{"softroce has nothing to send here"}}
			return
		}
		if s.opt.ResponderOnly && s.compare((*q)[0], c) != nil {
			// The captured responses must be a subsequence of softroce's:
			// those of ours before the one that matches were lost before
			// the capture point.
			for i := 1; i < len(*q); i++ {
				if s.compare((*q)[i], c) == nil {
					for _, f := range (*q)[:i] {
						r.Uncaptured = append(r.Uncaptured, Uncaptured{Before: c, Ours: f})
					}
					*q = (*q)[i:]
					break
				}
			}
		}
		ours := (*q)[0]
		*q = (*q)[1:]
		if d := s.compare(ours, c); d != nil {
			r.Diff = d
			return
		}
		r.Matched++
		if s.opt.OnMatch != nil {
			s.opt.OnMatch(Match{Captured: c, Ours: ours})
		}
	}
	if n := len(s.flow.Frames); n > 0 {
		drain(qp.Time(s.flow.Frames[n-1].Time))
	}
	if s.opt.ResponderOnly && len(respQ) > 0 {
		// Responses after the last captured one: lost the same way.
		for _, f := range respQ {
			r.Uncaptured = append(r.Uncaptured, Uncaptured{Ours: f})
		}
		respQ = nil
	}
	for _, q := range [][][]byte{reqQ, respQ} {
		if len(q) > 0 {
			r.Diff = &Difference{Ours: q[0], Problems: []string{fmt.Sprintf("softroce sent %d more packets than the captured host", len(q))}}
			return
		}
	}
}

// postRecvFor posts, when receives go lazily, the receive the peer's frame i
// takes, when the host took it (acceptedAt: not answered with an RNR NAK,
// its queue being empty then) and no receive was posted for that PSN yet.
func (s *session) postRecvFor(i int) error {
	p := &s.flow.Frames[i].Pkt
	if !s.lazyRecv || !p.Info().TakesRecvWQE() || s.recvTaken[p.BTH.PSN] || !s.acceptedAt(i) {
		return nil
	}
	if s.recvTaken == nil {
		s.recvTaken = map[uint32]bool{}
	}
	s.recvTaken[p.BTH.PSN] = true
	return s.postRecv()
}

// compare checks softroce's frame against the host's captured one.
func (s *session) compare(ours []byte, c *Frame) *Difference {
	var fr packet.Frame
	var p packet.Packet
	if err := packet.ParseFrame(ours, &fr); err != nil {
		return &Difference{Captured: c, Ours: ours, Problems: []string{fmt.Sprintf("softroce's frame does not parse: %v", err)}}
	}
	if err := p.Decode(fr.Transport); err != nil {
		return &Difference{Captured: c, Ours: ours, Problems: []string{fmt.Sprintf("softroce's packet does not decode: %v", err)}}
	}
	probs := compareFields(&p, &c.Pkt)
	if len(probs) == 0 && s.opt.Strict {
		probs = compareBytes(ours, c.Data)
	}
	if len(probs) > 0 {
		return &Difference{Captured: c, Ours: ours, Problems: probs}
	}
	return nil
}
