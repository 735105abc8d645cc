package link

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softroce/softroce/packet"
)

// Mem links live in one process and hand frames over through bounded
// per-receiver rings of preallocated buffers. The sender copies each frame
// once, straight into the receiver's ring, under the receiver's lock, and
// wakes the receiver once per batch (and only when it waits), so a frame
// costs one copy and no allocation or goroutine switch of its own. A full
// ring drops the newest frames (drop-tail), as a switch port would.

// DefaultMemQueueLen is the number of frames a Mem link's receive ring holds
// when MemOptions.QueueLen is 0.
const DefaultMemQueueLen = 512

// maxL2Header is the Ethernet header with one VLAN tag: a frame may be this
// much longer than the MTU.
const maxL2Header = packet.EthernetLen + 4

// MemOptions configures in-memory links.
type MemOptions struct {
	MTU      int // largest IP packet; 0 means 4096+128
	QueueLen int // receive ring size in frames; 0 means DefaultMemQueueLen
}

func (o MemOptions) withDefaults() MemOptions {
	if o.MTU <= 0 {
		o.MTU = 4096 + 128
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultMemQueueLen
	}
	return o
}

// MemHub is an in-memory Ethernet switch: frames go to the port whose MAC
// is the destination, to every other port for a group (broadcast or
// multicast) destination, and, for a zero destination MAC (a device that has
// not resolved its peer), to the port that owns the destination IP address,
// so the hub stands in for ARP.
type MemHub struct {
	opts  MemOptions
	mu    sync.Mutex
	ports atomic.Pointer[[]*Mem] // copy on write
}

// NewMemHub returns a hub whose ports use o.
func NewMemHub(o MemOptions) *MemHub {
	h := &MemHub{opts: o.withDefaults()}
	h.ports.Store(&[]*Mem{})
	return h
}

// Attach adds a port with hardware address mac owning the IP addresses addrs
// (IPv4-mapped addresses match IPv4 packets).
func (h *MemHub) Attach(mac [6]byte, addrs ...netip.Addr) *Mem {
	m := newMem(mac, h.opts)
	m.hub = h
	for _, a := range addrs {
		m.addrs = append(m.addrs, a.Unmap())
	}
	h.mu.Lock()
	old := *h.ports.Load()
	ports := append(old[:len(old):len(old)], m)
	h.ports.Store(&ports)
	h.mu.Unlock()
	return m
}

func (h *MemHub) detach(m *Mem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.ports.Load()
	ports := make([]*Mem, 0, len(old))
	for _, p := range old {
		if p != m {
			ports = append(ports, p)
		}
	}
	h.ports.Store(&ports)
}

// NewMemPair returns two links joined back to back: whatever one sends, the
// other receives, whatever its destination MAC. Their MACs are
// 02:00:00:00:00:01 and 02:00:00:00:00:02.
func NewMemPair(mtu int) (a, b *Mem) {
	o := MemOptions{MTU: mtu}.withDefaults()
	a = newMem([6]byte{2, 0, 0, 0, 0, 1}, o)
	b = newMem([6]byte{2, 0, 0, 0, 0, 2}, o)
	a.peer, b.peer = b, a
	return a, b
}

// Mem is one end of an in-memory link (NewMemPair) or a port of a MemHub.
type Mem struct {
	mac   [6]byte
	addrs []netip.Addr
	mtu   int
	hub   *MemHub
	peer  *Mem
	q     ring

	closed                            atomic.Bool
	sent, oversize, noRoute, toClosed atomic.Uint64
}

func newMem(mac [6]byte, o MemOptions) *Mem {
	m := &Mem{mac: mac, mtu: o.MTU}
	m.q.init(o.QueueLen, o.MTU+maxL2Header)
	return m
}

// Reaches reports whether a frame to addr finds a port: on a pair always,
// on a hub when a port (this one included) owns the address. A mem link is
// a network of its own process: a peer elsewhere is never on it, and
// callers can say so at once rather than after a QP's retries.
func (m *Mem) Reaches(addr netip.Addr) bool {
	if m.hub == nil {
		return true
	}
	addr = addr.Unmap()
	for _, p := range *m.hub.ports.Load() {
		for _, a := range p.addrs {
			if a == addr {
				return true
			}
		}
	}
	return false
}

// MTU returns the largest IP packet the link carries.
func (m *Mem) MTU() int { return m.mtu }

// MAC returns the port's hardware address.
func (m *Mem) MAC() [6]byte { return m.mac }

// Send delivers frames to their destinations. Frames longer than the MTU
// (plus an Ethernet header) or with no destination are dropped and counted;
// so are frames a full receive ring has no room for. Send returns
// len(frames) unless the link is closed.
func (m *Mem) Send(frames []Frame) (int, error) {
	if m.closed.Load() {
		return 0, ErrClosed
	}
	if m.peer != nil {
		m.deliver(m.peer, frames)
		return len(frames), nil
	}
	ports := *m.hub.ports.Load()
	// Hand over runs of frames with the same destination under one lock.
	for i := 0; i < len(frames); {
		dst, bcast := m.route(ports, frames[i].Data)
		j := i + 1
		for j < len(frames) {
			d, b := m.route(ports, frames[j].Data)
			if d != dst || b != bcast {
				break
			}
			j++
		}
		switch {
		case bcast:
			for _, p := range ports {
				if p != m {
					m.deliver(p, frames[i:j])
				}
			}
		case dst != nil:
			m.deliver(dst, frames[i:j])
		default:
			m.noRoute.Add(uint64(j - i))
		}
		i = j
	}
	return len(frames), nil
}

// route finds a frame's destination port, or reports a group destination.
func (m *Mem) route(ports []*Mem, b []byte) (*Mem, bool) {
	if len(b) < packet.EthernetLen {
		return nil, false
	}
	if b[0]&1 != 0 {
		return nil, true
	}
	var dmac [6]byte
	copy(dmac[:], b)
	if dmac != ([6]byte{}) {
		for _, p := range ports {
			if p.mac == dmac {
				return p, false
			}
		}
		return nil, false
	}
	dip, ok := dstIP(b)
	if !ok {
		return nil, false
	}
	for _, p := range ports {
		for _, a := range p.addrs {
			if a == dip {
				return p, false
			}
		}
	}
	return nil, false
}

// dstIP returns the destination address of an IPv4 or IPv6 frame.
func dstIP(b []byte) (netip.Addr, bool) {
	switch binary.BigEndian.Uint16(b[12:]) {
	case packet.EtherTypeIPv4:
		if len(b) >= packet.EthernetLen+packet.IPv4Len {
			return netip.AddrFrom4([4]byte(b[packet.EthernetLen+16:])), true
		}
	case packet.EtherTypeIPv6:
		if len(b) >= packet.EthernetLen+packet.IPv6Len {
			return netip.AddrFrom16([16]byte(b[packet.EthernetLen+24:])).Unmap(), true
		}
	}
	return netip.Addr{}, false
}

func (m *Mem) deliver(dst *Mem, frames []Frame) {
	n, over, closed := dst.q.put(frames, m.mtu)
	m.sent.Add(uint64(n))
	if over > 0 {
		m.oversize.Add(uint64(over))
	}
	if closed > 0 {
		m.toClosed.Add(uint64(closed))
	}
}

// l2HeaderLen is the Ethernet header length of a frame (with or without
// one VLAN tag).
func l2HeaderLen(b []byte) int {
	if len(b) >= packet.EthernetLen && binary.BigEndian.Uint16(b[12:]) == 0x8100 {
		return maxL2Header
	}
	return packet.EthernetLen
}

// Recv waits for frames. The frames' Data point into the link's ring and
// stay valid until the next Recv; Recv is meant for one goroutine.
func (m *Mem) Recv(frames []Frame) (int, error) { return m.q.get(frames) }

// Close closes the link: a blocked Recv returns ErrClosed, later Sends fail
// and frames sent to it are dropped and counted by their senders.
func (m *Mem) Close() error {
	if !m.q.close() {
		return ErrClosed
	}
	m.closed.Store(true)
	if m.hub != nil {
		m.hub.detach(m)
	}
	return nil
}

// MemStats are a Mem link's counts.
type MemStats struct {
	Sent      uint64 // frames put in a receiver's ring
	Received  uint64 // frames handed out by Recv
	QueueDrop uint64 // frames dropped because this link's ring was full
	Oversize  uint64 // frames dropped for exceeding the MTU
	NoRoute   uint64 // frames with no destination port
	ToClosed  uint64 // frames sent to a closed link
}

// Stats returns the link's counts.
func (m *Mem) Stats() MemStats {
	return MemStats{
		Sent: m.sent.Load(), Received: m.q.received.Load(), QueueDrop: m.q.dropped.Load(),
		Oversize: m.oversize.Load(), NoRoute: m.noRoute.Load(), ToClosed: m.toClosed.Load(),
	}
}

// AppendCounters implements Counting.
func (m *Mem) AppendCounters(dst []Counter) []Counter {
	s := m.Stats()
	return append(dst,
		Counter{"mem_sent", s.Sent}, Counter{"mem_received", s.Received},
		Counter{"mem_queue_drop", s.QueueDrop}, Counter{"mem_oversize", s.Oversize},
		Counter{"mem_no_route", s.NoRoute}, Counter{"mem_to_closed", s.ToClosed})
}

// ring is a bounded queue of preallocated frame buffers. Positions
// [head, head+lent) are the buffers the last get handed out, which stay
// untouched until the next get; [head+lent, head+lent+n) hold frames waiting.
type ring struct {
	mu      sync.Mutex
	cond    sync.Cond
	bufs    [][]byte
	lens    []int
	ipid    []bool
	head    int
	lent    int
	n       int
	waiting bool
	closed  bool

	received, dropped atomic.Uint64
}

func (r *ring) init(slots, size int) {
	r.cond.L = &r.mu
	backing := make([]byte, slots*size)
	r.bufs = make([][]byte, slots)
	for i := range r.bufs {
		r.bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
	}
	r.lens = make([]int, slots)
	r.ipid = make([]bool, slots)
}

// put copies frames into free buffers. It returns how many it queued and how
// many it refused for carrying an IP packet longer than mtu or because the
// ring is closed; the rest were dropped for lack of room.
func (r *ring) put(frames []Frame, mtu int) (queued, over, closed int) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, 0, len(frames)
	}
	size := len(r.bufs)
	dropped := 0
	for i := range frames {
		d := frames[i].Data
		if len(d)-l2HeaderLen(d) > mtu || len(d) > cap(r.bufs[0]) {
			over++
			continue
		}
		if r.lent+r.n == size {
			dropped++
			continue
		}
		k := r.head + r.lent + r.n
		if k >= size {
			k -= size
		}
		r.lens[k] = copy(r.bufs[k][:len(d)], d)
		r.ipid[k] = frames[i].IPIDUnknown
		r.n++
		queued++
	}
	wake := r.waiting && r.n > 0
	r.mu.Unlock()
	if dropped > 0 {
		r.dropped.Add(uint64(dropped))
	}
	if wake {
		r.cond.Signal()
	}
	return queued, over, 0
}

func (r *ring) get(frames []Frame) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := len(r.bufs)
	r.head += r.lent
	if r.head >= size {
		r.head -= size
	}
	r.lent = 0
	for r.n == 0 && !r.closed {
		r.waiting = true
		r.cond.Wait()
		r.waiting = false
	}
	if r.closed {
		return 0, ErrClosed
	}
	k := min(r.n, len(frames))
	for i := 0; i < k; i++ {
		j := r.head + i
		if j >= size {
			j -= size
		}
		frames[i] = Frame{Data: r.bufs[j][:r.lens[j]], IPIDUnknown: r.ipid[j]}
	}
	r.lent = k
	r.n -= k
	r.received.Add(uint64(k))
	return k, nil
}

// close marks the ring closed; it reports false if it already was.
func (r *ring) close() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	r.cond.Broadcast()
	return true
}
