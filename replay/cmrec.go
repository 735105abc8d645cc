package replay

// cmrec.go: what a capture's rdma_cm exchange says about its QPs. A flow
// connected with the connection manager has no out-of-band TCP record;
// its REQ and REP carry the same facts (each side's QPN and first PSN, the
// path MTU, the read/atomic depths), and replay checks them as it checks
// out-of-band records.

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// CMRecord is one side's half of a connection as its REQ or REP says it.
type CMRecord struct {
	No   int        // frame number
	From netip.Addr // the sender: the active side for a REQ
	Kind packet.CMAttr
	QPN  uint32
	// PSN is the first PSN the sender expects to receive: its peer's
	// first send (a REQ's starting PSN becomes the passive side's send
	// PSN, a REP's the active side's, as the captures show).
	PSN uint32
	// MTU is the REQ's path MTU in bytes (0 in a REP, which has none).
	MTU int
	// ResponderResources and InitiatorDepth are the READ/atomic requests
	// the sender serves and issues at once.
	ResponderResources, InitiatorDepth uint8
}

func (r CMRecord) String() string {
	name := "REQ"
	if r.Kind == packet.CMAttrREP {
		name = "REP"
	}
	s := fmt.Sprintf("%s #%d %s: qpn %#06x psn %#06x", name, r.No, r.From, r.QPN, r.PSN)
	if r.MTU != 0 {
		s += fmt.Sprintf(" mtu %d", r.MTU)
	}
	return s + fmt.Sprintf(" responder resources %d initiator depth %d", r.ResponderResources, r.InitiatorDepth)
}

// cmRecords finds the REQs and REPs among the frames to QP 1. A frame
// that is no well-formed CM MAD is not one (it is dropped, as the
// kernel's CM drops it).
func cmRecords(frames []*Frame) []CMRecord {
	var out []CMRecord
	for _, fr := range frames {
		if fr.Pkt.BTH.DestQP != 1 {
			continue
		}
		m, err := packet.ParseCMMAD(fr.Pkt.Payload)
		if err != nil {
			continue
		}
		switch m.AttrID() {
		case packet.CMAttrREQ:
			var req packet.CMReq
			if req.Decode(m.Data()) != nil {
				continue
			}
			out = append(out, CMRecord{No: fr.No, From: fr.Src, Kind: packet.CMAttrREQ, QPN: req.LocalQPN,
				PSN: req.StartingPSN, MTU: 128 << req.PathMTU,
				ResponderResources: req.ResponderResources, InitiatorDepth: req.InitiatorDepth})
		case packet.CMAttrREP:
			var rep packet.CMRep
			if rep.Decode(m.Data()) != nil {
				continue
			}
			out = append(out, CMRecord{No: fr.No, From: fr.Src, Kind: packet.CMAttrREP, QPN: rep.LocalQPN,
				PSN: rep.StartingPSN, ResponderResources: rep.ResponderResources, InitiatorDepth: rep.InitiatorDepth})
		}
	}
	return out
}

// CheckCM returns the REQ and REP that set up f, after checking that
// what they say agrees with the flow: each side's first request carries
// the PSN its peer's record expects, and no packet is longer than the
// REQ's path MTU. A REQ retransmitted returns once.
func (c *Capture) CheckCM(f *Flow) ([]CMRecord, error) {
	var matched []CMRecord
	for _, r := range c.CM {
		if !f.inRun(r.No) {
			continue
		}
		s, peer, ok := f.Side(r.From)
		if !ok || r.QPN != s.QPN {
			continue
		}
		if psn, ok := f.firstPSN(peer); ok && psn != r.PSN {
			return matched, fmt.Errorf("rdma_cm %s: the first request of %s has PSN %#06x", r, peer, psn)
		}
		if r.MTU != 0 {
			for _, fr := range f.Frames {
				if len(fr.Pkt.Payload) > r.MTU {
					return matched, fmt.Errorf("rdma_cm %s: frame %d carries %d bytes, more than the path MTU", r, fr.No, len(fr.Pkt.Payload))
				}
			}
		}
		dup := false
		for _, m := range matched {
			dup = dup || (m.Kind == r.Kind && m.From == r.From && m.QPN == r.QPN && m.PSN == r.PSN)
		}
		if !dup {
			matched = append(matched, r)
		}
	}
	return matched, nil
}
