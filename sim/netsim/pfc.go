package netsim

import (
	"fmt"

	"github.com/softroce/softroce/packet"
)

// Priority flow control (IEEE 802.1Qbb), the lossless Ethernet RoCE runs
// on. A switch with PFC counts, per ingress port and priority, the bytes of
// the frames that came in by it and still wait in its output queues; past
// XOff it sends a PAUSE for that priority out of that port, and the
// upstream port (a host's NIC or another switch) stops sending frames of
// that priority until the pause time runs out or an XON (a PAUSE of time 0)
// comes once the count falls to XOn. Frames that keep arriving while the
// pause takes effect land in the headroom; a frame that would overflow
// XOff + Headroom is dropped (drop_headroom), the one loss a lossless
// network can still have.
//
// A PFC port has eight queues, one per priority; a frame's priority is its
// DSCP class (DSCP/8: DSCP 26, where RoCE usually runs, is priority 3;
// CNPs' CS6 is 6), the mapping switches apply when they trust DSCP.
// Priorities 7 and 6 go first (strict priority), the others take turns a
// frame at a time. Which priorities are lossless is the network's choice
// (PFC.Priorities, the same on every switch): those are paused and counted
// towards XOff; the others are never paused and drop at the port's queue
// bound. Without a choice the simulator keeps its first model: every
// priority below 6 is one lossless class, paused as priority 3 (softroce's
// data carries DSCP 0 unless its address vector's traffic class says
// otherwise), and classes 6 and 7 are never paused.

// PFCPriority is the priority of the single lossless class when the
// network names no lossless priorities, and the one a host's PAUSE
// (SendPause) stops.
const PFCPriority = 3

// PFC is a switch's flow-control configuration; sizes in bytes.
type PFC struct {
	XOff, XOn, Headroom int
	// Quanta is the pause time an XOFF asks for, in units of 512 bit
	// times at the link's rate (0: 65535, the most). The switch refreshes
	// the pause before it runs out while the count stays above XOn.
	Quanta uint16
	// Priorities lists the lossless priorities (0-7), each paused on its
	// own; every switch with PFC must give the same list. Empty: one
	// lossless class of every priority below 6, paused as PFCPriority.
	Priorities []int
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
	_, err := c.mask()
	return err
}

// mask is Priorities as a bit set (bit i: priority i).
func (c PFC) mask() (uint8, error) {
	var m uint8
	for _, p := range c.Priorities {
		if p < 0 || p > 7 {
			return 0, fmt.Errorf("pfc priority %d: want 0-7", p)
		}
		if m&(1<<p) != 0 {
			return 0, fmt.Errorf("pfc priority %d given twice", p)
		}
		m |= 1 << p
	}
	return m, nil
}

// PFCCounters count a switch's flow control.
type PFCCounters struct {
	XOffSent     uint64 `json:"xoff_sent"`     // PAUSE frames with a time, refreshes included
	XOnSent      uint64 `json:"xon_sent"`      // PAUSE frames with time 0
	DropHeadroom uint64 `json:"drop_headroom"` // frames dropped because the headroom overflowed
	Storms       uint64 `json:"storms"`        // PFC storms the watchdog found
	DropWatchdog uint64 `json:"drop_watchdog"` // frames dropped on ports in a storm
}

// switchPFC is a switch's flow-control state, by ingress port and priority.
type switchPFC struct {
	cfg      PFC
	ingress  [][8]int    // bytes queued in the switch that came in by the port
	pausing  [][8]bool   // an XOFF is in force upstream
	episode  [][8]uint64 // counts XOFF episodes, so a refresh outlives none
	counters PFCCounters
}

// lossless is a PFC port's state: its eight queues and serializer, which a
// PAUSE stops for the lossless priorities it names.
type lossless struct {
	q           [8]fifo  // by priority
	rr          int      // the next of priorities 0-5 to take a turn
	ctrl        [][]byte // PAUSE frames to send ahead of the queues
	serving     bool
	cur         waiting // the frame being serialized
	pausedUntil [8]Time
	wakeAt      Time    // a wake-up event is scheduled for then (0: none)
	paused      [8]Time // total time paused, for reports
	pauses      uint64
	lossyBytes  int // queued bytes of priorities that are not lossless
	onResume    func()
	// pausedSince is when the current unbroken pause of a priority began
	// (0: not paused); stormUntil ends a storm the watchdog declared.
	pausedSince [8]Time
	stormUntil  Time
}

// fifo is one priority's queue; w[head:] wait.
type fifo struct {
	w    []waiting
	head int
}

func (f *fifo) len() int { return len(f.w) - f.head }

func (f *fifo) push(w waiting) { f.w = append(f.w, w) }

func (f *fifo) pop() waiting {
	w := f.w[f.head]
	f.w, f.head = compactFIFO(f.w, f.head+1)
	return w
}

func (f *fifo) clear() { f.w, f.head = f.w[:0], 0 }

// waiting is a frame in a PFC port's queue.
type waiting struct {
	buf  int32
	n    int32
	c    carried
	mark bool  // RED marked it as it joined
	prio int8  // its queue
	in   int32 // the port it came in by at the sending switch, -1: none (not counted towards XOFF)
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
	m, _ := c.mask()
	if s.net.pfcSet && s.net.pfcMask != m {
		return fmt.Errorf("switch %s: pfc priorities %v differ from another switch's", s.net.names[s.id], c.Priorities)
	}
	s.net.pfcSet, s.net.pfcMask = true, m
	ports := s.net.ports[s.id]
	s.pfc = &switchPFC{cfg: c, ingress: make([][8]int, len(ports)), pausing: make([][8]bool, len(ports)),
		episode: make([][8]uint64, len(ports))}
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
		p.sh.ensureSerialHandler()
	}
}

// SetOnResume sets a function the pipe calls when an XON ends a pause
// early: a host then goes back to feeding it.
func (p *Pipe) SetOnResume(f func()) {
	if p.lossless != nil {
		p.lossless.onResume = f
	}
}

// PausedTime returns how long PAUSEs have stopped the pipe, summed over
// its priorities, and how many it obeyed (XONs not counted).
func (p *Pipe) PausedTime() (Time, uint64) {
	var t Time
	for prio := range 8 {
		t += p.PausedTimeOf(prio)
	}
	if p.lossless == nil {
		return 0, 0
	}
	return t, p.lossless.pauses
}

// PausedTimeOf returns how long PAUSEs have stopped priority prio of the
// pipe.
func (p *Pipe) PausedTimeOf(prio int) Time {
	if p.lossless == nil || prio < 0 || prio > 7 {
		return 0
	}
	l := p.lossless
	t := l.paused[prio]
	if now := p.sh.loop.now; l.pausedUntil[prio] > now {
		t -= l.pausedUntil[prio] - now // not over yet
	}
	return t
}

// priority returns the queue a frame goes to and whether it is lossless.
func (n *Network) priority(f []byte) (int, bool) {
	prio := dscpClass(f)
	if n.pfcMask == 0 && prio < 6 {
		prio = PFCPriority // the single lossless class
	}
	return prio, n.isLossless(prio)
}

// isLossless reports whether PAUSEs stop priority prio.
func (n *Network) isLossless(prio int) bool { return n.losslessMask()&(1<<prio) != 0 }

// losslessMask is the priorities PAUSEs stop.
func (n *Network) losslessMask() uint8 {
	if n.pfcMask == 0 {
		return 1 << PFCPriority
	}
	return n.pfcMask
}

// admit is the PFC switch's side of a lossless frame of priority prio
// joining one of its queues: the headroom check and the ingress count, and
// an XOFF when it passes XOff. It reports whether the frame may join.
func (s *Switch) admit(in int32, prio int, n int) bool {
	f := s.pfc
	if f == nil || in < 0 {
		return true
	}
	if f.ingress[in][prio]+n > f.cfg.XOff+f.cfg.Headroom {
		f.counters.DropHeadroom++
		return false
	}
	f.ingress[in][prio] += n
	if f.ingress[in][prio] >= f.cfg.XOff && !f.pausing[in][prio] {
		f.pausing[in][prio] = true
		f.episode[in][prio]++
		s.sendPause(int(in), prio, f.cfg.Quanta)
	}
	return true
}

// release is a frame of priority prio that came in by port in leaving the
// switch.
func (s *Switch) release(in int32, prio int, n int) {
	f := s.pfc
	if f == nil || in < 0 {
		return
	}
	f.ingress[in][prio] -= n
	if f.pausing[in][prio] && f.ingress[in][prio] <= f.cfg.XOn {
		f.pausing[in][prio] = false
		s.sendPause(int(in), prio, 0)
	}
}

// sendPause sends a PAUSE (quanta > 0) or XON for prio out of port, and,
// for a PAUSE, schedules its refresh at half its time while the port stays
// congested.
func (s *Switch) sendPause(port, prio int, quanta uint16) {
	p := s.outs[port]
	f := s.pfc
	if quanta == 0 {
		f.counters.XOnSent++
	} else {
		f.counters.XOffSent++
		half := p.quantaTime(quanta) / 2
		ep := f.episode[port][prio]
		s.sh.loop.At(s.sh.loop.now+max(half, 1), func() {
			if f.pausing[port][prio] && f.episode[port][prio] == ep {
				s.sendPause(port, prio, quanta)
			}
		})
	}
	p.sendControl(packet.AppendPause(nil, [6]byte{0x02, 0xFE, byte(s.id >> 8), byte(s.id), 0, byte(port)}, prio, quanta))
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

// enqueueLossless puts a frame in its priority's queue of a PFC port
// (after the sending switch's admission, for a lossless priority) and
// starts the serializer if it is idle.
func (p *Pipe) enqueueLossless(frame []byte, owned int32, c carried, in int32) bool {
	n := len(frame)
	drop := func() bool {
		p.counters.DropQueue++
		ev := c.event(TraceDrop, p, frame)
		ev.Cause = DropQueue
		p.sh.trace(ev)
		return false
	}
	if p.lossless.stormUntil > p.sh.loop.now {
		if sw, ok := p.net.nodes[p.from].(*Switch); ok {
			sw.pfc.counters.DropWatchdog++
		}
		return drop()
	}
	prio, lossless := p.net.priority(frame)
	l := p.lossless
	switch {
	case lossless:
		if sw, ok := p.net.nodes[p.from].(*Switch); ok && !sw.admit(in, prio, n) {
			return drop()
		}
	case p.net.pfcMask != 0 && p.cfg.QueueBytes > 0 && l.lossyBytes+n > p.cfg.QueueBytes:
		return drop() // a lossy priority: the port's queue bound
	}
	i := owned
	if i < 0 {
		var buf []byte
		i, buf = p.sh.getBuf(n)
		copy(buf, frame)
	}
	w := waiting{buf: i, n: int32(n), c: c, mark: p.redMarks(), prio: int8(prio), in: in}
	if !lossless {
		w.in = -1 // not counted towards XOFF
		l.lossyBytes += n
	}
	l.q[prio].push(w)
	p.queueBytes += n
	p.counters.MaxQueueBytes = max(p.counters.MaxQueueBytes, p.queueBytes)
	p.serve()
	return owned >= 0
}

// serve starts serializing the next frame if the port is idle: a control
// frame first, else priorities 7 and 6, else the next of 0-5 in turn, each
// unless paused. A port whose only frames are paused wakes when the first
// pause ends.
func (p *Pipe) serve() {
	l := p.lossless
	if l.serving {
		return
	}
	now := p.sh.loop.now
	if len(l.ctrl) > 0 {
		f := l.ctrl[0]
		l.ctrl = l.ctrl[1:]
		end := now + p.serialization(len(f))
		l.serving, l.cur = true, waiting{buf: -1, in: -1}
		p.busyUntil = end
		p.launch(f, -1, carried{}, false, end)
		p.sh.loop.Call(end, p.sh.serialID, uint64(p.index))
		return
	}
	ready := func(prio int) bool { return l.q[prio].len() > 0 && now >= l.pausedUntil[prio] }
	for _, prio := range [2]int{7, 6} {
		if ready(prio) {
			p.start(l.q[prio].pop(), now)
			return
		}
	}
	for k := range 6 {
		prio := (l.rr + k) % 6
		if ready(prio) {
			l.rr = (prio + 1) % 6
			p.start(l.q[prio].pop(), now)
			return
		}
	}
	wake := Never
	for prio := range 8 {
		if l.q[prio].len() > 0 {
			wake = min(wake, l.pausedUntil[prio])
		}
	}
	if wake != Never && l.wakeAt != wake {
		l.wakeAt = wake
		p.sh.loop.Call(wake, p.sh.serialID, uint64(p.index))
	}
}

// start serializes the waiting frame w from now.
func (p *Pipe) start(w waiting, now Time) {
	l := p.lossless
	end := now + p.serialization(int(w.n))
	l.serving, l.cur = true, w
	p.busyUntil = end
	buf := p.sh.buf(w.buf, w.n)
	if !p.launch(buf, w.buf, w.c, w.mark, end) {
		p.sh.putBuf(w.buf)
	}
	p.sh.loop.Call(end, p.sh.serialID, uint64(p.index))
}

// serialDone ends the current frame's serialization (or a pause's wait):
// the frame leaves the queue, its switch releases it, the next starts.
func (p *Pipe) serialDone() {
	l := p.lossless
	now := p.sh.loop.now
	if l.serving && p.busyUntil <= now {
		l.serving = false
		if l.cur.buf >= 0 {
			p.dequeued(l.cur)
		}
	}
	if l.wakeAt != 0 && l.wakeAt <= now {
		l.wakeAt = 0
	}
	p.serve()
}

// dequeued accounts for a frame that left the port's queue (sent or
// dropped).
func (p *Pipe) dequeued(w waiting) {
	p.queueBytes -= int(w.n)
	if !p.net.isLossless(int(w.prio)) {
		p.lossless.lossyBytes -= int(w.n)
	}
	if w.in < 0 {
		return
	}
	if sw, ok := p.net.nodes[p.from].(*Switch); ok {
		sw.release(w.in, int(w.prio), int(w.n))
	}
}

// pause applies PAUSE times that arrived on the reverse pipe to the
// priorities enable names that are lossless here: stop each for its
// quanta (0: resume now).
func (p *Pipe) pause(enable uint16, times [8]uint16) {
	l := p.lossless
	if l == nil {
		return
	}
	now := p.sh.loop.now
	if l.stormUntil > now {
		return // the watchdog ignores this port's PAUSEs for now
	}
	resumed := false
	for prio := range 8 {
		if enable&(1<<prio) == 0 || !p.net.isLossless(prio) {
			continue
		}
		quanta := times[prio]
		if quanta == 0 {
			l.pausedSince[prio] = 0
			if l.pausedUntil[prio] > now {
				l.paused[prio] -= l.pausedUntil[prio] - now
				l.pausedUntil[prio] = now
				resumed = true
			}
			continue
		}
		if l.pausedUntil[prio] < now || l.pausedSince[prio] == 0 {
			l.pausedSince[prio] = now // a new pause, not a refresh of one in force
		}
		until := now + p.quantaTime(quanta)
		if until > l.pausedUntil[prio] {
			l.paused[prio] += until - max(l.pausedUntil[prio], now)
			l.pausedUntil[prio] = until
		}
		l.pauses++
		p.watchdog(now, prio)
	}
	if resumed {
		p.serve()
		if l.onResume != nil {
			l.onResume()
		}
	}
}

// watchdog declares a PFC storm on the switch port p when priority prio
// has been paused without a break for the detection time with frames
// waiting: the pauses end, PAUSEs are ignored and what waits in the
// lossless queues or comes is dropped until the restore time has passed.
func (p *Pipe) watchdog(now Time, prio int) {
	sw, ok := p.net.nodes[p.from].(*Switch)
	if !ok || sw.pfc == nil || sw.pfc.cfg.WatchdogDetect == 0 {
		return
	}
	l := p.lossless
	if now-l.pausedSince[prio] < sw.pfc.cfg.WatchdogDetect || l.q[prio].len() == 0 {
		return
	}
	sw.pfc.counters.Storms++
	l.stormUntil = now + sw.pfc.cfg.WatchdogRestore
	for c := range 8 {
		if l.pausedUntil[c] > now {
			l.paused[c] -= l.pausedUntil[c] - now
			l.pausedUntil[c] = now
		}
		l.pausedSince[c] = 0
		if !p.net.isLossless(c) {
			continue
		}
		q := &l.q[c]
		for _, w := range q.w[q.head:] {
			p.dequeued(w)
			sw.pfc.counters.DropWatchdog++
			p.counters.DropQueue++
			ev := w.c.event(TraceDrop, p, p.sh.buf(w.buf, w.n))
			ev.Cause = DropQueue
			p.sh.trace(ev)
			p.sh.putBuf(w.buf)
		}
		q.clear()
	}
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
func (n *shard) ensureSerialHandler() {
	if n.serialID == 0 {
		n.serialID = n.loop.Handle(serialHandler{n.net})
	}
}

type serialHandler struct{ n *Network }

func (h serialHandler) Fire(arg uint64) { h.n.pipes[arg].serialDone() }

// Lossless reports whether p is a PFC port.
func (p *Pipe) Lossless() bool { return p.lossless != nil }

// blocked reports whether priority prio of p is stopped by a PAUSE with
// frames waiting.
func (p *Pipe) blocked(prio int) bool {
	l := p.lossless
	return l != nil && l.pausedUntil[prio] > p.sh.loop.now && l.q[prio].len() > 0
}

// holdsFrom reports whether p's queue of priority prio holds a frame that
// came in by port in of the switch that sends it.
func (p *Pipe) holdsFrom(in, prio int) bool {
	q := &p.lossless.q[prio]
	for _, w := range q.w[q.head:] {
		if int(w.in) == in {
			return true
		}
	}
	return false
}

// PFCDeadlock returns a cycle of the PFC wait-for graph, or nil: ports
// whose queue of one lossless priority is stopped by a PAUSE with frames
// waiting, each waiting on the next, the port its frames of that priority
// are queued for at the next switch, which is stopped in turn (a cyclic
// buffer dependency: nothing in it can move until a PAUSE lifts, and none
// will). Priorities are paused apart, so a cycle is within one. The cycle
// is given from its lowest-indexed pipe, so that the same deadlock reads
// the same each time.
func (n *Network) PFCDeadlock() []*Pipe {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(n.pipes))
	var path []*Pipe
	var found []*Pipe
	var visit func(p *Pipe, prio int) bool
	visit = func(p *Pipe, prio int) bool {
		state[p.index] = onPath
		path = append(path, p)
		if sw, ok := n.nodes[p.to].(*Switch); ok {
			for _, q := range sw.outs {
				if !q.blocked(prio) || !q.holdsFrom(p.toPort, prio) {
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
					if visit(q, prio) {
						return true
					}
				}
			}
		}
		path = path[:len(path)-1]
		state[p.index] = done
		return false
	}
	for prio := 0; prio < 8 && found == nil; prio++ {
		if !n.isLossless(prio) {
			continue
		}
		clear(state)
		path = path[:0]
		for _, p := range n.pipes {
			if state[p.index] == unseen && p.blocked(prio) && visit(p, prio) {
				break
			}
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
