package rxe

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// Config describes a device.
type Config struct {
	// Name is the device name, such as "rxe0".
	Name string
	// Link carries the device's frames. It may be nil when the caller (the
	// simulator) drives the core and moves frames itself; Start needs it.
	Link link.Link
	// IPv4 and IPv6 are the device's addresses; at least one is required.
	// They become GIDs 1 and 2 (GID 0 is the link-local default GID).
	IPv4, IPv6 netip.Addr
	// MAC is the Ethernet address; zero means Link.MAC().
	MAC [6]byte
	// MTU is the link MTU (largest IP packet); zero means Link.MTU(), or
	// 1500 without a link. The port's active MTU is derived from it.
	MTU int
	// Seed seeds the generator of memory-key bytes, for reproducible runs
	// (the simulator). Zero seeds it from crypto/rand, so keys cannot be
	// guessed.
	Seed uint64
	// FixedSrcPort, when non-zero, is the UDP source port every packet
	// carries, whatever the QP: a link that sends through a kernel UDP socket
	// bound to a port can send from that port only, and the ICRC covers it.
	// Zero means what link.FixedSourcePort reports for Link, if anything.
	// Such a link also lets the kernel write the IPv4 ID, which is 0 with
	// path-MTU discovery on, so the device then writes 0 too.
	FixedSrcPort uint16
	// Congestion is the device's congestion control; nil means
	// DefaultCongestion (all off). SetCongestion changes it later.
	Congestion *Congestion
	// FastRecovery gives RC QPs qp.Config.FastRecovery: early retries
	// after a loss and a second NAK for a resend lost again. Off (the
	// default), they retransmit and NAK exactly when kernel rxe's would,
	// on a PSN sequence NAK or the local ACK timeout; replay relies on it.
	FastRecovery bool
	// RNRRetryRate bounds the RNR retries the device starts, all QPs
	// together, per second: a QP whose RNR timer has run out waits for
	// the next slot (the timer is a minimum wait; kernel rxe's, in
	// jiffies, is at least 4 ms at HZ=250). Thousands of QPs whose peers
	// never post a receive (rnr_retry 7 retries for ever) would otherwise
	// retry every 10 us each and take the device's CPU from the QPs making
	// progress. 0: DefaultRNRRetryRate once Start runs the device on the
	// real clock, no bound on virtual time (the simulator's timers are
	// exact and cost no CPU); negative: no bound.
	RNRRetryRate int
	// SingleThreaded promises that the device's methods are called one at
	// a time, each call ordered after the last (the simulator's event
	// loop is the only caller of its devices): the device then takes no
	// lock. An uncontended mutex still costs an atomic operation per Lock
	// and per Unlock, several per frame: 8% of a simulation on one core.
	// Start refuses such a device, as its runtime has goroutines of its
	// own.
	SingleThreaded bool
	// QPSpares, when set, are QPs of discarded devices (Discard) that
	// CreateQP builds new QPs in instead of allocating (qp.Spares).
	QPSpares *qp.Spares
}

// DefaultRNRRetryRate is RNR retries per second a device running on the
// real clock starts, all QPs together (Config.RNRRetryRate): one every
// 50 us after a burst of 16. A QP alone is held only when it retries more
// often than that (a 10 us RNR timer on a busy device); a crowd of QPs
// shares the slots.
const DefaultRNRRetryRate = 20000

// Errors the device returns, wrapped with context.
var (
	ErrBusy         = errors.New("resource still in use")
	ErrDestroyed    = errors.New("resource already destroyed")
	ErrWrongDevice  = errors.New("resource belongs to another device")
	ErrInvalid      = errors.New("invalid argument")
	ErrLimit        = errors.New("device limit reached")
	ErrClosed       = errors.New("device closed")
	ErrNoLink       = errors.New("device has no link")
	ErrAlreadyStart = errors.New("device already started")
)

// Device is a software RNIC: see the package documentation.
type Device struct {
	name         string
	link         link.Link
	mac          [6]byte
	mtu          int
	fixedSport   uint16
	fastRecovery bool         // Config.FastRecovery
	qpSpares     *qp.Spares   // Config.QPSpares
	gids         []netip.Addr // 16-byte form, table order
	gidIPs       []netip.Addr // the same, unmapped: what IP headers carry
	attr         DeviceAttr
	port         PortAttr

	mu     devMutex
	keys   *rand.ChaCha8
	cnt    Counters
	qpCnt  qp.Counters                     // shared by all QPs
	events atomic.Pointer[chan AsyncEvent] // made on first use (events.go)

	handles uint32 // last object handle given out
	pds     int
	cqs     int
	srqs    int
	ahs     int
	mrs     []mrSlot // by index
	mrNext  uint32
	mrCount int
	mws     []mwSlot // by index - minMWIndex
	mwNext  uint32
	mwCount int
	qps     qpTable
	qpList  []*QP // live QPs, for Tick and Deadline
	qpNext  uint32

	// QPs that may have output, round-robin order: those making
	// progress, and those retrying, which Output serves at a bounded
	// share (xmit.go).
	ready, retrying qpRing
	turn            int // Output's QP turns, for the retrying share

	// timers holds the live QPs that have a deadline (deadlines.go); due
	// is Tick's scratch.
	timers deadlineHeap
	due    []*QP
	// RNR retry slots (Config.RNRRetryRate): one every rnrInterval, the
	// next free at rnrNext; 0: no bound.
	rnrInterval qp.Time
	rnrNext     qp.Time
	rnrRateSet  bool // Config.RNRRetryRate was given (not 0)

	// Receive and transmit scratch, under mu.
	rxFrame packet.Frame
	rxIn    qp.Incoming
	rxIPHdr [packet.IPv4Len]byte // IPv4 header with a recovered ID
	txOut   qp.Outgoing
	txAddr  packet.Addressing
	txEth   packet.Ethernet
	loopBuf []byte // made at the first loopback: most devices never use it
	ipid    uint16

	gsi gsi // QP 1 and the connection manager

	cc Congestion // congestion control; QPs hold &cc.Engine

	rt atomic.Pointer[runtime] // set while the runtime runs
}

// Default values.
const (
	defaultMTU      = 1500
	defaultHopLimit = 64
	eventQueueLen   = 1024
)

// New creates a device.
func New(cfg Config) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = "rxe0"
	}
	if !cfg.IPv4.IsValid() && !cfg.IPv6.IsValid() {
		return nil, fmt.Errorf("new device %s: an IPv4 or IPv6 address is required: %w", cfg.Name, ErrInvalid)
	}
	if cfg.IPv4.IsValid() && !cfg.IPv4.Unmap().Is4() {
		return nil, fmt.Errorf("new device %s: IPv4 address %s is not IPv4: %w", cfg.Name, cfg.IPv4, ErrInvalid)
	}
	if cfg.IPv6.IsValid() && (!cfg.IPv6.Is6() || cfg.IPv6.Is4In6()) {
		return nil, fmt.Errorf("new device %s: IPv6 address %s is not IPv6: %w", cfg.Name, cfg.IPv6, ErrInvalid)
	}
	if cfg.Link != nil {
		if cfg.MAC == ([6]byte{}) {
			cfg.MAC = cfg.Link.MAC()
		}
		if cfg.MTU == 0 {
			cfg.MTU = cfg.Link.MTU()
		}
		if cfg.FixedSrcPort == 0 {
			if p, ok := link.FixedSourcePort(cfg.Link); ok {
				cfg.FixedSrcPort = p
			}
		}
	}
	if cfg.MTU == 0 {
		cfg.MTU = defaultMTU
	}
	if cfg.MTU < 256+80 {
		return nil, fmt.Errorf("new device %s: MTU %d below the 336 bytes a 256-byte IB MTU needs: %w", cfg.Name, cfg.MTU, ErrInvalid)
	}
	seed := cfg.Seed
	var key [32]byte
	if seed == 0 {
		if _, err := crand.Read(key[:]); err != nil {
			return nil, fmt.Errorf("new device %s: seed keys: %w", cfg.Name, err)
		}
	} else {
		binary.LittleEndian.PutUint64(key[:], seed)
		binary.LittleEndian.PutUint64(key[8:], seed^0x736f6674726f6365)
	}
	d := &Device{
		name:         cfg.Name,
		link:         cfg.Link,
		mac:          cfg.MAC,
		mtu:          cfg.MTU,
		fixedSport:   cfg.FixedSrcPort,
		fastRecovery: cfg.FastRecovery,
		qpSpares:     cfg.QPSpares,
		rnrInterval:  rnrInterval(cfg.RNRRetryRate),
		rnrRateSet:   cfg.RNRRetryRate != 0,
		keys:         rand.NewChaCha8(key),
		mrs:          make([]mrSlot, 1, 64), // index 0 is never used
		mrNext:       1,
		qpNext:       firstQPN,
	}
	d.mu.off = cfg.SingleThreaded
	d.cc = DefaultCongestion()
	if cfg.Congestion != nil {
		if err := d.SetCongestion(*cfg.Congestion); err != nil {
			return nil, fmt.Errorf("new device: %w", err)
		}
	}
	d.gids = buildGIDs(cfg.MAC, cfg.IPv4.Unmap(), cfg.IPv6)
	for _, g := range d.gids {
		d.gidIPs = append(d.gidIPs, g.Unmap())
	}
	d.buildAttrs()
	d.txEth.Src = cfg.MAC
	// The CM's comm IDs go on the wire: seeded apart from the keys.
	gsiSeed := seed ^ 0x676369 // "gsi"
	if seed == 0 {
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("new device %s: seed CM: %w", cfg.Name, err)
		}
		gsiSeed = binary.LittleEndian.Uint64(b[:])
	}
	d.initGSI(gsiSeed)
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// MAC returns the device's Ethernet address.
func (d *Device) MAC() [6]byte { return d.mac }

// Link returns the device's link (nil when the caller moves frames).
func (d *Device) Link() link.Link { return d.link }

// nextHandle returns a fresh object handle (for the verbs layer's tables).
func (d *Device) nextHandle() uint32 {
	d.handles++
	return d.handles
}

// sendPosted tells the runtime, if any, that a post made output ready,
// and sends it from the posting goroutine itself when no other goroutine
// is sending, as rxe runs its requester task in post_send's context: one
// goroutine wake-up fewer between a post and its frame on the wire. Call
// it without holding mu.
func (d *Device) sendPosted() {
	if r := d.rt.Load(); r != nil {
		r.sendCaused()
	}
}

// notify tells the runtime, if any, that output or deadlines may have
// changed. Call it without holding mu.
func (d *Device) notify() {
	if r := d.rt.Load(); r != nil {
		r.kick()
	}
}
