package replay

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/rxe"
)

// defaultRdAtomic is the read/atomic depth a replay gives a QP when the
// capture shows no more outstanding: perftest's and rxe's usual 16.
const defaultRdAtomic = 16

// rdAtomicDepth is the most READ and atomic requests from addr that were
// outstanding at once in frames (sent, their last response not yet
// captured), and the frame where that was first seen. A responder answers
// in PSN order, so a response with PSN p ends every request whose last
// response PSN is p or before. The replay's QPs need at least that depth
// (max_rd_atomic on the requester, max_dest_rd_atomic on the responder):
// with less softroce's requester stops where the captured host went on.
func rdAtomicDepth(frames []*Frame, addr netip.Addr, mtu int) (depth, at int) {
	var out []uint32 // each outstanding request's last response PSN
	for _, c := range frames {
		p := &c.Pkt
		k := p.Info().Kind
		switch {
		case c.Src == addr && (k == packet.KindReadRequest || k == packet.KindCompareSwap || k == packet.KindFetchAdd):
			n := 1
			if k == packet.KindReadRequest {
				n = packet.ReadResponsePackets(p.RETH.Length, mtu)
			}
			out = append(out, (p.BTH.PSN+uint32(n)-1)&0xFFFFFF)
			if len(out) > depth {
				depth, at = len(out), c.No
			}
		case c.Dst == addr && isResponse(p):
			keep := out[:0]
			for _, r := range out {
				if packet.PSNDiff(r, p.BTH.PSN) > 0 {
					keep = append(keep, r)
				}
			}
			out = keep
		}
	}
	return depth, at
}

// depthFor is the read/atomic depth to give a replayed QP: what the
// capture needs, at least defaultRdAtomic, at most the device's limit; and
// a note saying why when it is not the default.
func depthFor(frames []*Frame, addr netip.Addr, mtu int, role string) (int, string) {
	need, at := rdAtomicDepth(frames, addr, mtu)
	if need <= defaultRdAtomic {
		return defaultRdAtomic, ""
	}
	d := min(need, rxe.MaxQPRdAtom)
	return d, fmt.Sprintf("%s %d: %s had %d READ/atomic requests outstanding at frame %d", role, d, addr, need, at)
}
