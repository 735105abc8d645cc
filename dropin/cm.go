package dropin

// cm.go: the RDMA connection manager for the drop-in librdmacm.so.1, the
// part of the kernel's ucma the daemon plays. A connection's ids and event
// channels live here; connections go through the device's connection
// manager (verbsapi.CMPort), whose events arrive on the router goroutine
// and are queued raw on the id's channel (cmSession.mu, never held while
// calling the CMPort); GET_EVENT turns each into librdmacm's event under
// the connection's lock, where ids change.

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/verbsapi"
)

// Bounds on what one program may hold.
const (
	maxCMIDs      = 4096
	maxCMChannels = 256
)

// cmSession is one connection's rdma_cm state.
type cmSession struct {
	port *verbsapi.CMPort

	mu    sync.Mutex // the channels' queues and ids' channel fields
	chans map[uint32]*cmChan

	ids map[uint32]*cmID // under conn.mu
}

// cmChan is an event channel.
type cmChan struct {
	q eventQueue[cmPending]
}

// cmPending is a queued event: a connection manager event about id, or one
// the session made itself (ev.Event set, synth true).
type cmPending struct {
	id    uint32
	cm    cm.Event
	synth bool
	ev    wireCMEvent
}

// id states, as rdma_cm's.
const (
	idIdle = iota
	idBound
	idAddrResolved
	idRouteResolved
	idListen
	idConnect   // REQ or SIDR_REQ sent
	idRequest   // a request's child, not accepted yet
	idAccepted  // REP sent
	idResponded // REP received, RTU not sent
	idConnected
	idDisconnected
)

// cmID is one rdma_cm id.
type cmID struct {
	handle, channel uint32
	ps, qpType      uint32
	state           int
	src, dst        netip.AddrPort
	ownPort         bool
	listen          cm.ListenID
	listening       bool
	conn            cm.ConnID
	tracked         bool
	child           bool // made by a request, on its listener's channel

	// The connection's parameters: the REQ (sent or received), the REP
	// (received), our receive PSN and the resources we grant and use.
	req       packet.CMReq
	rep       packet.CMRep
	psn       uint32
	respRes   uint8
	initDepth uint8
	retry     uint8
	// rdma_set_option values.
	tos, ackTimeout uint8
	// The peer's UD answer (SIDR).
	udQPN, udQKey uint32
}

func (c *conn) cmSession() *cmSession {
	if c.cm == nil {
		c.cm = &cmSession{port: c.ctx.CMPort(), chans: map[uint32]*cmChan{}, ids: map[uint32]*cmID{}}
	}
	return c.cm
}

// push queues an event for id on its channel. Safe from any goroutine.
func (s *cmSession) push(id *cmID, p cmPending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.chans[id.channel]; ch != nil {
		p.id = id.handle
		ch.q.push(p)
	}
}

// synth queues an event the session makes itself (ADDR_RESOLVED and such).
func (s *cmSession) synth(id *cmID, event uint32, status int32) {
	s.push(id, cmPending{synth: true, ev: wireCMEvent{ID: id.handle, ListenID: srNone, Event: event, Status: status}})
}

// sink routes the connection manager's events about id to its channel.
func (s *cmSession) sink(id *cmID) func(cm.Event) {
	return func(e cm.Event) { s.push(id, cmPending{cm: e}) }
}

// close ends the session with the program: every id destroyed as
// rdma_destroy_id would, every channel closed.
func (s *cmSession) close(c *conn) {
	for _, id := range s.ids {
		c.destroyID(id)
	}
	s.mu.Lock()
	for h, ch := range s.chans {
		ch.q.close()
		delete(s.chans, h)
	}
	s.mu.Unlock()
}

func (c *conn) cmCreateChannel(b []byte) syscall.Errno {
	s := c.cmSession()
	if len(b) != 0 {
		return syscall.EINVAL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chans) >= maxCMChannels {
		return c.refuse(syscall.EMFILE, "%d event channels already", len(s.chans))
	}
	ch := &cmChan{q: newEventQueue[cmPending]()}
	fd, err := ch.q.open()
	if err != nil {
		return c.errnoOf(err)
	}
	h := c.handle()
	s.chans[h] = ch
	c.outFD = fd
	c.w.put(wireHandle{h})
	return 0
}

func (c *conn) cmDestroyChannel(b []byte) syscall.Errno {
	s := c.cmSession()
	h, ok := handleArg(b)
	if !ok {
		return syscall.EINVAL
	}
	for _, id := range s.ids {
		if id.channel == h {
			return c.refuse(syscall.EBUSY, "event channel %d still has ids", h)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chans[h]
	if ch == nil {
		return syscall.EINVAL
	}
	ch.q.close()
	delete(s.chans, h)
	return 0
}

func (c *conn) cmCreateID(b []byte) syscall.Errno {
	s := c.cmSession()
	var a wireCMCreateID
	if !decode(b, &a) {
		return syscall.EINVAL
	}
	s.mu.Lock()
	_, chOK := s.chans[a.Channel]
	s.mu.Unlock()
	if !chOK {
		return c.refuse(syscall.EINVAL, "no event channel %d", a.Channel)
	}
	switch a.PS {
	case psTCP, psIB:
		if a.QPType != qpTypeRC && a.QPType != qpTypeUC {
			a.QPType = qpTypeRC
		}
	case psUDP:
		a.QPType = qpTypeUD
	default:
		return c.refuse(syscall.EPROTONOSUPPORT, "port space %#x: softroce serves TCP, UDP and IB", a.PS)
	}
	if len(s.ids) >= maxCMIDs {
		return c.refuse(syscall.EMFILE, "%d rdma_cm ids already", len(s.ids))
	}
	h := c.handle()
	s.ids[h] = &cmID{handle: h, channel: a.Channel, ps: a.PS, qpType: a.QPType, ackTimeout: cmAckTimeout}
	c.w.put(wireHandle{h})
	return 0
}

// cmAckTimeout is rdma_cm's QP ACK timeout on rxe: cm_ack_timeout(15, 18).
const cmAckTimeout = cm.PacketLifetime + 1

// cmArg decodes a request's body into v, whose first field is the handle
// of the id it is about, and returns that id (nil for a malformed body or
// an unknown handle).
func cmArg[T any](c *conn, b []byte, v *T) *cmID {
	if !decode(b, v) || len(b) < 4 {
		return nil
	}
	return c.cmID(binary.LittleEndian.Uint32(b))
}

// id looks up the id a request names.
func (c *conn) cmID(h uint32) *cmID {
	if c.cm == nil {
		return nil
	}
	return c.cm.ids[h]
}

func (c *conn) cmDestroyID(b []byte) syscall.Errno {
	id := cmArg(c, b, &wireHandle{})
	if id == nil {
		return syscall.EINVAL
	}
	c.destroyID(id)
	return 0
}

// destroyID tells the peer as the kernel does (a REJ to a request being set
// up, a DREQ to a connection), stops listening, frees the port and drops
// the id's queued events.
func (c *conn) destroyID(id *cmID) {
	s := c.cm
	if id.tracked {
		s.port.Untrack(id.conn)
		s.port.Do(func(m *cm.Manager, now cm.Time) { m.Destroy(now, id.conn) })
		id.tracked = false
	}
	if id.listening {
		s.port.Unlisten(id.listen)
		id.listening = false
	}
	if id.ownPort {
		s.port.ReleasePort(id.src.Port())
		id.ownPort = false
	}
	s.mu.Lock()
	if ch := s.chans[id.channel]; ch != nil {
		ch.q.remove(func(p cmPending) bool { return p.id == id.handle })
	}
	s.mu.Unlock()
	delete(s.ids, id.handle)
}

func (c *conn) cmMigrate(b []byte) syscall.Errno {
	var a wireCMMigrate
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	s := c.cm
	s.mu.Lock()
	defer s.mu.Unlock()
	to := s.chans[a.Channel]
	if to == nil {
		return syscall.EINVAL
	}
	if from := s.chans[id.channel]; from != nil && from != to {
		var moved []cmPending
		from.q.remove(func(p cmPending) bool {
			if p.id == id.handle {
				moved = append(moved, p)
				return true
			}
			return false
		})
		for _, p := range moved {
			to.q.push(p)
		}
	}
	id.channel = a.Channel
	return 0
}

func (c *conn) cmSetOption(b []byte) syscall.Errno {
	var a wireCMOption
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	if a.Level != optLevelID {
		return c.refuse(syscall.ENOSYS, "rdma_set_option level %d: softroce has no InfiniBand path records", a.Level)
	}
	switch a.Name {
	case optTOS:
		id.tos = uint8(a.Value)
	case optACKTimeout:
		if a.Value > 31 {
			return syscall.EINVAL
		}
		id.ackTimeout = uint8(a.Value)
	case optReuseAddr, optAFOnly:
	default:
		return syscall.ENOSYS
	}
	return 0
}
