package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Config holds what a Manager is told about its port once.
type Config struct {
	// GUID is the port's node GUID: the REQ's and REP's CA GUID, which the
	// peer uses with comm IDs and QPNs to tell connections apart.
	GUID uint64
	// Seed makes comm IDs and transaction IDs: random-looking as the
	// kernel's, and the same for the same seed.
	Seed uint64
	// TargetACKDelay is the device's local ACK delay, sent in REPs (kernel
	// rxe: 15).
	TargetACKDelay uint8
	// MaxConns bounds the connections (any state, timewait included); a REQ
	// or SIDR_REQ beyond it is refused with "no resources". 0 means 4096.
	MaxConns int
	// MaxOutputs bounds the MADs waiting to be sent; beyond it a MAD is
	// dropped (and counted): its retransmission or the peer's retries cover
	// it. 0 means 1024.
	MaxOutputs int
}

// ConnID names a connection: its local comm ID.
type ConnID uint32

// ListenID names a listener.
type ListenID uint32

// Output is a MAD to send from QP 1 to the QP 1 at To.
type Output struct {
	To  netip.Addr
	MAD [packet.MADLen]byte
}

// Errors a consumer's call can return, for errors.Is.
var (
	ErrNoConn    = errors.New("cm: no such connection")
	ErrState     = errors.New("cm: connection is not in a state that allows this")
	ErrListening = errors.New("cm: service ID already has a listener")
	ErrTooMany   = errors.New("cm: too many connections")
)

// Manager is one port's communication manager.
type Manager struct {
	cfg   Config
	rng   *rand.Rand
	hiTID uint32

	conns      map[ConnID]*conn
	byRemote   map[remoteKey]*conn // passive connections by the peer's comm ID
	byQPN      map[remoteKey]*conn // connections by the peer's QPN, for stale checks
	sidrs      map[sidrKey]*conn   // SIDR requests received, by request ID and peer
	listeners  map[uint64]ListenID
	listenIDs  map[ListenID]uint64
	nextListen ListenID

	out     []Output
	events  []Event
	scratch []*conn

	c Counters
}

// remoteKey is a peer's comm ID or QPN with its CA GUID.
type remoteKey struct {
	id   uint32
	guid uint64
}

// sidrKey is a SIDR request's ID and its sender.
type sidrKey struct {
	id   uint32
	peer netip.Addr
}

// New returns a Manager for a port.
func New(cfg Config) *Manager {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 4096
	}
	if cfg.MaxOutputs <= 0 {
		cfg.MaxOutputs = 1024
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x636d)) // "cm"
	return &Manager{
		cfg: cfg, rng: rng, hiTID: rng.Uint32()&0xFFFF | 1,
		conns: map[ConnID]*conn{}, byRemote: map[remoteKey]*conn{}, byQPN: map[remoteKey]*conn{},
		sidrs: map[sidrKey]*conn{}, listeners: map[uint64]ListenID{}, listenIDs: map[ListenID]uint64{},
	}
}

// Counters returns the manager's counters.
func (m *Manager) Counters() Counters { return m.c }

// Conns returns the number of connections the manager holds.
func (m *Manager) Conns() int { return len(m.conns) }

// Listening appends the service IDs the manager listens on to ids, in no
// particular order, and returns the result.
func (m *Manager) Listening(ids []uint64) []uint64 {
	for sid := range m.listeners {
		ids = append(ids, sid)
	}
	return ids
}

// State returns a connection's state, StateIdle for one the manager does
// not hold.
func (m *Manager) State(id ConnID) State {
	if c := m.conns[id]; c != nil {
		return c.state
	}
	return StateIdle
}

// Listen makes the manager take REQs and SIDR_REQs for serviceID: each
// becomes an EventReq or EventSIDRReq naming the returned listener.
func (m *Manager) Listen(serviceID uint64) (ListenID, error) {
	if _, ok := m.listeners[serviceID]; ok {
		return 0, fmt.Errorf("listen on service ID %#x: %w", serviceID, ErrListening)
	}
	m.nextListen++
	m.listeners[serviceID] = m.nextListen
	m.listenIDs[m.nextListen] = serviceID
	return m.nextListen, nil
}

// Unlisten stops a listener; connections it made are not touched.
func (m *Manager) Unlisten(l ListenID) {
	if sid, ok := m.listenIDs[l]; ok {
		delete(m.listeners, sid)
		delete(m.listenIDs, l)
	}
}

// Output hands back the next MAD to send, if any.
func (m *Manager) Output() (Output, bool) {
	if len(m.out) == 0 {
		return Output{}, false
	}
	o := m.out[0]
	m.out = m.out[1:]
	if len(m.out) == 0 {
		m.out = m.out[:0:0]
	}
	return o, true
}

// Event hands back the next event for the consumer, if any.
func (m *Manager) Event() (Event, bool) {
	if len(m.events) == 0 {
		return Event{}, false
	}
	e := m.events[0]
	m.events[0] = Event{}
	m.events = m.events[1:]
	if len(m.events) == 0 {
		m.events = m.events[:0:0]
	}
	return e, true
}

// newLocalID returns an unused, non-zero local comm ID.
func (m *Manager) newLocalID() ConnID {
	for {
		id := ConnID(m.rng.Uint32())
		if _, used := m.conns[id]; id != 0 && !used {
			return id
		}
	}
}

// tid forms a transaction ID as the kernel does (cm_form_tid): the agent's
// high half over the local comm ID as it lies in memory on a little-endian
// host.
func (m *Manager) tid(id ConnID) uint64 {
	v := uint32(id)
	return uint64(m.hiTID)<<32 | uint64(v>>24|v>>8&0xFF00|v<<8&0xFF0000|v<<24)
}

// send builds a MAD with attribute a, transaction tid and message msg
// and queues it for to.
func (m *Manager) send(to netip.Addr, a packet.CMAttr, tid uint64, msg packet.CMMessage) {
	var b [packet.MADLen]byte
	build(&b, a, tid, msg)
	m.queue(to, &b)
}

// build writes a CM MAD into b.
func build(b *[packet.MADLen]byte, a packet.CMAttr, tid uint64, msg packet.CMMessage) {
	mad := packet.MAD(b[:])
	mad.EncodeHeader(&packet.MADHeader{BaseVersion: packet.MADBaseVersion, MgmtClass: packet.MgmtClassCM,
		ClassVersion: packet.CMClassVersion, Method: packet.MADMethodSend, TID: tid, AttrID: a})
	if err := msg.Encode(mad.Data()); err != nil {
		// Private data is checked where the consumer hands it over;
		// nothing else can fail.
		panic(fmt.Sprintf("cm: encode %v: %v", a, err))
	}
}

// queue queues a copy of a built MAD for to.
func (m *Manager) queue(to netip.Addr, b *[packet.MADLen]byte) {
	if len(m.out) >= m.cfg.MaxOutputs {
		m.c.OutputsDropped++
		return
	}
	m.out = append(m.out, Output{To: to, MAD: *b})
	m.c.Sent[attrIndex(packet.MAD(b[:]).AttrID())]++
}

// emit queues an event.
func (m *Manager) emit(e Event) { m.events = append(m.events, e) }

// checkPrivate refuses private data longer than max.
func checkPrivate(pd []byte, max int) error {
	if len(pd) > max {
		return fmt.Errorf("%w: %d bytes, at most %d", packet.ErrCMPrivateData, len(pd), max)
	}
	return nil
}

// own copies private data out of a received MAD.
func own(pd []byte) []byte { return append([]byte(nil), pd...) }

// HasOutput reports whether MADs wait to be sent.
func (m *Manager) HasOutput() bool { return len(m.out) > 0 }

// HasEvents reports whether events wait for the consumer.
func (m *Manager) HasEvents() bool { return len(m.events) > 0 }
