package cm

import "github.com/softroce/softroce/packet"

// Counters count what the manager received, sent and refused. Received and
// Sent are indexed by attrIndex: REQ, MRA, REJ, REP, RTU, DREQ, DREP,
// SIDR_REQ, SIDR_REP, then any other attribute.
type Counters struct {
	Received [10]uint64
	Sent     [10]uint64
	// Malformed MADs: short, not CM, a version this stack does not speak.
	Malformed uint64
	// Unmatched messages named no connection this manager holds, or
	// one in a state that does not take them; they were dropped.
	Unmatched uint64
	// Duplicates: a REQ, REP, DREQ or SIDR_REQ seen before.
	Duplicates uint64
	// Retransmits of REQ, REP, DREQ and SIDR_REQ after their timeout.
	Retransmits uint64
	// Timeouts: exchanges given up after their retries.
	Timeouts uint64
	// Refused REQs and SIDR_REQs: no listener, stale, no resources.
	Refused uint64
	// OutputsDropped: MADs not queued because the output queue was full.
	OutputsDropped uint64
}

// attrIndex maps an attribute to its place in Received and Sent.
func attrIndex(a packet.CMAttr) int {
	if a >= packet.CMAttrREQ && a <= packet.CMAttrSIDRREP {
		return int(a - packet.CMAttrREQ)
	}
	return 9
}
