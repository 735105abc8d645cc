package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/sim/netsim"
)

// readOverlaps reports whether an outstanding READ covers any of the n
// bytes at off.
func (f *flow) readOverlaps(off uint64, n int) bool {
	for i := f.completed; i < f.posted; i++ {
		r := &f.ops[i]
		if r.kind == opRead && !r.done && off < r.off+uint64(r.size) && r.off < off+uint64(n) {
			return true
		}
	}
	return false
}

// canPost reports whether the flow may post another operation now.
func (f *flow) canPost() bool {
	return !f.failed && f.posted < len(f.ops) && f.outstanding < f.wl.Window
}

// post posts operation f.posted.
func (f *flow) post(now netsim.Time) error {
	i := f.posted
	w := f.wl
	op := &f.ops[i]
	op.kind = w.drawOp(f.rng)
	op.size = w.drawSize(f.rng)
	if f.total > 0 {
		op.size = int(min(int64(op.size), f.total-f.queued))
		f.queued += int64(op.size)
	}
	op.postedAt = now
	if f.typ == qp.UD {
		op.size = min(op.size, int(f.mtu))
	}
	op.size = min(op.size, f.slot)
	slot := i % w.Window
	if f.bulk {
		slot = 0
	}
	buf := f.local.Bytes()[slot*f.slot : (slot+1)*f.slot]
	wr := qp.SendWR{ID: uint64(i), Opcode: opWR[op.kind], Flags: qp.SendSignaled, Imm: uint32(i)}
	if op.kind == opCAS || op.kind == opFADD {
		op.size = 8
	}
	if op.size > 0 {
		f.sge[0] = qp.SGE{Addr: f.local.Addr() + uint64(slot*f.slot), Length: uint32(op.size), LKey: f.local.LKey()}
		wr.SGL = f.sge[:] // PostSend copies it
	}
	switch op.kind {
	case opSend, opSendImm:
		fillPattern(buf[:op.size], uint32(f.id), uint32(i))
	case opWrite, opWriteImm:
		if f.bulk {
			break // bulk bytes, unchecked, into the shared sink at 0
		}
		fillPattern(buf[:op.size], uint32(f.id), uint32(i))
		op.off = uint64(f.rng.IntN(f.model.len() - op.size + 1))
		f.model.write(int(op.off), op.size, uint32(i))
	case opRead:
		// Poison the destination: the data must come from the responder.
		poison(buf[:op.size])
		op.off = uint64(f.rng.IntN(f.model.len() - op.size + 1))
		// From the run's arena, not the heap: a run of many READs made
		// its garbage collector run for these alone.
		op.expect = f.a.run.mem.overwritten(op.size)
		f.model.read(op.expect, int(op.off))
	case opCAS, opFADD:
		op.off = uint64(f.rng.IntN(f.model.len()/8)) * 8
		model := f.model.span(int(op.off), int(op.off)+8)
		cur := binary.LittleEndian.Uint64(model)
		op.orig = cur
		binary.LittleEndian.PutUint64(buf, 0xEEEEEEEEEEEEEEEE)
		if op.kind == opCAS {
			wr.CompareAdd = f.rng.Uint64()
			if f.rng.IntN(2) == 0 {
				wr.CompareAdd = cur // half of them succeed
			}
			wr.Swap = f.rng.Uint64()
			if cur == wr.CompareAdd {
				binary.LittleEndian.PutUint64(model, wr.Swap)
			}
		} else {
			wr.CompareAdd = f.rng.Uint64() >> f.rng.IntN(64)
			binary.LittleEndian.PutUint64(model, cur+wr.CompareAdd)
		}
	}
	if op.kind.modifies() && f.readOverlaps(op.off, op.size) {
		// A READ whose response is lost is executed again when it is
		// retried (IBTA 9.4.4): without a fence, a later WRITE or atomic to
		// the same bytes could change what the retried READ returns.
		wr.Flags |= qp.SendFence
		f.a.run.stats.fenced++
	}
	if f.remote != nil {
		wr.RemoteAddr = f.remote.Addr() + op.off
		wr.RKey = f.remote.RKey()
	}
	if f.typ == qp.UD {
		wr.AH = f.ah.AV()
		wr.RemoteQPN = f.qb.QPN()
		wr.RemoteQKey = udQKey
	}
	if op.kind.message() {
		op.msg = len(f.msgs)
		f.msgs = append(f.msgs, msgRec{seq: uint32(i), size: op.size, kind: op.kind})
	}
	if err := f.qa.PostSend(&wr); err != nil {
		return fmt.Errorf("flow %s: post %s #%d: %w", f.name, op.kind, i, err)
	}
	f.posted++
	f.outstanding++
	if f.a.run.stats.posted == 0 {
		f.a.run.stats.firstPost = now
	}
	f.a.run.stats.posted++
	f.a.run.logOp(f, "post", i, op.kind.String(), op.size)
	return nil
}

// pump posts what the window (and, in rate mode, the backlog) allows.
func (f *flow) pump(now netsim.Time) {
	for f.canPost() && (f.wl.rate == 0 || f.backlog > 0) {
		if err := f.post(now); err != nil {
			f.a.run.fail(err)
			return
		}
		if f.backlog > 0 {
			f.backlog--
		}
	}
}

// start begins the flow's operations at the workload's start time, or when
// the connection manager has connected the QPs if that is later.
func (f *flow) start(run *runState) {
	loop := run.w.loop
	loop.At(f.startAt, func() {
		f.started = true
		if f.connected {
			f.begin(run)
		}
	})
}

// begin starts posting.
func (f *flow) begin(run *runState) {
	loop := run.w.loop
	{
		if f.wl.rate == 0 {
			f.pump(loop.Now())
			f.a.h.kick()
			return
		}
		var tick func()
		due := 0
		tick = func() {
			due++
			f.backlog++
			f.pump(loop.Now())
			f.a.h.kick()
			if due < len(f.ops) && !f.failed {
				loop.After(f.wl.rate, tick)
			}
		}
		tick()
	}
}

// poison fills b with 0xEE, doubling what is filled with each copy.
func poison(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = 0xEE
	for k := 1; k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}
