package sim

import (
	"bytes"
	"encoding/binary"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/sim/netsim"
)

// poll drains the host's CQ and handles each completion.
func (hr *hostRT) poll(now netsim.Time) {
	for {
		n := hr.cq.Poll(hr.wcs)
		for i := 0; i < n; i++ {
			wc := &hr.wcs[i]
			end := hr.endOf(wc.QPN)
			if end == nil {
				hr.run.violate(invCompletion, "", "completion for unknown QP %d on %s", wc.QPN, hr.info.Name)
				continue
			}
			if end.requester {
				end.f.sendDone(now, wc)
			} else {
				end.f.recvDone(now, wc)
			}
		}
		if n < len(hr.wcs) {
			return
		}
	}
}

// sendDone handles a requester completion.
func (f *flow) sendDone(now netsim.Time, wc *qp.WC) {
	run := f.a.run
	i := f.completed
	if wc.ID != uint64(i) || i >= f.posted {
		run.violate(invOrder, f.name, "completion for WR %d, expected WR %d (posting order)", wc.ID, i)
		if wc.ID >= uint64(f.posted) {
			return
		}
		i = int(wc.ID)
	}
	op := &f.ops[i]
	if op.done {
		run.violate(invOrder, f.name, "second completion for WR %d", i)
		return
	}
	op.done = true
	f.completed++
	f.outstanding--
	f.lastDone = now
	if wc.Status == qp.WCSuccess {
		f.bytesDone += uint64(op.size)
	}
	run.stats.complete(op, wc, now)
	run.logOp(f, "done", i, wc.Status.String(), int(wc.ByteLen))
	if f.failed && wc.Status != qp.WCWRFlushErr {
		run.violate(invCompletion, f.name, "after %s, WR %d completed with %s; the spec requires WR_FLUSH_ERR", f.firstErr, i, wc.Status)
	}
	if wc.Status != qp.WCSuccess {
		if !f.failed {
			f.failed = true
			f.firstErr = wc.Status
		}
	} else {
		slot := i % f.wl.Window
		if f.bulk {
			slot = 0
		}
		buf := f.local.Bytes()[slot*f.slot:]
		switch op.kind {
		case opRead:
			if !bytes.Equal(buf[:op.size], op.expect) {
				run.violate(invModel, f.name, "READ #%d of %d bytes at +%d returned data that differs from the reference model", i, op.size, op.off)
			}
		case opCAS, opFADD:
			if got := binary.LittleEndian.Uint64(buf); got != op.orig {
				run.violate(invModel, f.name, "%s #%d at +%d returned %#x, the reference model says %#x", op.kind, i, op.off, got, op.orig)
			}
		}
		if f.typ == qp.RC && op.kind.message() && f.msgs[op.msg].got == 0 {
			// The responder acknowledges a message only once it is placed
			// and its receive completed (IBTA 9.7.5.1.7).
			run.violate(invCompletion, f.name, "%s #%d completed before the responder received it", op.kind, i)
		}
		if want := wcOpcode(op.kind); wc.Opcode != want {
			run.violate(invCompletion, f.name, "WR %d (%s) completed with opcode %s", i, op.kind, wc.Opcode)
		}
	}
	if !f.failed {
		f.pump(now)
	}
	f.checkFinished(now)
}

func wcOpcode(k opKind) qp.WCOpcode {
	switch k {
	case opWrite, opWriteImm:
		return qp.WCRDMAWrite
	case opRead:
		return qp.WCRDMARead
	case opCAS:
		return qp.WCCompSwap
	case opFADD:
		return qp.WCFetchAdd
	}
	return qp.WCSend
}

func (f *flow) checkFinished(now netsim.Time) {
	if f.finished {
		return
	}
	if f.completed == f.posted && (f.posted == len(f.ops) || f.failed) {
		f.finished = true
		f.a.run.active--
		if f.a.run.active == 0 {
			f.a.run.idleAt = now
		}
		f.a.run.logOp(f, "finished", f.posted, f.firstErr.String(), 0)
	}
}

// recvDone handles a responder completion.
func (f *flow) recvDone(now netsim.Time, wc *qp.WC) {
	run := f.a.run
	if wc.Status != qp.WCSuccess {
		run.stats.recvErr++
		return // flushed: the QP is in error
	}
	run.stats.recvs++
	slot := int(wc.ID)
	if slot >= f.rdepth {
		run.violate(invCompletion, f.name, "receive completion for unknown WR %d", wc.ID)
		return
	}
	data := f.recv.Bytes()[slot*f.rslot : (slot+1)*f.rslot]
	if f.typ == qp.UD {
		if wc.ByteLen < grhLen {
			run.violate(invIntegrity, f.name, "UD receive of %d bytes: no room for the GRH", wc.ByteLen)
			return
		}
		data = data[grhLen:]
		wc.ByteLen -= grhLen
	}
	n := int(wc.ByteLen)
	if n > len(data) {
		run.violate(invIntegrity, f.name, "receive of %d bytes into a %d-byte buffer", n, len(data))
		return
	}
	data = data[:n]
	m := f.matchMessage(wc, data)
	if m != nil {
		m.got++
		if m.kind != opWriteImm && !checkPattern(data, uint32(f.id), m.seq) {
			run.violate(invIntegrity, f.name, "message #%d (%s, %d bytes): payload differs from what was sent", m.seq, m.kind, n)
		}
		if m.kind != opSend && wc.Imm != m.seq {
			run.violate(invIntegrity, f.name, "message #%d (%s): immediate %#x, sent %#x", m.seq, m.kind, wc.Imm, m.seq)
		}
		wantOp := qp.WCRecv
		if m.kind == opWriteImm {
			wantOp = qp.WCRecvRDMAImm
		}
		if wc.Opcode != wantOp {
			run.violate(invCompletion, f.name, "message #%d (%s) received with opcode %s", m.seq, m.kind, wc.Opcode)
		}
	}
	repost := func() {
		if f.qb.State() == qp.Err {
			return
		}
		if err := f.postRecv(wc.ID); err != nil {
			run.fail(err)
		}
	}
	if f.wl.RecvDelay == 0 {
		repost()
		return
	}
	id := wc.ID
	loop := run.w.loop
	loop.After(netsim.Time(f.wl.RecvDelay), func() {
		if f.qb.State() == qp.Err {
			return
		}
		if err := f.postRecv(id); err != nil {
			run.fail(err)
		}
		f.b.h.kick()
	})
}

// matchMessage finds which posted message a receive is. RC must deliver the
// next one, exactly once and in order. UC and UD may lose messages, and
// deliver what the network duplicated or reordered.
func (f *flow) matchMessage(wc *qp.WC, data []byte) *msgRec {
	run := f.a.run
	var seq uint32
	known := false
	switch {
	case wc.Flags&qp.WCWithImm != 0:
		seq, known = wc.Imm, true
	case len(data) >= 8:
		seq, known = binary.BigEndian.Uint32(data[4:]), binary.BigEndian.Uint32(data) == uint32(f.id)
	}
	if f.typ == qp.RC {
		if f.recvNext >= len(f.msgs) {
			run.violate(invExactlyOnce, f.name, "a message arrived when none was outstanding (duplicate delivery)")
			return nil
		}
		m := &f.msgs[f.recvNext]
		f.recvNext++
		if known && seq != m.seq {
			run.violate(invExactlyOnce, f.name, "message #%d arrived where #%d was next", seq, m.seq)
			return nil
		}
		if int(wc.ByteLen) != m.size {
			run.violate(invIntegrity, f.name, "message #%d: %d bytes arrived, %d were sent", m.seq, wc.ByteLen, m.size)
			return nil
		}
		return m
	}
	if !known {
		// Too short to carry its number, and UC and UD may lose, repeat or
		// reorder: it cannot be told apart from other short messages.
		run.stats.unidentified++
		return nil
	}
	for k := f.recvNext; k < len(f.msgs); k++ {
		if f.msgs[k].seq == seq {
			f.recvNext = k + 1
			return &f.msgs[k]
		}
	}
	// A duplicate or a message overtaken on the way: UD has no sequence
	// checks, and a UC responder takes any FIRST or ONLY packet whose PSN
	// is not the expected one as the start of a new message (IBTA 9.7.5,
	// rxe check_psn), so both deliver what the network duplicates or
	// reorders. Its content must still be intact.
	for k := range f.msgs {
		if f.msgs[k].seq == seq {
			run.stats.reordered++
			return &f.msgs[k]
		}
	}
	run.violate(invIntegrity, f.name, "%s message claims to be #%d, which was never sent", f.typ, seq)
	return nil
}
