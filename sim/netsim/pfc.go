package netsim

import (
	"fmt"

	"github.com/softroce/softroce/packet"
)

// Priority flow control (IEEE 802.1Qbb), the lossless Ethernet RoCE runs
// on. A switch with PFC counts, per ingress port, the bytes of the frames
// that came in by it and still wait in its output queues; past XOff it
// sends a PAUSE out of that port, and the upstream port (a host's NIC or
// another switch) stops sending until the pause time runs out or an XON
// (a PAUSE of time 0) comes once the count falls to XOn. Frames that keep
// arriving while the pause takes effect land in the headroom; a frame that
// would overflow XOff + Headroom is dropped (drop_headroom), the one loss
// a lossless network can still have. Frames of DSCP classes 6 and 7 (CS6,
// where CNPs go, and network control) wait in a queue of their own that
// goes first (strict priority), is never paused and does not count towards
// XOFF; everything else is the lossless class, paused as priority 3 (where
// RoCE runs; softroce's data carries DSCP 0 unless its address vector's
// traffic class says otherwise, so the simulator does not map DSCP to
// priority further).

// PFCPriority is the priority the simulated lossless class uses.
const PFCPriority = 3

// PFC is a switch's flow-control configuration; sizes in bytes.
type PFC struct {
	XOff, XOn, Headroom int
	// Quanta is the pause time an XOFF asks for, in units of 512 bit
	// times at the link's rate (0: 65535, the most). The switch refreshes
	// the pause before it runs out while the count stays above XOn.
	Quanta uint16
	// WatchdogDetect, when set, is the PFC watchdog (SONiC's, Junos'): a
	// port of the switch that has been paused this long without a break,
	// with frames waiting, is in a PFC storm; for WatchdogRestore the
	// switch then ignores the PAUSEs it receives on that port and drops
	// what it would send there (drop_watchdog), so that one stuck NIC
	// cannot stop the fabric.
	WatchdogDetect, WatchdogRestore Time
}

// Check reports a configuration that cannot work.
func (c PFC) Check() error {
	if c.XOff <= 0 || c.XOn < 0 || c.XOn > c.XOff || c.Headroom < 0 {
		return fmt.Errorf("pfc xoff %d xon %d headroom %d: want 0 <= xon <= xoff, xoff > 0, headroom >= 0", c.XOff, c.XOn, c.Headroom)
	}
	return nil
}

// PFCCounters count a switch's flow control.
type PFCCounters struct {
	XOffSent     uint64 `json:"xoff_sent"`     // PAUSE frames with a time, refreshes included
	XOnSent      uint64 `json:"xon_sent"`      // PAUSE frames with time 0
	DropHeadroom uint64 `json:"drop_headroom"` // frames dropped because the headroom overflowed
	Storms       uint64 `json:"storms"`        // PFC storms the watchdog found
	DropWatchdog uint64 `json:"drop_watchdog"` // frames dropped on ports in a storm
}

// switchPFC is a switch's flow-control state.
type switchPFC struct {
	cfg      PFC
	ingress  []int    // by port: bytes queued in the switch that came in by it
	pausing  []bool   // by port: an XOFF is in force upstream
	episode  []uint64 // by port: counts XOFF episodes, so a refresh outlives none
	counters PFCCounters
}

// lossless is a PFC port's state: its own FIFOs and serializer, which a
// PAUSE stops for the lossless class.
type lossless struct {
	wait        []waiting // the lossless class
	head        int
	hi          []waiting // other priorities: first, never paused
	hiHead      int
	ctrl        [][]byte // PAUSE frames to send ahead of the queue
	serving     bool
	cur         waiting // the frame being serialized
	pausedUntil Time
	wakeAt      Time // a wake-up event is scheduled for then (0: none)
	paused      Time // total time paused, for reports
	pauses      uint64
	onResume    func()
	// pausedSince is when the current unbroken pause began (0: not
	// paused); stormUntil ends a storm the watchdog declared.
	pausedSince Time
	stormUntil  Time
}

// waiting is a frame in a PFC port's queue.
type waiting struct {
	buf   int32
	n     int32
	sum   uint32
	sumOK bool
	mark  bool  // RED marked it as it joined
	in    int32 // the port it came in by at the sending switch, -1: none
}

// SetPFC turns PFC on at the switch: every port of it, and every port that
// sends to it, becomes a PFC port. Call it after the switch is connected.
func (s *Switch) SetPFC(c PFC) error {
	if c.WatchdogDetect < 0 || c.WatchdogRestore < 0 || (c.WatchdogDetect > 0) != (c.WatchdogRestore > 0) {
		return fmt.Errorf("switch %s: pfc watchdog detect %s restore %s: give both, positive", s.net.names[s.id], c.WatchdogDetect, c.WatchdogRestore)
	}
	if err := c.Check(); err != nil {
		return fmt.Errorf("switch %s: %w", s.net.names[s.id], err)
	}
	if c.Quanta == 0 {
		c.Quanta = 0xFFFF
	}
	ports := s.net.ports[s.id]
	s.pfc = &switchPFC{cfg: c, ingress: make([]int, len(ports)), pausing: make([]bool, len(ports)),
		episode: make([]uint64, len(ports))}
	for _, pt := range ports {
		pt.out.makeLossless()
		pt.out.reverse.makeLossless()
	}
	return nil
}

// PFCCounters returns the switch's flow-control counters (zero without PFC).
func (s *Switch) PFCCounters() PFCCounters {
	if s.pfc == nil {
		return PFCCounters{}
	}
	return s.pfc.counters
}

func (p *Pipe) makeLossless() {
	if p.lossless == nil {
		p.lossless = &lossless{}
		p.net.ensureSerialHandler()
	}
}

// SetOnResume sets a function the pipe calls when an XON ends a pause
// early: a host then goes back to feeding it.
func (p *Pipe) SetOnResume(f func()) {
	if p.lossless != nil {
		p.lossless.onResume = f
	}
}

// PausedTime returns how long PAUSEs have stopped the pipe, and how many
// it obeyed (XONs not counted).
func (p *Pipe) PausedTime() (Time, uint64) {
	if p.lossless == nil {
		return 0, 0
	}
	l := p.lossless
	t := l.paused
	if now := p.net.loop.now; l.pausedUntil > now {
		t -= l.pausedUntil - now // not over yet
	}
	return t, l.pauses
}

// admit is the PFC switch's side of a frame joining one of its queues:
// the headroom check and the ingress count, and an XOFF when it passes
// XOff. It reports whether the frame may join.
func (s *Switch) admit(in int32, n int) bool {
	f := s.pfc
	if f == nil || in < 0 {
		return true
	}
	if f.ingress[in]+n > f.cfg.XOff+f.cfg.Headroom {
		f.counters.DropHeadroom++
		return false
	}
	f.ingress[in] += n
	if f.ingress[in] >= f.cfg.XOff && !f.pausing[in] {
		f.pausing[in] = true
		f.episode[in]++
		s.sendPause(int(in), f.cfg.Quanta)
	}
	return true
}

// release is a frame that came in by port in leaving the switch.
func (s *Switch) release(in int32, n int) {
	f := s.pfc
	if f == nil || in < 0 {
		return
	}
	f.ingress[in] -= n
	if f.pausing[in] && f.ingress[in] <= f.cfg.XOn {
		f.pausing[in] = false
		s.sendPause(int(in), 0)
	}
}

// sendPause sends a PAUSE (quanta > 0) or XON out of port, and, for a
// PAUSE, schedules its refresh at half its time while the port stays
// congested.
func (s *Switch) sendPause(port int, quanta uint16) {
	p := s.outs[port]
	f := s.pfc
	if quanta == 0 {
		f.counters.XOnSent++
	} else {
		f.counters.XOffSent++
		half := p.quantaTime(quanta) / 2
		ep := f.episode[port]
		s.net.loop.At(s.net.loop.now+max(half, 1), func() {
			if f.pausing[port] && f.episode[port] == ep {
				s.sendPause(port, quanta)
			}
		})
	}
	p.sendControl(packet.AppendPause(nil, [6]byte{0x02, 0xFE, byte(s.id >> 8), byte(s.id), 0, byte(port)}, PFCPriority, quanta))
}

// quantaTime is how long q pause quanta (512 bit times each) last on p.
func (p *Pipe) quantaTime(q uint16) Time {
	if p.cfg.Bandwidth <= 0 {
		return 0
	}
	return Time((int64(q)*512*int64(Second) + p.cfg.Bandwidth - 1) / p.cfg.Bandwidth)
}

// sendControl queues a MAC control frame to go out next, ahead of the
// queue and regardless of a pause (a paused port still sends PAUSEs).
func (p *Pipe) sendControl(frame []byte) {
	p.counters.Sent++
	p.counters.SentBytes += uint64(len(frame))
	l := p.lossless
	l.ctrl = append(l.ctrl, frame)
	p.serve()
}

// enqueueLossless puts a frame in a PFC port's queue (after the sending
// switch's admission) and starts the serializer if it is idle.
func (p *Pipe) enqueueLossless(frame []byte, owned int32, sum uint32, sumOK bool, in int32) bool {
	n := len(frame)
	if p.lossless.stormUntil > p.net.loop.now {
		if sw, ok := p.net.nodes[p.from].(*Switch); ok {
			sw.pfc.counters.DropWatchdog++
		}
		p.counters.DropQueue++
		p.net.trace(TraceEvent{Kind: TraceDrop, Pipe: p, Frame: frame, Cause: DropQueue, sum: sum, sumOK: sumOK})
		return false
	}
	lossless := dscpClass(frame) < 6
	if sw, ok := p.net.nodes[p.from].(*Switch); ok && lossless && !sw.admit(in, n) {
		p.counters.DropQueue++
		p.net.trace(TraceEvent{Kind: TraceDrop, Pipe: p, Frame: frame, Cause: DropQueue, sum: sum, sumOK: sumOK})
		return false
	}
	i := owned
	if i < 0 {
		var buf []byte
		i, buf = p.net.getBuf(n)
		copy(buf, frame)
	}
	l := p.lossless
	w := waiting{buf: i, n: int32(n), sum: sum, sumOK: sumOK, mark: p.redMarks(), in: in}
	if lossless {
		l.wait = append(l.wait, w)
	} else {
		w.in = -1 // not counted towards XOFF
		l.hi = append(l.hi, w)
	}
	p.queueBytes += n
	p.counters.MaxQueueBytes = max(p.counters.MaxQueueBytes, p.queueBytes)
	p.serve()
	return owned >= 0
}

// serve starts serializing the next frame if the port is idle: a control
// frame first, else, unless paused, the head of the queue.
func (p *Pipe) serve() {
	l := p.lossless
	if l.serving {
		return
	}
	now := p.net.loop.now
	if len(l.ctrl) > 0 {
		f := l.ctrl[0]
		l.ctrl = l.ctrl[1:]
		end := now + p.serialization(len(f))
		l.serving, l.cur = true, waiting{buf: -1, in: -1}
		p.busyUntil = end
		p.launch(f, -1, 0, false, false, end)
		p.net.loop.Call(end, p.net.serialID, uint64(p.index))
		return
	}
	if l.hiHead < len(l.hi) {
		w := l.hi[l.hiHead]
		l.hiHead++
		if l.hiHead == len(l.hi) {
			l.hi, l.hiHead = l.hi[:0], 0
		}
		p.start(w, now)
		return
	}
	if l.head == len(l.wait) {
		l.wait, l.head = l.wait[:0], 0
		return
	}
	if now < l.pausedUntil {
		if l.wakeAt != l.pausedUntil {
			l.wakeAt = l.pausedUntil
			p.net.loop.Call(l.pausedUntil, p.net.serialID, uint64(p.index))
		}
		return
	}
	w := l.wait[l.head]
	l.head++
	if l.head > 64 && l.head*2 > len(l.wait) {
		k := copy(l.wait, l.wait[l.head:])
		l.wait, l.head = l.wait[:k], 0
	}
	p.start(w, now)
}

// start serializes the waiting frame w from now.
func (p *Pipe) start(w waiting, now Time) {
	l := p.lossless
	end := now + p.serialization(int(w.n))
	l.serving, l.cur = true, w
	p.busyUntil = end
	buf := p.net.bufs[w.buf][:w.n]
	if !p.launch(buf, w.buf, w.sum, w.sumOK, w.mark, end) {
		p.net.putBuf(w.buf)
	}
	p.net.loop.Call(end, p.net.serialID, uint64(p.index))
}

// serialDone ends the current frame's serialization (or a pause's wait):
// the frame leaves the queue, its switch releases it, the next starts.
func (p *Pipe) serialDone() {
	l := p.lossless
	now := p.net.loop.now
	if l.serving && p.busyUntil <= now {
		l.serving = false
		if l.cur.buf >= 0 {
			p.queueBytes -= int(l.cur.n)
			if sw, ok := p.net.nodes[p.from].(*Switch); ok {
				sw.release(l.cur.in, int(l.cur.n))
			}
		}
	}
	if l.wakeAt != 0 && l.wakeAt <= now {
		l.wakeAt = 0
	}
	p.serve()
}

// pause applies a PAUSE that arrived on the reverse pipe: stop for quanta
// (0: resume now).
func (p *Pipe) pause(quanta uint16) {
	l := p.lossless
	if l == nil {
		return
	}
	now := p.net.loop.now
	if l.stormUntil > now {
		return // the watchdog ignores this port's PAUSEs for now
	}
	if quanta == 0 {
		l.pausedSince = 0
		if l.pausedUntil > now {
			l.paused -= l.pausedUntil - now
			l.pausedUntil = now
			p.serve()
			if l.onResume != nil {
				l.onResume()
			}
		}
		return
	}
	if l.pausedUntil < now || l.pausedSince == 0 {
		l.pausedSince = now // a new pause, not a refresh of one in force
	}
	until := now + p.quantaTime(quanta)
	if until > l.pausedUntil {
		l.paused += until - max(l.pausedUntil, now)
		l.pausedUntil = until
	}
	l.pauses++
	p.watchdog(now)
}

// watchdog declares a PFC storm on the switch port p when it has been
// paused without a break for the detection time with frames waiting: the
// pause ends, PAUSEs are ignored and what waits or comes is dropped until
// the restore time has passed.
func (p *Pipe) watchdog(now Time) {
	sw, ok := p.net.nodes[p.from].(*Switch)
	if !ok || sw.pfc == nil || sw.pfc.cfg.WatchdogDetect == 0 {
		return
	}
	l := p.lossless
	if now-l.pausedSince < sw.pfc.cfg.WatchdogDetect || l.head == len(l.wait) {
		return
	}
	sw.pfc.counters.Storms++
	l.stormUntil = now + sw.pfc.cfg.WatchdogRestore
	l.paused -= l.pausedUntil - now
	l.pausedUntil, l.pausedSince = now, 0
	for _, w := range l.wait[l.head:] {
		p.queueBytes -= int(w.n)
		sw.release(w.in, int(w.n))
		sw.pfc.counters.DropWatchdog++
		p.counters.DropQueue++
		p.net.trace(TraceEvent{Kind: TraceDrop, Pipe: p, Frame: p.net.bufs[w.buf][:w.n], Cause: DropQueue, sum: w.sum, sumOK: w.sumOK})
		p.net.putBuf(w.buf)
	}
	l.wait, l.head = l.wait[:0], 0
}

// SendPause has the node that owns p send a PAUSE for priority
// PFCPriority out of it (quanta 0: XON), as a NIC does when its receive
// buffer is full, or, stuck, for ever: a PFC storm. p must be a PFC port
// (next to a switch with PFC).
func (p *Pipe) SendPause(quanta uint16) error {
	if p.lossless == nil {
		return fmt.Errorf("pipe %s: not a PFC port (no switch with pfc at either end)", p.name)
	}
	id := uint16(p.from)
	p.sendControl(packet.AppendPause(nil, [6]byte{0x02, 0xFD, byte(id >> 8), byte(id), 0, 0}, PFCPriority, quanta))
	return nil
}

// QuantaTime is how long q pause quanta last on p.
func (p *Pipe) QuantaTime(q uint16) Time { return p.quantaTime(q) }

// ensureSerialHandler registers the handler of PFC ports' serializer
// events, once.
func (n *Network) ensureSerialHandler() {
	if n.serialID == 0 {
		n.serialID = n.loop.Handle(serialHandler{n})
	}
}

type serialHandler struct{ n *Network }

func (h serialHandler) Fire(arg uint64) { h.n.pipes[arg].serialDone() }

// Lossless reports whether p is a PFC port.
func (p *Pipe) Lossless() bool { return p.lossless != nil }

// blocked reports whether p is a PFC port stopped by a PAUSE with frames
// waiting.
func (p *Pipe) blocked() bool {
	l := p.lossless
	return l != nil && l.pausedUntil > p.net.loop.now && l.head < len(l.wait)
}

// holdsFrom reports whether p's queue holds a frame that came in by port
// in of the switch that sends it.
func (p *Pipe) holdsFrom(in int) bool {
	l := p.lossless
	for _, w := range l.wait[l.head:] {
		if int(w.in) == in {
			return true
		}
	}
	return false
}

// PFCDeadlock returns a cycle of the PFC wait-for graph, or nil: ports
// stopped by a PAUSE with frames waiting, each waiting on the next, the
// port its frames are queued for at the next switch, which is stopped in
// turn (a cyclic buffer dependency: nothing in it can move until a PAUSE
// lifts, and none will). The cycle is given from its lowest-indexed pipe,
// so that the same deadlock reads the same each time.
func (n *Network) PFCDeadlock() []*Pipe {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(n.pipes))
	var path []*Pipe
	var found []*Pipe
	var visit func(p *Pipe) bool
	visit = func(p *Pipe) bool {
		state[p.index] = onPath
		path = append(path, p)
		if sw, ok := n.nodes[p.to].(*Switch); ok {
			for _, q := range sw.outs {
				if !q.blocked() || !q.holdsFrom(p.toPort) {
					continue
				}
				switch state[q.index] {
				case onPath:
					for i, x := range path {
						if x == q {
							found = append([]*Pipe(nil), path[i:]...)
						}
					}
					return true
				case unseen:
					if visit(q) {
						return true
					}
				}
			}
		}
		path = path[:len(path)-1]
		state[p.index] = done
		return false
	}
	for _, p := range n.pipes {
		if state[p.index] == unseen && p.blocked() && visit(p) {
			break
		}
	}
	if found == nil {
		return nil
	}
	lo := 0
	for i, p := range found {
		if p.index < found[lo].index {
			lo = i
		}
	}
	return append(found[lo:], found[:lo]...)
}

// dscpClass is a frame's DSCP class selector (DSCP/8); 0 for frames that
// are not IP.
func dscpClass(f []byte) int {
	if len(f) < 16 {
		return 0
	}
	switch uint16(f[12])<<8 | uint16(f[13]) {
	case 0x0800:
		return int(f[15] >> 5)
	case 0x86DD:
		return int((f[14]<<4 | f[15]>>4) >> 5)
	}
	return 0
}
