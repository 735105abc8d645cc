package qp_test

// The acceptance harness: two QPs, each with its own CQs and fake memory,
// joined by a scripted wire on a fake clock. Every packet goes through real
// bytes (packet.AppendIPPacket, packet.ParseIP, packet.CheckICRC via
// Frame.ICRCOK, packet.Decode), so the wire format is exercised end to end;
// a packet whose ICRC fails is dropped, as rxe drops it. Tests script the
// wire with rules (drop, duplicate, hold for reordering, corrupt a byte of
// the Nth packet matching a predicate) or a free-form fault hook, and the
// run loop advances the fake clock to the earliest QP deadline whenever the
// wire is idle, with step and time bounds so that no test can hang.

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Fake memory

// fakeRegion is one registered buffer; its key serves as lkey and rkey.
type fakeRegion struct {
	va     uint64
	buf    []byte
	access qp.Access
	valid  bool
}

// fakeMem is a protection domain of fake memory regions, the qp.Memory a
// test endpoint hands its QP.
type fakeMem struct {
	regions map[uint32]*fakeRegion
}

func newFakeMem() *fakeMem { return &fakeMem{regions: map[uint32]*fakeRegion{}} }

// Register makes buf reachable as [va, va+len(buf)) under key.
func (m *fakeMem) Register(key uint32, va uint64, buf []byte, access qp.Access) {
	m.regions[key] = &fakeRegion{va: va, buf: buf, access: access, valid: true}
}

func (m *fakeMem) lookup(key uint32, va uint64, length uint32) ([]byte, *fakeRegion, error) {
	r, ok := m.regions[key]
	if !ok || !r.valid {
		return nil, nil, fmt.Errorf("key %#x: %w", key, qp.ErrBadKey)
	}
	if va < r.va || va-r.va > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-(va-r.va) {
		return nil, nil, fmt.Errorf("key %#x [%#x,+%d): %w", key, va, length, qp.ErrBounds)
	}
	off := va - r.va
	return r.buf[off : off+uint64(length)], r, nil
}

func (m *fakeMem) Local(lkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	b, r, err := m.lookup(lkey, va, length)
	if err != nil {
		return nil, err
	}
	if r.access&access != access {
		return nil, fmt.Errorf("lkey %#x: %w", lkey, qp.ErrAccess)
	}
	return b, nil
}

func (m *fakeMem) Remote(rkey uint32, va uint64, length uint32, access qp.Access) ([]byte, error) {
	b, r, err := m.lookup(rkey, va, length)
	if err != nil {
		return nil, err
	}
	if r.access&access != access {
		return nil, fmt.Errorf("rkey %#x: %w", rkey, qp.ErrAccess)
	}
	return b, nil
}

func (m *fakeMem) Invalidate(key uint32, remote bool) error {
	r, ok := m.regions[key]
	if !ok || !r.valid {
		return fmt.Errorf("invalidate %#x: %w", key, qp.ErrBadKey)
	}
	r.valid = false
	return nil
}

// BindMW fails: the harness's memory has no windows (package rxe tests
// them end to end).
func (m *fakeMem) BindMW(b *qp.BindMW) error {
	return fmt.Errorf("bind mw %#x: %w", b.MWRKey, qp.ErrBadKey)
}

// ---------------------------------------------------------------------------
// Endpoints

// Memory layout every endpoint registers: one local buffer (lkey localKey)
// and one remotely accessible buffer (rkey remoteKey), both large enough for
// the randomized workloads.
const (
	localKey   uint32 = 0x100
	remoteKey  uint32 = 0x200
	roKey      uint32 = 0x300 // remote read only
	localVA    uint64 = 0x10_0000
	remoteVA   uint64 = 0x80_0000
	roVA       uint64 = 0xC0_0000
	bufSize           = 1 << 18
	allRemote         = qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
	defaultCQN        = 1 << 14
)

// endpoint is one side of the wire: a QP, its CQs, its memory and the
// completions polled so far.
type endpoint struct {
	name   string
	addr   netip.Addr
	qp     *qp.QP
	sendCQ *qp.CQ
	recvCQ *qp.CQ
	mem    *fakeMem
	local  []byte // lkey localKey at localVA
	remote []byte // rkey remoteKey at remoteVA
	ro     []byte // rkey roKey at roVA (remote read only)
	events []qp.Event

	sendWCs  []qp.WC
	recvWCs  []qp.WC
	sendWCAt []qp.Time // when each send completion was polled
}

// peerAV returns the address vector that reaches ep.
func (ep *endpoint) av() qp.AddressVector {
	return qp.AddressVector{DGID: ep.addr, HopLimit: 64}
}

func (ep *endpoint) poll(now qp.Time) {
	var wc [64]qp.WC
	for {
		n := ep.sendCQ.Poll(wc[:])
		ep.sendWCs = append(ep.sendWCs, wc[:n]...)
		for k := 0; k < n; k++ {
			ep.sendWCAt = append(ep.sendWCAt, now)
		}
		if n < len(wc) {
			break
		}
	}
	for {
		n := ep.recvCQ.Poll(wc[:])
		ep.recvWCs = append(ep.recvWCs, wc[:n]...)
		if n < len(wc) {
			break
		}
	}
}

// ---------------------------------------------------------------------------
// The wire

// Frame is one packet put on the wire: its bytes (IP header onwards), who
// sent it, when, and its decoded transport headers.
type Frame struct {
	Seq  int // transmit order, from 0
	From int // sender: 0 (A) or 1 (B)
	Time qp.Time
	Data []byte        // IP packet bytes as sent
	Pkt  packet.Packet // decoded from Data (payload aliases Data)

	Fate      string  // "", "dropped", "corrupted", ...: what the script did
	Delivered int     // times delivered to the peer's Receive
	DeliverAt qp.Time // time of the last delivery
}

func (f *Frame) Op() packet.Opcode { return f.Pkt.BTH.Opcode }
func (f *Frame) PSN() uint32       { return f.Pkt.BTH.PSN }

func (f *Frame) String() string {
	p := &f.Pkt
	s := fmt.Sprintf("#%d t=%d %s->%s %s psn=%#x", f.Seq, f.Time, "AB"[f.From:f.From+1], "BA"[f.From:f.From+1],
		p.BTH.Opcode, p.BTH.PSN)
	info := p.Info()
	if p.BTH.AckReq {
		s += " A"
	}
	if info.Is(packet.HdrRETH) {
		s += fmt.Sprintf(" reth{va=%#x rkey=%#x len=%d}", p.RETH.VA, p.RETH.RKey, p.RETH.Length)
	}
	if info.Is(packet.HdrAETH) {
		s += fmt.Sprintf(" aeth{%v msn=%d}", p.AETH.Syndrome, p.AETH.MSN)
	}
	if len(p.Payload) > 0 {
		s += fmt.Sprintf(" len=%d", len(p.Payload))
	}
	if f.Fate != "" {
		s += " [" + f.Fate + "]"
	}
	return s
}

// Pred selects frames.
type Pred func(f *Frame) bool

// Op matches any of the opcodes.
func Op(ops ...packet.Opcode) Pred {
	return func(f *Frame) bool {
		for _, o := range ops {
			if f.Op() == o {
				return true
			}
		}
		return false
	}
}

// FromA and FromB match the direction.
func FromA() Pred { return func(f *Frame) bool { return f.From == 0 } }
func FromB() Pred { return func(f *Frame) bool { return f.From == 1 } }

// PSNIs matches a PSN.
func PSNIs(psn uint32) Pred { return func(f *Frame) bool { return f.PSN() == psn } }

// Kind matches an operation kind.
func Kind(k packet.Kind) Pred { return func(f *Frame) bool { return f.Pkt.Info().Kind == k } }

// NAK matches ACKs carrying a NAK or RNR NAK syndrome.
func NAK() Pred {
	return func(f *Frame) bool {
		return f.Pkt.Info().Is(packet.HdrAETH) && !f.Pkt.AETH.Syndrome.IsACK()
	}
}

// RNR matches RNR NAKs.
func RNR() Pred {
	return func(f *Frame) bool {
		return f.Pkt.Info().Is(packet.HdrAETH) && f.Pkt.AETH.Syndrome.IsRNR()
	}
}

// All matches when every predicate matches.
func All(ps ...Pred) Pred {
	return func(f *Frame) bool {
		for _, p := range ps {
			if !p(f) {
				return false
			}
		}
		return true
	}
}

// Action is what the wire does with a frame.
type Action uint8

// Wire actions.
const (
	Deliver Action = iota
	Drop
	Duplicate // deliver twice
	Hold      // deliver after Arg more frames in the same direction (reorder)
	Corrupt   // flip a byte Arg bytes into the transport part (BTH onwards)
)

// Rule applies Act to the Nth frame matching Match (Nth 0: every match).
type Rule struct {
	Match Pred
	Nth   int
	Act   Action
	Arg   int
	seen  int
	Fired int
}

type held struct {
	f     *Frame
	after int
}

type delivery struct {
	f    *Frame
	data []byte
}

// Harness joins endpoints A and B.
type Harness struct {
	t   testing.TB
	Now qp.Time
	A   *endpoint
	B   *endpoint
	eps [2]*endpoint

	// Latency is the time one delivery takes on the fake clock.
	Latency qp.Time
	// Burst bounds the packets each QP transmits, and the wire delivers,
	// per step, so that requests, responses and ACKs interleave.
	Burst int
	// MaxSteps and MaxTime bound a Run.
	MaxSteps int
	MaxTime  qp.Time

	Rules []*Rule
	// Fault, when set, decides the fate of frames no rule claimed.
	Fault func(f *Frame) (Action, int)
	// OnSend is called for every frame when it is transmitted.
	OnSend func(f *Frame)
	// OnDeliver is called after a frame has been handed to Receive.
	OnDeliver func(f *Frame)

	Frames []*Frame // everything transmitted, in order
	// Deliveries lists the frames handed to Receive, in order (a frame
	// delivered twice appears twice), for dumps.
	Deliveries []*Frame

	queue []delivery
	held  []held
	timed []timedAction

	// Wire-level drops.
	ICRCDrops  int
	ParseDrops int
	QPNDrops   int

	// Errors records violations the harness itself detects (Pending and
	// Transmit disagreeing, decoding our own output failing, ...).
	Errors []string
	steps  int
}

type timedAction struct {
	at qp.Time
	fn func()
}

// ep is the configuration of one endpoint's QP.
type epConfig struct {
	Type       qp.Type
	QPN        uint32
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	CQDepth    int
	SRQ        *qp.SRQ
	// RemoteAccess is the access of the endpoint's remote region.
	RemoteAccess qp.Access
	// IPv6 puts both endpoints on IPv6 addresses (fd00::1, fd00::2).
	IPv6 bool
}

// newEndpoint creates an endpoint and its QP in RESET.
func newEndpoint(t testing.TB, name string, addr string, c epConfig) *endpoint {
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 1024
	}
	if c.MaxRecvWR == 0 {
		c.MaxRecvWR = 1024
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 4
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 4
	}
	if c.CQDepth == 0 {
		c.CQDepth = defaultCQN
	}
	if c.RemoteAccess == 0 {
		c.RemoteAccess = allRemote
	}
	ep := &endpoint{
		name:   name,
		addr:   netip.MustParseAddr(addr),
		sendCQ: qp.NewCQ(c.CQDepth),
		recvCQ: qp.NewCQ(c.CQDepth),
		mem:    newFakeMem(),
		local:  make([]byte, bufSize),
		remote: make([]byte, bufSize),
		ro:     make([]byte, bufSize),
	}
	ep.mem.Register(localKey, localVA, ep.local, qp.AccessLocalWrite)
	ep.mem.Register(remoteKey, remoteVA, ep.remote, c.RemoteAccess)
	ep.mem.Register(roKey, roVA, ep.ro, qp.AccessRemoteRead)
	q, err := qp.New(qp.Config{
		QPN:        c.QPN,
		Type:       c.Type,
		SendCQ:     ep.sendCQ,
		RecvCQ:     ep.recvCQ,
		SRQ:        c.SRQ,
		MaxSendWR:  c.MaxSendWR,
		MaxRecvWR:  c.MaxRecvWR,
		MaxSendSGE: c.MaxSendSGE,
		MaxRecvSGE: c.MaxRecvSGE,
		MaxInline:  512,
		Memory:     ep.mem,
		MaxMTU:     4096,
		SrcPort:    0xC000 | uint16(c.QPN&0x3FFF),
		Events:     func(e qp.Event) { ep.events = append(ep.events, e) },
	})
	require.NoError(t, err)
	ep.qp = q
	return ep
}

// newHarness returns a harness with endpoints A (10.0.0.1, QPN 0x11) and B
// (10.0.0.2, QPN 0x22), QPs in RESET.
func newHarness(t testing.TB, a, b epConfig) *Harness {
	if a.QPN == 0 {
		a.QPN = 0x11
	}
	if b.QPN == 0 {
		b.QPN = 0x22
	}
	h := &Harness{
		t:        t,
		Latency:  1000,
		Burst:    4,
		MaxSteps: 200_000,
		MaxTime:  600 * 1_000_000_000,
	}
	h.A = newEndpoint(t, "A", "10.0.0.1", a)
	h.B = newEndpoint(t, "B", "10.0.0.2", b)
	if a.IPv6 || b.IPv6 {
		h.A.addr, h.B.addr = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	h.eps = [2]*endpoint{h.A, h.B}
	return h
}

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

// link holds the attributes two connected QPs use.
type link struct {
	MTU             qp.MTU
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MinRNRTimer     uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	APSN, BPSN      uint32 // initial send PSNs of A and B
	AAccess         qp.Access
	BAccess         qp.Access
	QKey            uint32
}

// defaultLink is the "typical" attribute set: MTU 1024, timeout 14, retry 7,
// rnr_retry 7, max_rd_atomic 16.
func defaultLink() link {
	return link{
		MTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16, APSN: 0x1000, BPSN: 0x8000,
		AAccess: allRemote, BAccess: allRemote, QKey: 0x11111111,
	}
}

// modify is the one place the tests call QP.Modify.
func modify(q *qp.QP, a *qp.Attr, m qp.AttrMask) error { return q.Modify(a, m) }

// bringUp moves one QP RESET -> INIT -> RTR -> RTS.
func bringUp(t testing.TB, q *qp.QP, peer *endpoint, l link, access qp.Access, sqPSN, rqPSN uint32) {
	t.Helper()
	typ := q.Type()
	a := qp.Attr{State: qp.Init, PKeyIndex: 0, Port: 1, AccessFlags: access, QKey: l.QKey}
	m := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if typ == qp.UD {
		m |= qp.AttrQKey
	} else {
		m |= qp.AttrAccessFlags
	}
	require.NoError(t, modify(q, &a, m), "qp %d to INIT", q.QPN())

	a = qp.Attr{State: qp.RTR}
	m = qp.AttrState
	if typ != qp.UD {
		a.AV = peer.av()
		a.PathMTU = l.MTU
		a.DestQPN = peer.qp.QPN()
		a.RQPSN = rqPSN
		m |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
		if typ == qp.RC {
			a.MaxDestRdAtomic = l.MaxDestRdAtomic
			a.MinRNRTimer = l.MinRNRTimer
			m |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		}
	}
	require.NoError(t, modify(q, &a, m), "qp %d to RTR", q.QPN())

	a = qp.Attr{State: qp.RTS, SQPSN: sqPSN}
	m = qp.AttrState | qp.AttrSQPSN
	if typ == qp.RC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = l.Timeout, l.RetryCnt, l.RNRRetry, l.MaxRdAtomic
		m |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	require.NoError(t, modify(q, &a, m), "qp %d to RTS", q.QPN())
	require.Equal(t, qp.RTS, q.State())
}

// connect brings both QPs of h to RTS with link l.
func (h *Harness) connect(l link) {
	h.t.Helper()
	bringUp(h.t, h.A.qp, h.B, l, l.AAccess, l.APSN, l.BPSN)
	bringUp(h.t, h.B.qp, h.A, l, l.BAccess, l.BPSN, l.APSN)
}

// pair returns a harness with two connected QPs of type typ.
func pair(t testing.TB, typ qp.Type, l link) *Harness {
	h := newHarness(t, epConfig{Type: typ}, epConfig{Type: typ})
	h.connect(l)
	return h
}

// ---------------------------------------------------------------------------
// Work-request helpers

// fill writes a deterministic pattern, different per seed, into b.
func fill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 12345
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

func (ep *endpoint) postSend(t testing.TB, wr qp.SendWR) {
	t.Helper()
	if wr.Flags&qp.SendSignaled == 0 {
		wr.Flags |= qp.SendSignaled
	}
	require.NoError(t, ep.qp.PostSend(&wr), "%s post send %d %v", ep.name, wr.ID, wr.Opcode)
}

func (ep *endpoint) postRecv(t testing.TB, id uint64, off uint64, n uint32) {
	t.Helper()
	wr := qp.RecvWR{ID: id, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}}}
	require.NoError(t, ep.qp.PostRecv(&wr), "%s post recv %d", ep.name, id)
}

// sendWR builds a SEND of n bytes from ep.local[off:].
func sendWR(id uint64, off uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}}}
}

// writeWR builds an RDMA WRITE of n bytes from local[off:] to the peer's
// remote[roff:].
func writeWR(id uint64, off, roff uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey}
}

// readWR builds an RDMA READ of n bytes from the peer's remote[roff:] into
// local[off:].
func readWR(id uint64, off, roff uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRRead, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey}
}

// atomicWR builds a FETCH_ADD or CMP_SWAP on the peer's remote[roff:],
// returning the original value into local[off:].
func atomicWR(id uint64, op qp.WROpcode, off, roff uint64, cmpAdd, swap uint64) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: op, SGL: []qp.SGE{{Addr: localVA + off, Length: 8, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey, CompareAdd: cmpAdd, Swap: swap}
}

// requireWCs checks completions: IDs in order, and every status.
func requireWCs(t testing.TB, ws []qp.WC, ids []uint64, status qp.WCStatus) {
	t.Helper()
	got := make([]uint64, len(ws))
	for i, w := range ws {
		got[i] = w.ID
	}
	require.Equal(t, ids, got, "completion IDs in posting order: %s", wcsString(ws))
	for _, w := range ws {
		require.Equal(t, status, w.Status, "completion %d status: %s", w.ID, wcsString(ws))
	}
}

func seq(from, n uint64) []uint64 {
	r := make([]uint64, n)
	for i := range r {
		r[i] = from + uint64(i)
	}
	return r
}

// TestHarnessRules checks the harness itself: the Nth-match rules act on
// exactly the frames they name, a held frame is delivered after the frames
// it waited for, a corrupted frame fails its ICRC, and a duplicated one is
// delivered twice.
func TestHarnessRules(t *testing.T) {
	h := pair(t, qp.RC, defaultLink())
	h.Burst = 32
	drop := h.Drop(All(FromA(), Op(packet.RCSendMiddle)), 2)
	dup := h.Dup(All(FromA(), Op(packet.RCSendFirst)), 1)
	hold := h.Reorder(All(FromA(), Op(packet.RCSendLast)), 1, 2)
	bad := h.CorruptAt(All(FromA(), Op(packet.RCSendOnly)), 1, 30)
	h.B.postRecv(t, 100, 0, 8192)
	h.B.postRecv(t, 101, 8192, 8192)
	h.B.postRecv(t, 102, 16384, 8192)
	h.A.postSend(t, sendWR(1, 0, multiSize))
	h.A.postSend(t, sendWR(2, 0, 500))
	h.A.postSend(t, sendWR(3, 0, 500))
	h.MustRun(h.sendsDone(h.A, 3))
	for _, r := range []*Rule{drop, dup, hold, bad} {
		require.Equal(t, 1, r.Fired)
	}
	fs := h.Select(FromA())
	require.Equal(t, "duplicated", fs[0].Fate)
	require.Equal(t, 2, fs[0].Delivered)
	require.Equal(t, packet.RCSendMiddle, fs[2].Op())
	require.Equal(t, "dropped", fs[2].Fate)
	require.Zero(t, fs[2].Delivered)
	require.Equal(t, "held", fs[3].Fate)
	require.Equal(t, "corrupted", fs[4].Fate)
	require.Zero(t, fs[4].Delivered, "a corrupted frame never reaches Receive")
	require.Equal(t, 1, h.ICRCDrops)
	require.Greater(t, fs[3].DeliverAt, fs[5].DeliverAt, "the held LAST arrived after the frames sent behind it")
	require.Equal(t, fs[0].Data, packet.AppendIPPacket(nil, &packet.Addressing{Src: h.A.addr, Dst: h.B.addr,
		SrcPort: h.A.qp.Config().SrcPort, HopLimit: 64, DF: true, IPID: 0}, &fs[0].Pkt), "frames are the real encoding")
}
