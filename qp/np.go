package qp

import "github.com/softroce/softroce/packet"

// notifier is a QP's notification point: it turns CE marks on the packets
// it receives into CNPs to the QP that sent them.
type notifier struct {
	last    Time // when the last CNP was queued
	sent    bool // a CNP was ever queued (last is valid)
	pending bool // a CNP waits for Transmit
}

// cnpPad is the CNP's 16 reserved bytes (IBTA A17.9.3); encoding only
// reads it.
var cnpPad [packet.CNPPadLen]byte

// npReceive counts a CE mark on a packet the QP accepted for processing
// and, if the device's notification point is on, queues a CNP to the
// sending QP unless one went less than MinTimeBetweenCNPs ago. Only
// connected QPs answer: their peer QP is known and fixed. A peer QPN that
// is not an ordinary QP (0, 1, the multicast QPN) never gets one: older
// kernels read out of bounds on an unknown opcode to QPN 0xFFFFFF.
func (q *QP) npReceive(now Time, in *Incoming) {
	if packet.IPECN(in.IPHeader) != packet.ECNCE {
		return
	}
	q.counters.NpECNMarkedRocePackets++
	c := q.cfg.Congestion
	if c == nil || !c.NP || q.cfg.Type == UD {
		return
	}
	if st := q.attr.State; st != RTR && st != RTS && st != SQD && st != SQE {
		return
	}
	if d := q.attr.DestQPN & psnMask; d <= 1 || d == psnMask {
		return
	}
	n := &q.np
	if n.pending || (n.sent && now-n.last < c.MinTimeBetweenCNPs) {
		return
	}
	n.pending, n.sent, n.last = true, true, now
}

// npTransmit builds the pending CNP, if any, into out: BTH opcode 0x81,
// BECN set, P_Key 0xFFFF, the peer QP as destination, PSN 0, and 16
// reserved bytes, as ConnectX sends it.
func (q *QP) npTransmit(out *Outgoing) bool {
	if !q.np.pending {
		return false
	}
	q.np.pending = false
	out.AV = &q.attr.AV
	out.SrcPort = q.cfg.SrcPort
	p := &out.Pkt
	*p = packet.Packet{}
	p.BTH.Opcode = packet.CNP
	p.BTH.PKey = 0xFFFF
	p.BTH.BECN = true
	p.BTH.DestQP = q.attr.DestQPN & psnMask
	p.Payload = cnpPad[:]
	q.counters.NpCNPSent++
	return true
}

// ReceiveCNP hands the QP a congestion notification addressed to it. With
// the device's reaction point on, a connected QP that is sending cuts its
// rate (rp_cnp_handled); otherwise the CNP is counted in rp_cnp_ignored.
func (q *QP) ReceiveCNP(now Time) {
	c := q.cfg.Congestion
	st := q.attr.State
	if c == nil || !c.RP || q.cfg.Type == UD || (st != RTS && st != SQD) {
		q.counters.RpCNPIgnored++
		return
	}
	q.counters.RpCNPHandled++
	q.paceCNP(now)
}
