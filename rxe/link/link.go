// Package link defines how a softroce device reaches a network, and the
// links it can use: an in-memory pair, a kernel UDP socket, a TAP device, and
// middleware (capture, fault injection) that wraps any of them.
package link

import "net"

// Frame is an Ethernet II frame crossing a link, with what the link knows
// about it beyond its bytes.
type Frame struct {
	Data []byte
	// IPIDUnknown is set by links that cannot see the IPv4 identification
	// and flags the sender used (a UDP socket): Data carries a rebuilt IPv4
	// header with ID 0 and only DF set, so the ICRC must be checked with
	// those bytes treated as unknown (packet.CheckICRCUnknownIPID; the
	// story is in packet/ipid.go).
	IPIDUnknown bool
	// ICRCChecked is set by a link that has checked the ICRC itself, as a
	// NIC does in hardware: the simulator, for frames no fault touched on
	// the way (their ICRC is the sender's, over the same bytes). The
	// device then skips its own check.
	ICRCChecked bool
}

// Link moves Ethernet frames. Links that are not Ethernet underneath (a UDP
// socket) rebuild or strip the Ethernet, IP and UDP headers at their edge.
type Link interface {
	// Send transmits frames, returning how many were sent. The caller may
	// reuse the frames' buffers when Send returns.
	Send(frames []Frame) (int, error)
	// Recv blocks until at least one frame arrives or the link is closed,
	// fills frames from the front and returns how many it filled. The data
	// stays valid until the next Recv.
	Recv(frames []Frame) (int, error)
	// MTU returns the largest IP packet the link carries.
	MTU() int
	// MAC returns the link's own hardware address.
	MAC() [6]byte
	// Close releases the link; a blocked Recv returns an error.
	Close() error
}

// ErrClosed is returned by Send and Recv on a closed link. It is
// net.ErrClosed, so socket-backed links return it unchanged.
var ErrClosed = net.ErrClosed

// Counter is one named event count a link keeps (frames dropped by a full
// queue, by the MTU, by an injected fault...).
type Counter struct {
	Name  string
	Value uint64
}

// Counting is implemented by links that keep counters. A middleware link
// appends only its own counters; Counters walks the whole chain.
type Counting interface {
	AppendCounters(dst []Counter) []Counter
}

// Wrapper is implemented by middleware links to expose the link they wrap.
type Wrapper interface {
	Unwrap() Link
}

// SourcePortFixer is implemented by links that cannot send the UDP source
// port a frame carries (a UDP socket sends from the port it is bound to). A
// device must then build frames, and compute their ICRC, with that port.
type SourcePortFixer interface {
	FixedSourcePort() (port uint16, fixed bool)
}

// Counters returns the counters of l and of every link it wraps, outermost
// first.
func Counters(l Link) []Counter {
	var out []Counter
	for l != nil {
		if c, ok := l.(Counting); ok {
			out = c.AppendCounters(out)
		}
		w, ok := l.(Wrapper)
		if !ok {
			break
		}
		l = w.Unwrap()
	}
	return out
}

// FixedSourcePort reports the UDP source port l (or a link it wraps) forces
// on every frame it sends, if any.
func FixedSourcePort(l Link) (uint16, bool) {
	for l != nil {
		if f, ok := l.(SourcePortFixer); ok {
			if p, fixed := f.FixedSourcePort(); fixed {
				return p, true
			}
		}
		w, ok := l.(Wrapper)
		if !ok {
			break
		}
		l = w.Unwrap()
	}
	return 0, false
}
