package replay

import (
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// message is a request message rebuilt from its packets.
type message struct {
	first, last *Frame
	kind        packet.Kind
	payload     []byte
	npkts       int
}

// messages rebuilds request messages from one side's request frames in
// order. A frame outside a message (its FIRST was never seen) is ignored.
func messages(frames []*Frame) []*message {
	var out []*message
	var cur *message
	for _, c := range frames {
		info := c.Pkt.Info()
		if info.Pos == packet.PosFirst || info.Pos == packet.PosOnly {
			cur = &message{first: c, kind: info.Kind}
		}
		if cur == nil {
			continue
		}
		cur.payload = append(cur.payload, c.Pkt.Payload...)
		cur.npkts++
		if info.Pos == packet.PosLast || info.Pos == packet.PosOnly {
			cur.last = c
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

// pathMTU is the payload of the flow's FIRST and MIDDLE packets, or 1024
// when all its messages fit in one packet. It is never 0: it divides.
func pathMTU(frames []*Frame) qp.MTU {
	for _, c := range frames {
		if p := c.Pkt.Info().Pos; (p == packet.PosFirst || p == packet.PosMiddle) && len(c.Pkt.Payload) > 0 {
			return qp.MTU(len(c.Pkt.Payload))
		}
	}
	return 1024
}

// readResponds reports whether a read response with PSN psn answers the
// read request m, given the path MTU.
func readResponds(m *message, psn uint32, mtu qp.MTU) bool {
	d := packet.PSNDiff(psn, m.first.Pkt.BTH.PSN)
	return d >= 0 && int(d) < packet.ReadResponsePackets(m.first.Pkt.RETH.Length, int(mtu))
}

// firstSends drops the messages that are sent again (after a NAK, an RNR
// NAK or a timeout): a message whose first PSN is not after the newest
// first PSN before it. What the host's memory and receive queue must hold
// follows from each message once.
func firstSends(ms []*message) []*message {
	out := ms[:0:0]
	var newest uint32
	for i, m := range ms {
		psn := m.first.Pkt.BTH.PSN
		if i > 0 && packet.PSNDiff(psn, newest) <= 0 {
			continue
		}
		newest = psn
		out = append(out, m)
	}
	return out
}
