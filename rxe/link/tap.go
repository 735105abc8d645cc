//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/songgao/water"
	"golang.org/x/sys/unix"
)

// The TAP link makes a softroce device a host on a Linux TAP interface: the
// kernel sees a NIC whose wire is this process. The link owns a MAC and an
// IPv4 address (and optionally an IPv6 one), which are not the kernel's: it
// answers ARP requests and IPv6 neighbour solicitations for them, resolves
// its peers' MACs with ARP and neighbour solicitation (retrying, caching,
// queueing frames for an unresolved destination as Linux does), fills in
// the Ethernet addresses of the frames it sends (devices emit zero MACs),
// and hands Recv only RoCE v2 frames (UDP 4791) addressed to it.
// Everything else on the wire (other hosts' traffic, the kernel's own IPv6
// chatter, other protocols) is ignored and counted.
//
// A goroutine reads the TAP device (one read per frame: songgao/water has no
// vnet header, hence no offloads; this link is for compatibility with real
// hosts, not speed) into a ring like the Mem link's, from which Recv takes
// batches; a second goroutine retries neighbour resolution.

// TAPOptions configures a TAP link.
type TAPOptions struct {
	// Name is the interface name to create or attach to; "" lets the
	// kernel choose (tapN).
	Name string
	// MAC is the link's own hardware address; zero derives a locally
	// administered one from IPv4 (02:00 and the address).
	MAC [6]byte
	// IPv4 is the link's IPv4 address (required); IPv6 is optional.
	IPv4, IPv6 netip.Addr
	// MTU is the largest IP packet; 0 means 1500. The interface's MTU is
	// set to it.
	MTU int
	// ResolveTimeout is the wait between ARP/NS attempts (0: 50ms) and
	// ResolveTries the number of attempts (0: 6) before queued frames are
	// dropped. A lost reply must cost less than an RC QP's retry budget
	// (7 retries of 67 ms at perftest's timeout 14): with one attempt
	// every 200 ms, three replies lost in a row (netem's 10% loss on the
	// peer's sends) failed a QP with RETRY_EXC_ERR before its peer was
	// resolved.
	ResolveTimeout time.Duration
	ResolveTries   int
	// PendingBytes bounds the frames queued for each unresolved peer, in
	// bytes (0: 212,992, Linux's unres_qlen_bytes); more are dropped. It
	// was 8 frames, until a program's first burst (16 QPs each owing an
	// ACK, ibv_srq_pingpong) lost its last ACKs to it while the peer's MAC
	// was being asked for; the peer's retries then met a program that had
	// finished and gone, and never stopped.
	PendingBytes int
	// QueueLen is the receive ring size in frames (0: DefaultMemQueueLen).
	QueueLen int
}

// DefaultPendingBytes is TAPOptions.PendingBytes's default: Linux's
// net.ipv4.neigh.default.unres_qlen_bytes (SK_WMEM_MAX).
const DefaultPendingBytes = 212992

// TAP is a link over a TAP interface.
type TAP struct {
	ifc  *water.Interface
	name string
	mac  [6]byte
	ip4  netip.Addr
	ip6  netip.Addr
	mtu  int
	opts TAPOptions

	q ring

	mu       sync.Mutex
	neigh    map[netip.Addr]*neighbor
	closed   bool
	done     chan struct{}
	resolveC chan struct{} // a resolution started (resolveLoop)
	wg       sync.WaitGroup

	wmu  sync.Mutex // serialises writes and guards wbuf
	wbuf []byte

	stats tapCounters
}

type neighbor struct {
	mac      [6]byte
	resolved bool
	tries    int
	next     time.Time
	pending  [][]byte
	// pendingBytes is the length of pending's frames together.
	pendingBytes int
}

type tapCounters struct {
	txFrames, txOversize, txBadFrame, txResolveDrop, txQueueDrop, txErrors atomic.Uint64
	rxFrames, rxNotForUs, rxNotRoCE, rxOversize                            atomic.Uint64
	arpReplies, arpRequests, ndpAdverts, ndpSolicits                       atomic.Uint64
}

// OpenTAP creates (or attaches to) a TAP interface, brings it up and returns
// a link on it. It needs CAP_NET_ADMIN and /dev/net/tun.
func OpenTAP(o TAPOptions) (*TAP, error) {
	if !o.IPv4.Is4() {
		return nil, errors.New("tap link: an IPv4 address is required")
	}
	if o.IPv6.IsValid() && !o.IPv6.Is6() {
		return nil, fmt.Errorf("tap link: %v is not an IPv6 address", o.IPv6)
	}
	o = o.withDefaults()
	cfg := water.Config{DeviceType: water.TAP}
	cfg.Name = o.Name
	// water always sets or clears the persist flag; keep an existing
	// persistent TAP persistent instead of deleting it when we close.
	cfg.Persist = tapPersistent(o.Name)
	ifc, err := water.New(cfg)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("tap link needs CAP_NET_ADMIN and /dev/net/tun: %w", err)
		}
		return nil, fmt.Errorf("tap link: open %q: %w", o.Name, err)
	}
	name := ifc.Name()
	if err := setLinkUp(name, o.MTU); err != nil {
		ifc.Close()
		return nil, fmt.Errorf("tap link %s: %w", name, err)
	}
	t := newTAP(ifc, name, o)
	t.wg.Add(2)
	go t.readLoop()
	go t.resolveLoop()
	return t, nil
}

func (o TAPOptions) withDefaults() TAPOptions {
	if o.MAC == ([6]byte{}) {
		a := o.IPv4.As4()
		o.MAC = [6]byte{0x02, 0x00, a[0], a[1], a[2], a[3]}
	}
	if o.MTU <= 0 {
		o.MTU = 1500
	}
	if o.ResolveTimeout <= 0 {
		o.ResolveTimeout = 50 * time.Millisecond
	}
	if o.ResolveTries <= 0 {
		o.ResolveTries = 6
	}
	if o.PendingBytes <= 0 {
		o.PendingBytes = DefaultPendingBytes
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultMemQueueLen
	}
	return o
}

// newTAP returns a link on an open interface, without starting its
// goroutines.
func newTAP(ifc *water.Interface, name string, o TAPOptions) *TAP {
	t := &TAP{
		ifc: ifc, name: name, mac: o.MAC, ip4: o.IPv4, ip6: o.IPv6, mtu: o.MTU, opts: o,
		neigh: map[netip.Addr]*neighbor{}, done: make(chan struct{}), resolveC: make(chan struct{}, 1),
		wbuf: make([]byte, 0, o.MTU+maxL2Header),
	}
	t.q.init(o.QueueLen, o.MTU+maxL2Header)
	return t
}

// setLinkUp sets the interface's MTU and brings it up.
func setLinkUp(name string, mtu int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for ioctl: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("set MTU %d: %w", mtu, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set up: %w", err)
	}
	return nil
}

// Name returns the interface's name.
func (t *TAP) Name() string { return t.name }

// MTU returns the largest IP packet the link carries.
func (t *TAP) MTU() int { return t.mtu }

// MAC returns the link's own hardware address.
func (t *TAP) MAC() [6]byte { return t.mac }

// Recv returns RoCE frames addressed to the link; their data stays valid
// until the next Recv.
func (t *TAP) Recv(frames []Frame) (int, error) { return t.q.get(frames) }

// Close closes the interface (a non-persistent TAP interface disappears) and
// stops the link's goroutines.
func (t *TAP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.closed = true
	t.mu.Unlock()
	close(t.done)
	err := t.ifc.Close()
	t.q.close()
	t.wg.Wait()
	return err
}

// Send sends RoCE frames, filling in the Ethernet addresses. Frames to a
// peer whose MAC is not known yet wait (a few per peer) for resolution.
func (t *TAP) Send(frames []Frame) (int, error) {
	for i := range frames {
		if err := t.send1(frames[i].Data); err != nil {
			return i, err
		}
	}
	return len(frames), nil
}

func (t *TAP) send1(data []byte) error {
	var f packet.Frame
	if err := packet.ParseFrame(data, &f); err != nil {
		t.stats.txBadFrame.Add(1)
		return nil
	}
	if len(f.IP)+len(f.UDP)+len(f.Transport) > t.mtu {
		t.stats.txOversize.Add(1)
		return nil
	}
	dst := f.Addressing().Dst.Unmap()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	n := t.neigh[dst]
	if n != nil && n.resolved {
		mac := n.mac
		t.mu.Unlock()
		return t.writeFrame(data, mac)
	}
	if n == nil {
		n = &neighbor{}
		t.neigh[dst] = n
	}
	if n.pendingBytes+len(data) > t.opts.PendingBytes {
		t.mu.Unlock()
		t.stats.txQueueDrop.Add(1)
		return nil
	}
	n.pending = append(n.pending, append([]byte(nil), data...))
	n.pendingBytes += len(data)
	first := n.tries == 0
	if first {
		n.tries = 1
		n.next = time.Now().Add(t.opts.ResolveTimeout)
	}
	t.mu.Unlock()
	if first {
		t.solicit(dst)
		select { // wake resolveLoop to time the retries
		case t.resolveC <- struct{}{}:
		default:
		}
	}
	return nil
}

// writeFrame writes a copy of data with the given destination MAC and the
// link's MAC as source.
func (t *TAP) writeFrame(data []byte, dmac [6]byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	b := append(t.wbuf[:0], data...)
	copy(b[0:6], dmac[:])
	copy(b[6:12], t.mac[:])
	return t.write(b)
}

// write writes one frame; the caller holds wmu or owns b exclusively.
func (t *TAP) write(b []byte) error {
	if _, err := t.ifc.Write(b); err != nil {
		if errors.Is(err, fs.ErrClosed) {
			return ErrClosed
		}
		t.stats.txErrors.Add(1)
		return nil
	}
	t.stats.txFrames.Add(1)
	return nil
}

// readLoop reads frames from the interface, answers and learns from
// neighbour discovery, and queues RoCE frames for Recv.
func (t *TAP) readLoop() {
	defer t.wg.Done()
	buf := make([]byte, t.mtu+maxL2Header+1)
	for {
		n, err := t.ifc.Read(buf)
		if err != nil {
			if errors.Is(err, fs.ErrClosed) || errors.Is(err, io.EOF) {
				return
			}
			select {
			case <-t.done:
				return
			default:
			}
			continue
		}
		t.handleFrame(buf[:n])
	}
}

// handleFrame deals with one frame read from the interface.
func (t *TAP) handleFrame(b []byte) {
	if len(b) < packet.EthernetLen {
		t.stats.rxNotForUs.Add(1)
		return
	}
	if len(b) > t.mtu+maxL2Header {
		t.stats.rxOversize.Add(1)
		return
	}
	switch binary.BigEndian.Uint16(b[12:]) {
	case etherTypeARP:
		t.handleARP(b)
		return
	case packet.EtherTypeIPv6:
		if t.handleNDP(b) {
			return
		}
	}
	if [6]byte(b[0:6]) != t.mac {
		t.stats.rxNotForUs.Add(1)
		return
	}
	var f packet.Frame
	if packet.ParseFrame(b, &f) != nil {
		t.stats.rxNotRoCE.Add(1)
		return
	}
	if d := f.Addressing().Dst.Unmap(); d != t.ip4 && d != t.ip6 {
		t.stats.rxNotForUs.Add(1)
		return
	}
	one := [1]Frame{{Data: b}}
	if q, _, _ := t.q.put(one[:], t.mtu); q == 1 {
		t.stats.rxFrames.Add(1)
	}
}

// TAPStats are a TAP link's counts.
type TAPStats struct {
	TxFrames      uint64 // frames written, neighbour discovery included
	TxOversize    uint64 // frames larger than the MTU
	TxBadFrame    uint64 // frames that are not RoCE v2
	TxResolveDrop uint64 // frames dropped when resolution failed
	TxQueueDrop   uint64 // frames dropped for a full per-peer queue
	TxErrors      uint64 // writes the interface refused
	RxFrames      uint64 // RoCE frames queued for Recv
	RxNotForUs    uint64 // frames for other MACs or IPs
	RxNotRoCE     uint64 // frames to us that are not RoCE v2
	RxOversize    uint64 // frames larger than the MTU
	ARPRequests   uint64 // ARP requests sent
	ARPReplies    uint64 // ARP replies sent
	NDPSolicits   uint64 // neighbour solicitations sent
	NDPAdverts    uint64 // neighbour advertisements sent
	RxQueueDrop   uint64 // RoCE frames dropped by a full receive ring
}

// Stats returns the link's counts.
func (t *TAP) Stats() TAPStats {
	s := &t.stats
	return TAPStats{
		TxFrames: s.txFrames.Load(), TxOversize: s.txOversize.Load(), TxBadFrame: s.txBadFrame.Load(),
		TxResolveDrop: s.txResolveDrop.Load(), TxQueueDrop: s.txQueueDrop.Load(), TxErrors: s.txErrors.Load(),
		RxFrames: s.rxFrames.Load(), RxNotForUs: s.rxNotForUs.Load(), RxNotRoCE: s.rxNotRoCE.Load(),
		RxOversize: s.rxOversize.Load(), ARPRequests: s.arpRequests.Load(), ARPReplies: s.arpReplies.Load(),
		NDPSolicits: s.ndpSolicits.Load(), NDPAdverts: s.ndpAdverts.Load(), RxQueueDrop: t.q.dropped.Load(),
	}
}

// AppendCounters implements Counting.
func (t *TAP) AppendCounters(dst []Counter) []Counter {
	s := t.Stats()
	return append(dst,
		Counter{"tap_tx_frames", s.TxFrames}, Counter{"tap_tx_oversize", s.TxOversize},
		Counter{"tap_tx_bad_frame", s.TxBadFrame}, Counter{"tap_tx_resolve_drop", s.TxResolveDrop},
		Counter{"tap_tx_queue_drop", s.TxQueueDrop}, Counter{"tap_tx_errors", s.TxErrors},
		Counter{"tap_rx_frames", s.RxFrames}, Counter{"tap_rx_not_for_us", s.RxNotForUs},
		Counter{"tap_rx_not_roce", s.RxNotRoCE}, Counter{"tap_rx_oversize", s.RxOversize},
		Counter{"tap_rx_queue_drop", s.RxQueueDrop},
		Counter{"tap_arp_requests", s.ARPRequests}, Counter{"tap_arp_replies", s.ARPReplies},
		Counter{"tap_ndp_solicits", s.NDPSolicits}, Counter{"tap_ndp_adverts", s.NDPAdverts})
}

// tapPersistent reports whether the TAP interface name exists with the
// kernel's IFF_PERSIST flag (0x0800) set.
func tapPersistent(name string) bool {
	if name == "" {
		return false
	}
	b, err := os.ReadFile("/sys/class/net/" + name + "/tun_flags")
	if err != nil {
		return false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
	return err == nil && v&0x0800 != 0
}
