package sim

import (
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/sim/netsim"
)

// Device is the sans-I/O core a simulated host runs. The simulator calls it
// only from its event loop, with the loop's virtual time.
type Device interface {
	// HandleFrame processes a frame that arrived; frame is valid only
	// during the call. intact says no fault touched it on the way
	// (netsim.Network.Intact): its ICRC is the sender's, and the device may
	// take it as checked, as a NIC's hardware check would have.
	HandleFrame(now netsim.Time, frame []byte, intact bool)
	// Output hands up to max frames the device wants sent to emit, one at a
	// time (each valid only during its emit call), and returns how many and
	// whether more output is waiting.
	Output(now netsim.Time, max int, emit func(frame []byte)) (int, bool)
	// Tick runs the device's timers.
	Tick(now netsim.Time)
	// Deadline returns when Tick is next due, or netsim.Never.
	Deadline() netsim.Time
}

// outputBurst is how many frames a host hands its link per service: a NIC
// pulls from its queues only as fast as its wire drains, so the host takes
// the next burst when the link has serialized this one. Small enough that
// the host's own egress queue stays short, large enough that the event loop
// is not dominated by service events.
const outputBurst = 16

// host is a node running a Device on a single port.
type host struct {
	index int
	name  string
	id    netsim.NodeID
	addr  netsim.Addr
	loop  *netsim.Loop
	net   *netsim.Network
	dev   Device
	out   *netsim.Pipe

	// serviceAt is when a service event is scheduled (Never: none).
	serviceAt netsim.Time
	// tickAt is the time of the earliest tick event scheduled.
	tickAt netsim.Time
	// poll, when set, runs at each service before output: the workload
	// polls completions and posts work there.
	poll func(now netsim.Time)
	// polled, when set, reports whether completions are waiting for poll:
	// a device may complete work while producing output (UC and UD sends
	// complete when their last packet leaves), and they must be seen now,
	// not at the next unrelated event.
	polled func() bool

	// lastTick is when Tick last ran; a deadline at or before it is moved
	// just after it, so that a device whose deadline does not advance
	// cannot stall virtual time.
	lastTick netsim.Time

	frames uint64 // frames received
	emits  uint64 // frames sent

	// Corruption check: a frame whose ICRC is wrong (corrupted on the way,
	// on any hop) must not be accepted: accepted must not move across
	// HandleFrame.
	accepted func() uint64
	onAccept func(frame []byte)
	onEmit   func(frame []byte)
	emitFn   func(frame []byte) // h.emit, made once: a method value allocates
	// The loop's handler IDs of the host's events.
	serviceID, tickID netsim.HandlerID
}

// hostService and hostTick are a host's two kinds of events (Handlers,
// not closures, so that scheduling them does not allocate); the argument is
// the time they were scheduled for.
type (
	hostService host
	hostTick    host
)

// icrcOK reports whether frame parses as RoCE v2 with a correct ICRC. The
// parsed frame is a local: on the stack, filling in its slices costs no GC
// write barriers, as it would in a long-lived struct.
func icrcOK(frame []byte) bool {
	var f packet.Frame
	return packet.ParseFrame(frame, &f) == nil && f.ICRCOK()
}

func newHost(index int, name string, loop *netsim.Loop, dev Device) *host {
	h := &host{index: index, name: name, loop: loop, dev: dev, serviceAt: netsim.Never, tickAt: netsim.Never, lastTick: -1}
	h.emitFn = h.emit
	h.serviceID = loop.Handle((*hostService)(h))
	h.tickID = loop.Handle((*hostTick)(h))
	return h
}

// Receive hands an arriving frame to the device.
//
// A frame some fault corrupted on the way is checked here as well as by the
// device: if its ICRC is wrong, the device must not accept it. An intact
// frame needs neither check; its ICRC was computed by the sender over the
// bytes that arrive (a test of the sender's ICRC against kernel rxe's and
// tshark's is in packet/ and interop/).
func (h *host) Receive(_ int, frame []byte) {
	h.frames++
	intact := h.net.IntactAt(h.id)
	if h.accepted != nil && !intact && !icrcOK(frame) {
		before := h.accepted()
		h.dev.HandleFrame(h.loop.Now(), frame, false)
		if h.accepted() != before && h.onAccept != nil {
			h.onAccept(frame)
		}
	} else {
		h.dev.HandleFrame(h.loop.Now(), frame, intact)
	}
	h.kick()
}

// kick schedules a service now, unless one is already due by then. Events
// already scheduled for this instant run first, so frames arriving together
// are handled before the device is asked for output.
func (h *host) kick() { h.kickAt(h.loop.Now()) }

func (h *host) kickAt(t netsim.Time) {
	if h.serviceAt <= t {
		return
	}
	h.serviceAt = t
	h.loop.Call(t, h.serviceID, uint64(t))
}

// Fire runs a service scheduled for time t.
func (s *hostService) Fire(t uint64) {
	h := (*host)(s)
	if h.serviceAt != netsim.Time(t) {
		return // superseded by an earlier service
	}
	h.service()
}

// service lets the workload run, moves one burst of the device's output to
// the link, and arms the device's timer.
func (h *host) service() {
	now := h.loop.Now()
	h.serviceAt = netsim.Never
	if h.poll != nil {
		h.poll(now)
	}
	n, more := h.dev.Output(now, outputBurst, h.emitFn)
	if more {
		// Come back when the wire has taken this burst (and never at the
		// same instant with nothing sent, which could spin).
		next := max(h.out.BusyUntil(), now)
		if n == 0 {
			next = max(next, now+1)
		}
		h.kickAt(next)
	}
	if h.polled != nil && h.polled() {
		h.kick()
	}
	h.arm()
}

func (h *host) emit(frame []byte) {
	h.emits++
	if h.onEmit != nil {
		h.onEmit(frame)
	}
	h.out.Send(frame)
}

// arm schedules a tick at the device's deadline if that is earlier than any
// tick already scheduled. A tick that fires early (the deadline moved later)
// is harmless: Tick with nothing due does nothing, and the host re-arms.
func (h *host) arm() {
	d := h.dev.Deadline()
	if d == netsim.Never || d >= h.tickAt {
		return
	}
	d = max(d, h.loop.Now(), h.lastTick+1)
	h.tickAt = d
	h.loop.Call(d, h.tickID, uint64(d))
}

// Fire runs the device's timers at a tick scheduled for time d.
func (k *hostTick) Fire(d uint64) {
	h := (*host)(k)
	if h.tickAt != netsim.Time(d) {
		return // superseded by an earlier tick
	}
	h.tickAt = netsim.Never
	if h.dev.Deadline() > h.loop.Now() {
		// The deadline moved later since this tick was set: nothing is
		// due, and a service now would pull frames the wire has no room
		// for yet.
		h.arm()
		return
	}
	h.lastTick = h.loop.Now()
	h.dev.Tick(h.lastTick)
	h.service()
}
