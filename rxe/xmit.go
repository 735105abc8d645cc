package rxe

import (
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// Transmit scheduling.
const (
	// qpBurst bounds the packets one QP sends per round, so that a QP with
	// a long message does not starve the others.
	qpBurst = 16
	// loopBudget bounds the looped-back packets one Output call handles, so
	// that two busy local QPs do not hold the device lock indefinitely.
	loopBudget = 256
)

// MaxFrameLen is the largest frame a device builds: Ethernet, IPv6, UDP,
// BTH plus the largest extension headers, a 4096-byte payload, pad and
// ICRC, rounded up. A frame of Output's with this capacity never grows.
const MaxFrameLen = 4352

// Output fills frames with packets the QPs want sent, at time now, and
// returns how many it filled and whether more output remains (call again).
// It takes QPs round-robin, at most qpBurst packets each per turn. Each
// frame's Data is reused as the buffer (appended to from length 0), so
// callers keep the frames between calls and Output does not allocate once
// the buffers have grown to MaxFrameLen. Packets to one of the device's own
// GIDs are delivered internally and do not use a frame.
func (d *Device) Output(now qp.Time, frames []link.Frame) (n int, more bool) {
	d.mu.Lock()
	n, more = d.outputLocked(now, frames)
	d.mu.Unlock()
	return n, more
}

func (d *Device) outputLocked(now qp.Time, frames []link.Frame) (n int, more bool) {
	looped := 0
	if d.gsi.cm.HasOutput() {
		n, looped = d.acksBeforeMADs(now, frames, n, looped)
	}
	n, looped = d.outputGSI(now, frames, n, looped)
	for n < len(frames) && looped < loopBudget {
		x := d.popReady()
		if x == nil {
			return n, d.gsi.cm.HasOutput()
		}
		if x.dead {
			n, looped = d.outputAcks(now, x, frames, n, looped)
			continue
		}
		if d.holdRNRRetry(now, x) {
			d.noteDeadline(x) // Tick makes it ready at its slot
			continue
		}
		idle := false
		for k := 0; k < qpBurst && n < len(frames) && looped < loopBudget; k++ {
			if !x.q.Transmit(now, &d.txOut) {
				idle = true
				break
			}
			switch d.emit(now, x.sport, &frames[n]) {
			case emitFrame:
				n++
			case emitLoopback:
				looped++
			}
		}
		d.txOut.Pkt.Payload = nil
		d.noteDeadline(x)
		// A QP that ran out of packets waits for the next event to be
		// scheduled again, whatever Pending says, so that an engine that
		// reports output it does not produce cannot spin the device.
		if !idle && x.q.Pending(now) {
			d.markReady(x)
		}
	}
	return n, d.readyLen() > 0 || d.gsi.cm.HasOutput()
}

// outputAcks sends what a destroyed QP still owes (qp.QP.TransmitAck) into
// frames from n on, and queues it again if frames ran out first.
func (d *Device) outputAcks(now qp.Time, x *QP, frames []link.Frame, n, looped int) (int, int) {
	n, looped = d.emitAcks(now, x, frames, n, looped)
	if x.flushAcks = x.q.AckPending(); x.flushAcks {
		d.markReady(x)
	}
	return n, looped
}

// acksBeforeMADs sends, ahead of the connection manager's MADs, the
// acknowledgements the QPs waiting to send owe (qp.QP.TransmitAck). A
// program sees a message complete (its CQ) before the device's next output
// carries the ACK that answers it, and may disconnect at once; an RNIC, and
// rxe, send that ACK as they complete the message, so their DREQ never
// overtakes it. Here it would (MADs go first), and a peer that takes the
// DREQ first moves its QP to ERR and fails, flushed, the message the ACK
// was for. Only when MADs wait, which is seldom.
func (d *Device) acksBeforeMADs(now qp.Time, frames []link.Frame, n, looped int) (int, int) {
	for _, r := range []*qpRing{&d.ready, &d.retrying} {
		for i := r.hd; i < len(r.q) && n < len(frames) && looped < loopBudget; i++ {
			n, looped = d.emitAcks(now, r.q[i], frames, n, looped)
		}
	}
	return n, looped
}

// emitAcks puts the acknowledgements x owes (qp.QP.TransmitAck) into frames
// from n on, while frames and the loopback budget last.
func (d *Device) emitAcks(now qp.Time, x *QP, frames []link.Frame, n, looped int) (int, int) {
	for n < len(frames) && looped < loopBudget && x.q.TransmitAck(now, &d.txOut) {
		switch d.emit(now, x.sport, &frames[n]) {
		case emitFrame:
			n++
		case emitLoopback:
			looped++
		}
	}
	return n, looped
}

type emitResult uint8

const (
	emitDropped emitResult = iota
	emitFrame
	emitLoopback
)

// emit builds the frame for d.txOut, from UDP source port sport, into f, or
// loops it back.
func (d *Device) emit(now qp.Time, sport uint16, f *link.Frame) emitResult {
	out := &d.txOut
	av := out.AV
	if av == nil || int(av.SGIDIndex) >= len(d.gidIPs) {
		d.cnt.TxNoRoute++
		return emitDropped
	}
	a := &d.txAddr
	a.Src = d.gidIPs[av.SGIDIndex]
	a.Dst = av.DGID.Unmap()
	if !a.Dst.IsValid() || a.Src.Is4() != a.Dst.Is4() {
		d.cnt.TxNoRoute++
		return emitDropped
	}
	a.SrcPort = sport
	if d.fixedSport != 0 {
		a.SrcPort = d.fixedSport
	}
	a.DstPort = packet.UDPPort
	a.TrafficClass = av.TrafficClass
	switch {
	case out.Pkt.BTH.Opcode == packet.CNP:
		a.TrafficClass = d.cc.CNPDSCP << 2 // Not-ECT: a CNP is never marked
	case d.cc.ECN && a.TrafficClass&3 == packet.ECNNotECT:
		a.TrafficClass |= packet.ECNECT0
	}
	a.HopLimit = av.HopLimit
	if a.HopLimit == 0 {
		a.HopLimit = defaultHopLimit
	}
	a.FlowLabel = 0 // rxe writes 0; the AV's label only feeds the source port
	a.DF = true
	a.IPID = 0
	if a.Src.Is4() && d.fixedSport == 0 {
		d.ipid++
		a.IPID = d.ipid
	}
	if d.ownIP(a.Dst) {
		if d.loopBuf == nil {
			d.loopBuf = make([]byte, 0, MaxFrameLen)
		}
		d.loopBuf = packet.AppendFrame(d.loopBuf[:0], &d.txEth, a, &out.Pkt)
		d.cnt.LoopbackPackets++
		d.handleLocked(now, d.loopBuf, icrcCheck)
		return emitLoopback
	}
	f.Data = packet.AppendFrame(f.Data[:0], &d.txEth, a, &out.Pkt)
	f.IPIDUnknown = false
	return emitFrame
}

// markReady puts x on the ready list unless it is there. Called with mu
// held whenever something may have given x output.
// markReady queues x for Output: among the QPs retrying when its requester
// is (qp.QP.Resending), else among the others.
func (d *Device) markReady(x *QP) {
	if x.queued || (x.dead && !x.flushAcks) {
		return
	}
	x.queued = true
	if x.q.Resending() {
		d.retrying.push(x)
	} else {
		d.ready.push(x)
	}
}

// retryShare is how often Output's turn goes to a retrying QP while others
// wait: one turn in retryShare. QPs stuck in go-back-N or RNR retry (a
// thousand receivers without receive buffers, a partitioned peer) thus
// take at most that share of the device's output, however many they are,
// and the QPs making progress keep the rest; alone, they get every turn.
const retryShare = 4

// popReady returns the next QP to serve, or nil.
func (d *Device) popReady() *QP {
	d.turn++
	var x *QP
	if d.turn%retryShare == 0 || d.ready.len() == 0 {
		x = d.retrying.pop()
	}
	if x == nil {
		x = d.ready.pop()
	}
	if x != nil {
		x.queued = false
	}
	return x
}

func (d *Device) readyLen() int { return d.ready.len() + d.retrying.len() }

// qpRing is a FIFO of QPs that reuses its storage.
type qpRing struct {
	q  []*QP
	hd int
}

func (r *qpRing) push(x *QP) {
	if r.hd > 0 && len(r.q) == cap(r.q) {
		k := copy(r.q, r.q[r.hd:])
		clear(r.q[k:])
		r.q = r.q[:k]
		r.hd = 0
	}
	r.q = append(r.q, x)
}

func (r *qpRing) pop() *QP {
	if r.hd == len(r.q) {
		return nil
	}
	x := r.q[r.hd]
	r.q[r.hd] = nil
	r.hd++
	if r.hd == len(r.q) {
		r.q = r.q[:0]
		r.hd = 0
	}
	return x
}

func (r *qpRing) len() int { return len(r.q) - r.hd }

// HasOutput reports whether some QP may have packets to send.
func (d *Device) HasOutput() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.readyLen() > 0 || d.gsi.cm.HasOutput()
}
