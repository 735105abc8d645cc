package qp_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// AddRule adds a rule and returns it (its Fired field counts firings).
func (h *Harness) AddRule(match Pred, nth int, act Action, arg int) *Rule {
	r := &Rule{Match: match, Nth: nth, Act: act, Arg: arg}
	h.Rules = append(h.Rules, r)
	return r
}

// Drop drops the nth frame matching m (nth 0: all of them).
func (h *Harness) Drop(m Pred, nth int) *Rule { return h.AddRule(m, nth, Drop, 0) }

// Dup delivers the nth frame matching m twice.
func (h *Harness) Dup(m Pred, nth int) *Rule { return h.AddRule(m, nth, Duplicate, 0) }

// Reorder holds the nth frame matching m until after more frames in the
// same direction have been sent.
func (h *Harness) Reorder(m Pred, nth, after int) *Rule { return h.AddRule(m, nth, Hold, after) }

// CorruptAt flips the byte off bytes into the transport part of the nth
// frame matching m.
func (h *Harness) CorruptAt(m Pred, nth, off int) *Rule { return h.AddRule(m, nth, Corrupt, off) }

// At runs fn once the fake clock reaches at.
func (h *Harness) At(at qp.Time, fn func()) { h.timed = append(h.timed, timedAction{at, fn}) }

func (h *Harness) errorf(format string, args ...any) {
	if len(h.Errors) < 20 {
		h.Errors = append(h.Errors, fmt.Sprintf("t=%d: ", h.Now)+fmt.Sprintf(format, args...))
	}
}

// encode turns what a QP transmitted into IP packet bytes.
func (h *Harness) encode(from int, out *qp.Outgoing) []byte {
	ep := h.eps[from]
	a := packet.Addressing{Src: ep.addr, SrcPort: out.SrcPort, HopLimit: 64, DF: true, IPID: uint16(len(h.Frames))}
	if out.AV != nil {
		a.Dst = out.AV.DGID
		if out.AV.HopLimit != 0 {
			a.HopLimit = out.AV.HopLimit
		}
		a.TrafficClass = out.AV.TrafficClass
	} else {
		h.errorf("%s transmitted %v without an address vector", ep.name, out.Pkt.BTH.Opcode)
		a.Dst = h.eps[1-from].addr
	}
	return packet.AppendIPPacket(nil, &a, &out.Pkt)
}

// transmit pulls up to Burst packets from endpoint i.
func (h *Harness) transmit(i int) bool {
	ep := h.eps[i]
	any := false
	for k := 0; k < h.Burst; k++ {
		pending := ep.qp.Pending(h.Now)
		var out qp.Outgoing
		ok := ep.qp.Transmit(h.Now, &out)
		// Pending promises what Transmit returns. The one tolerated miss:
		// Transmit found the next WR failing locally (a bad lkey, say),
		// which Pending cannot know without touching memory; after that
		// Pending must say false, or a runtime polling it would spin.
		if pending != ok && (ok || ep.qp.Pending(h.Now)) {
			h.errorf("%s: Pending=%v but Transmit=%v", ep.name, pending, ok)
		}
		if !ok {
			break
		}
		any = true
		data := h.encode(i, &out)
		f := &Frame{Seq: len(h.Frames), From: i, Time: h.Now, Data: data}
		var fr packet.Frame
		if err := packet.ParseIP(data, &fr); err != nil {
			h.errorf("%s sent an unparsable packet: %v", ep.name, err)
			continue
		}
		if err := f.Pkt.Decode(fr.Transport); err != nil {
			h.errorf("%s sent an undecodable packet %v: %v", ep.name, out.Pkt.BTH.Opcode, err)
			continue
		}
		if len(out.Pkt.Payload) != len(f.Pkt.Payload) {
			h.errorf("%s: payload length changed in encoding", ep.name)
		}
		h.Frames = append(h.Frames, f)
		if h.OnSend != nil {
			h.OnSend(f)
		}
		h.route(f)
	}
	return any
}

// route applies the script to a new frame and queues its deliveries.
func (h *Harness) route(f *Frame) {
	act, arg, claimed := Deliver, 0, false
	// Every matching rule counts the frame; the first whose turn it is acts.
	for _, r := range h.Rules {
		if !r.Match(f) {
			continue
		}
		r.seen++
		if !claimed && (r.Nth == 0 || r.seen == r.Nth) {
			act, arg, claimed = r.Act, r.Arg, true
			r.Fired++
		}
	}
	if !claimed && h.Fault != nil {
		act, arg = h.Fault(f)
	}
	// Frames held for reordering count down on every frame in their direction.
	for k := 0; k < len(h.held); k++ {
		hd := &h.held[k]
		if hd.f.From == f.From {
			hd.after--
		}
	}
	switch act {
	case Deliver:
		h.queue = append(h.queue, delivery{f, f.Data})
	case Drop:
		f.Fate = "dropped"
	case Duplicate:
		f.Fate = "duplicated"
		h.queue = append(h.queue, delivery{f, f.Data}, delivery{f, f.Data})
	case Hold:
		f.Fate = "held"
		h.held = append(h.held, held{f, arg})
	case Corrupt:
		f.Fate = "corrupted"
		d := append([]byte(nil), f.Data...)
		ipLen := packet.IPv4Len
		if d[0]>>4 == 6 {
			ipLen = packet.IPv6Len
		}
		off := ipLen + packet.UDPLen + arg
		if off >= len(d) {
			off = len(d) - 1
		}
		d[off] ^= 0x5A
		h.queue = append(h.queue, delivery{f, d})
	}
	h.releaseHeld(false)
}

// releaseHeld moves held frames whose count ran out (or all, when idle) to
// the delivery queue.
func (h *Harness) releaseHeld(all bool) bool {
	moved := false
	k := 0
	for _, hd := range h.held {
		if all || hd.after <= 0 {
			h.queue = append(h.queue, delivery{hd.f, hd.f.Data})
			moved = true
			continue
		}
		h.held[k] = hd
		k++
	}
	h.held = h.held[:k]
	return moved
}

// deliver hands the first queued frame to its destination.
func (h *Harness) deliver() {
	d := h.queue[0]
	h.queue = h.queue[1:]
	h.Now += h.Latency
	var fr packet.Frame
	if err := packet.ParseIP(d.data, &fr); err != nil {
		// Corruption touches the transport part only, so the IP and UDP
		// framing of every frame must parse.
		h.ParseDrops++
		h.errorf("frame #%d does not parse: %v", d.f.Seq, err)
		return
	}
	if !fr.ICRCOK() {
		h.ICRCDrops++
		return
	}
	var in qp.Incoming
	if err := in.Pkt.Decode(fr.Transport); err != nil {
		h.ParseDrops++
		h.errorf("frame #%d passed its ICRC check but does not decode: %v", d.f.Seq, err)
		return
	}
	dst := -1
	dstAddr := fr.Addressing().Dst
	for i, ep := range h.eps {
		if ep.addr == dstAddr {
			dst = i
		}
	}
	if dst < 0 || h.eps[dst].qp.QPN() != in.Pkt.BTH.DestQP {
		h.QPNDrops++
		h.errorf("frame #%d is addressed to %v QP %#x: nobody there", d.f.Seq, dstAddr, in.Pkt.BTH.DestQP)
		return
	}
	a := fr.Addressing()
	in.Src, in.Dst = a.Src, a.Dst
	in.IPHeader = fr.IP
	d.f.Delivered++
	d.f.DeliverAt = h.Now
	h.Deliveries = append(h.Deliveries, d.f)
	h.eps[dst].qp.Receive(h.Now, &in)
	if h.OnDeliver != nil {
		h.OnDeliver(d.f)
	}
}

// tick runs expired timers and timed actions.
func (h *Harness) tick() {
	for _, ep := range h.eps {
		if ep.qp.Deadline() <= h.Now {
			ep.qp.Tick(h.Now)
		}
	}
	k := 0
	var due []func()
	for _, ta := range h.timed {
		if ta.at <= h.Now {
			due = append(due, ta.fn)
			continue
		}
		h.timed[k] = ta
		k++
	}
	h.timed = h.timed[:k]
	for _, fn := range due {
		fn()
	}
}

func (h *Harness) nextDeadline() qp.Time {
	d := qp.Never
	for _, ep := range h.eps {
		d = min(d, ep.qp.Deadline())
	}
	for _, ta := range h.timed {
		d = min(d, ta.at)
	}
	return d
}

// Errors Run returns.
var (
	errSteps     = errors.New("step bound exceeded")
	errTime      = errors.New("time bound exceeded")
	errQuiescent = errors.New("wire idle and no timer armed before the goal was reached")
)

// Run drives the wire until done reports true (nil: until quiescent: no
// packet in flight or held and no timer armed). It returns an error when a
// bound is hit or the system goes quiet before done.
func (h *Harness) Run(done func() bool) error {
	start := h.steps
	for {
		h.steps++
		if h.steps-start > h.MaxSteps {
			return fmt.Errorf("%w (%d steps, t=%d)", errSteps, h.MaxSteps, h.Now)
		}
		if h.Now > h.MaxTime {
			return fmt.Errorf("%w (t=%d)", errTime, h.Now)
		}
		h.tick()
		h.A.poll(h.Now)
		h.B.poll(h.Now)
		if done != nil && done() {
			return nil
		}
		busy := h.transmit(0)
		busy = h.transmit(1) || busy
		for k := 0; k < h.Burst && len(h.queue) > 0; k++ {
			h.deliver()
			busy = true
		}
		if busy {
			continue
		}
		if h.releaseHeld(true) {
			continue
		}
		// Idle wire: jump to the earliest deadline.
		d := h.nextDeadline()
		if d == qp.Never {
			h.A.poll(h.Now)
			h.B.poll(h.Now)
			if done == nil || done() {
				return nil
			}
			return errQuiescent
		}
		if d <= h.Now {
			// A deadline in the past that Tick did not move: step the
			// clock so that the step bound, not a spin, ends the run.
			h.Now++
		} else {
			h.Now = d
		}
	}
}

// MustRun is Run that fails the test, with the wire log, on error.
func (h *Harness) MustRun(done func() bool) {
	h.t.Helper()
	if err := h.Run(done); err != nil {
		h.t.Fatalf("run: %v\n%s", err, h.Dump(60))
	}
	h.checkNoErrors()
}

func (h *Harness) checkNoErrors() {
	h.t.Helper()
	if len(h.Errors) > 0 {
		h.t.Fatalf("harness invariant violations:\n%s", strings.Join(h.Errors, "\n"))
	}
}

// Dump renders the last n frames of the wire log.
func (h *Harness) Dump(n int) string {
	var b strings.Builder
	fs := h.Frames
	if len(fs) > n {
		fmt.Fprintf(&b, "... %d earlier frames\n", len(fs)-n)
		fs = fs[len(fs)-n:]
	}
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	ds := h.Deliveries
	if len(ds) > n {
		ds = ds[len(ds)-n:]
	}
	b.WriteString("last deliveries (frame#@time):")
	for _, f := range ds {
		fmt.Fprintf(&b, " #%d@%d", f.Seq, f.DeliverAt)
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "A: state %v sendWCs %v recvWCs %v\n", h.A.qp.State(), wcsString(h.A.sendWCs), wcsString(h.A.recvWCs))
	fmt.Fprintf(&b, "B: state %v sendWCs %v recvWCs %v\n", h.B.qp.State(), wcsString(h.B.sendWCs), wcsString(h.B.recvWCs))
	return b.String()
}

func wcsString(ws []qp.WC) string {
	var parts []string
	for i, w := range ws {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("...+%d", len(ws)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("{id=%d %v %v len=%d}", w.ID, w.Opcode, w.Status, w.ByteLen))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Select returns the frames matching every predicate.
func (h *Harness) Select(ps ...Pred) []*Frame {
	m := All(ps...)
	var r []*Frame
	for _, f := range h.Frames {
		if m(f) {
			r = append(r, f)
		}
	}
	return r
}

// sendsDone and recvsDone report whether endpoints have n completions.
func (h *Harness) sendsDone(ep *endpoint, n int) func() bool {
	return func() bool { return len(ep.sendWCs) >= n }
}

// ---------------------------------------------------------------------------
// Bringing QPs up
