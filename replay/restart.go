package replay

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// maxPSNStride is how far ahead of its newest request a requester's PSN
// may move within one run: go-back-N never skips forward, so a larger jump
// is a new QP's random starting PSN.
const maxPSNStride = 1 << 16

// restartGap is the pause after which a request for a PSN its peer had
// acknowledged starts a new run rather than retransmits: a retransmission
// follows the local ACK timeout, milliseconds at the usual timeout 14.
const restartGap = time.Second

// restarts splits f where its QP pair starts over. A capture may hold
// several runs with the same QP numbers one after another (a program that
// reconnects, captures merged with mergecap), which as one flow contradict
// each other's PSNs. A new run begins at a frame whose timestamp is
// earlier than the one before it (runs merged end to end), after an
// out-of-band record that names one of the pair's QPs (ibv_*_pingpong's or
// perftest's exchange before a run), or at a request whose PSN falls before
// the first request of the run in its direction, jumps ahead of the newest
// by more than maxPSNStride (a new starting PSN), or was acknowledged
// already and comes restartGap or more after the frame before it. Each
// piece says why it starts (Flow.Start).
func (c *Capture) restarts(f *Flow) []*Flow {
	type dir struct {
		first, newest uint32
		started       bool
		acked         uint32 // the peer's newest ACK (AETH) PSN
		anyAck        bool
	}
	var (
		out   []*Flow
		dirs  = map[netip.Addr]*dir{}
		start = 0
		why   = ""
	)
	cut := func(i int, next string) {
		piece := &Flow{Type: f.Type, A: f.A, B: f.B, Frames: f.Frames[start:i], Start: why}
		if start > 0 {
			piece.oobAfter = f.Frames[start-1].No
		}
		if piece.Frames[0].Src != piece.A.Addr {
			piece.A, piece.B = piece.B, piece.A
		}
		out = append(out, piece)
		start, why = i, next
		dirs = map[netip.Addr]*dir{}
	}
	for i, fr := range f.Frames {
		reason := ""
		if i > start {
			prev := f.Frames[i-1]
			switch {
			case fr.Time < prev.Time:
				reason = fmt.Sprintf("frame %d is older than frame %d: another run, merged after it", fr.No, prev.No)
			case c.oobBetween(f, prev.No, fr.No) != 0:
				reason = fmt.Sprintf("out-of-band record at frame %d: a new run", c.oobBetween(f, prev.No, fr.No))
			}
		}
		req := !isResponse(&fr.Pkt) && f.Type != qp.UD
		d := dirs[fr.Src]
		if reason == "" && req && d != nil && d.started {
			psn := fr.Pkt.BTH.PSN
			switch {
			case packet.PSNDiff(psn, d.first) < 0:
				reason = fmt.Sprintf("frame %d: PSN %#06x before the run's first, %#06x: a new run", fr.No, psn, d.first)
			case packet.PSNDiff(psn, d.newest) > maxPSNStride:
				reason = fmt.Sprintf("frame %d: PSN %#06x jumps from %#06x: a new run", fr.No, psn, d.newest)
			case d.anyAck && packet.PSNDiff(psn, d.acked) <= 0 && fr.Time-f.Frames[i-1].Time >= restartGap:
				reason = fmt.Sprintf("frame %d: PSN %#06x, acknowledged already, %v after the frame before: a new run",
					fr.No, psn, fr.Time-f.Frames[i-1].Time)
			}
		}
		if reason != "" && i > start {
			cut(i, reason)
			d = nil
		}
		if p := &fr.Pkt; p.Info().Is(packet.HdrAETH) && !p.AETH.Syndrome.IsNAK() {
			// An ACK from fr.Src acknowledges the other side's requests.
			other := f.A.Addr
			if fr.Src == f.A.Addr {
				other = f.B.Addr
			}
			if od := dirs[other]; od != nil && (!od.anyAck || packet.PSNDiff(fr.Pkt.BTH.PSN, od.acked) > 0) {
				od.acked, od.anyAck = fr.Pkt.BTH.PSN, true
			}
		}
		if req {
			if d = dirs[fr.Src]; d == nil {
				d = &dir{}
				dirs[fr.Src] = d
			}
			psn := fr.Pkt.BTH.PSN
			if !d.started {
				d.first, d.newest, d.started = psn, psn, true
			} else if packet.PSNDiff(psn, d.newest) > 0 {
				d.newest = psn
			}
		}
	}
	cut(len(f.Frames), "")
	return out
}

// oobBetween returns the frame number of an out-of-band record after frame
// from and before frame to that names one of f's QPs, or 0.
func (c *Capture) oobBetween(f *Flow, from, to int) int {
	for _, o := range c.OOB {
		if o.No <= from || o.No >= to {
			continue
		}
		if s, _, ok := f.Side(o.GID); ok && s.QPN == o.QPN {
			return o.No
		}
		if o.QPN == f.A.QPN && o.From == f.A.Addr || o.QPN == f.B.QPN && o.From == f.B.Addr {
			return o.No
		}
	}
	return 0
}
