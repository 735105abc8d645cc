package verbsapi

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/rxe/link"
)

// Link kinds a device can run on (LinkConfig.Kind).
const (
	// LinkUDP is a kernel UDP socket bound to the device's address and
	// port 4791 (or LinkConfig.Addr's port): no privileges needed.
	LinkUDP = "udp"
	// LinkTAP is a TAP interface the device owns a MAC and IP on; it needs
	// CAP_NET_ADMIN and /dev/net/tun.
	LinkTAP = "tap"
	// LinkMem is an in-process link: alone, a device that reaches only
	// itself (loopback); with NewDevicePair, two devices wired together.
	LinkMem = "mem"
)

// DefaultMTU is the link MTU (largest IP packet) when LinkConfig.MTU is 0:
// Ethernet's, which gives the 1024-byte active path MTU an rxe device on a
// standard NIC reports.
const DefaultMTU = 1500

// udpSocketBuffer is the SO_RCVBUF/SO_SNDBUF the udp link asks for. With the
// kernel's default the receive buffer overflows under a window of 64 KiB
// WRITEs (RcvbufErrors climbs) and RC stalls on retransmit timeouts.
const udpSocketBuffer = 4 << 20

// LinkConfig says what link a device runs on and how: what a command's
// --link, --addr, --pcap and --fault flags say.
type LinkConfig struct {
	Kind string // LinkUDP, LinkTAP or LinkMem
	// Addr is the device's IPv4 or IPv6 address; its port, for a udp link,
	// is the one to bind (0: 4791).
	Addr netip.AddrPort
	// Addr6 is, on a tap link, an IPv6 address besides the IPv4 Addr
	// (its GID follows the IPv4-mapped one). Other links have one address.
	Addr6    netip.Addr
	PeerPort uint16 // udp: the port datagrams go to (0: 4791)
	NoGSO    bool   // udp: no UDP segmentation offload
	GRO      bool   // udp: UDP receive offload (fewer system calls, more latency)
	// BusyPoll is, on a udp link, how long the receive loop keeps asking
	// the socket after a bulk batch before it waits (link.UDPOptions:
	// 0 the default, negative never).
	BusyPoll time.Duration
	Tap      string // tap: interface name ("": the kernel chooses)
	MTU      int    // largest IP packet (0: DefaultMTU)

	// Pcap, when set, is a pcapng file every frame in and out is written
	// to (sent frames before faults apply, so every "out" frame is intact).
	Pcap string
	// Fault is a fault spec in package fault's grammar ("loss=2%,seed=7")
	// applied to sent frames; FaultSeed seeds it when the spec names no
	// seed= (0: 1).
	Fault     string
	FaultSeed uint64
	// Seed seeds the device's memory keys (0: random).
	Seed uint64
	// Congestion, when set, is the devices' congestion control (ECN, CNPs,
	// DCQCN); nil leaves it off, as kernel rxe has none.
	Congestion *rxe.Congestion
	// FastRecovery recovers from loss sooner than kernel rxe does
	// (rxe.Config.FastRecovery): early retries, a second NAK.
	FastRecovery bool
}

// Device is a started softroce device with its link, made by NewDevice or
// NewDevicePair. Open contexts on it (Device.Open) to use verbs; Close shuts
// it down.
type Device struct {
	dev *rxe.Device
	// closers release, in reverse order, what building the device took:
	// the link's other end, the capture file, the device.
	closers closers

	mu   sync.Mutex
	done bool
	ctxs map[*Context]struct{}
}

// NewDevice builds the link cfg describes and starts a device called name
// on it (rxe_net_add and ibv_open_device's device in one). Close the Device
// when done.
func NewDevice(name string, cfg LinkConfig) (*Device, error) {
	var cl closers
	fail := func(err error) (*Device, error) {
		cl.run()
		return nil, fmt.Errorf("open %s on %s link: %w", name, orKind(cfg.Kind), err)
	}
	addr := cfg.Addr.Addr().Unmap()
	if !addr.IsValid() {
		return fail(errors.New("no device address: set LinkConfig.Addr (--addr)"))
	}
	if cfg.Addr6.IsValid() && cfg.Kind != LinkTAP {
		return fail(fmt.Errorf("IPv6 address %s besides %s is for the tap link (a %s link has one address)", cfg.Addr6, addr, orKind(cfg.Kind)))
	}
	mtu := cfg.mtu()
	var l link.Link
	switch cfg.Kind {
	case LinkMem, "":
		// A hub of one port: the device reaches itself (loopback between
		// its QPs) and nothing else, and knows it (Mem.Reaches).
		m := link.NewMemHub(link.MemOptions{MTU: mtu}).Attach([6]byte{2, 0, 0, 0, 0, 1}, addr)
		l = m
	case LinkUDP:
		u, err := link.ListenUDP(link.UDPOptions{Addr: netip.AddrPortFrom(addr, cfg.Addr.Port()), PeerPort: cfg.PeerPort,
			MTU: mtu, SocketBuffer: udpSocketBuffer, NoGSO: cfg.NoGSO, GRO: cfg.GRO, BusyPoll: cfg.BusyPoll})
		if err != nil {
			return fail(err)
		}
		l = u
	case LinkTAP:
		if !addr.Is4() {
			return fail(fmt.Errorf("address %s: a tap link needs an IPv4 address (an IPv6 one goes in Addr6, --addr6)", addr))
		}
		t, err := link.OpenTAP(link.TAPOptions{Name: cfg.Tap, IPv4: addr, IPv6: cfg.Addr6, MTU: mtu})
		if err != nil {
			return fail(err)
		}
		l = t
	default:
		return fail(fmt.Errorf("link kind %q: want %s, %s or %s", cfg.Kind, LinkUDP, LinkTAP, LinkMem))
	}
	l, closeMW, err := cfg.Middleware(l, name)
	if err != nil {
		return fail(err)
	}
	cl.add(closeMW)
	rc := rxe.Config{Name: name, Link: l, Seed: cfg.Seed, Congestion: cfg.Congestion, FastRecovery: cfg.FastRecovery}
	setAddr(&rc, addr)
	if cfg.Addr6.IsValid() {
		rc.IPv6 = cfg.Addr6
	}
	d, err := startDevice(rc, cl)
	if err != nil {
		return fail(err)
	}
	return d, nil
}

// NewDevicePair starts two devices in this process on the two ends of one
// mem link: a at cfg.Addr, b at the next address. Faults apply to both
// directions; the capture is taken at a (its "out" frames before faults,
// its "in" frames after the peer's), so each packet appears once. b's key
// seed is cfg.Seed+1 (random when cfg.Seed is 0).
func NewDevicePair(nameA, nameB string, cfg LinkConfig) (a, b *Device, err error) {
	if cfg.Kind != LinkMem && cfg.Kind != "" {
		return nil, nil, fmt.Errorf("open %s and %s: two devices in one process need a mem link, not %s", nameA, nameB, cfg.Kind)
	}
	addrA := cfg.Addr.Addr().Unmap()
	addrB := addrA.Next()
	if !addrA.IsValid() || !addrB.IsValid() {
		return nil, nil, fmt.Errorf("open %s and %s: address %s has no next address for the second device", nameA, nameB, addrA)
	}
	var cl closers
	fail := func(err error) (*Device, *Device, error) {
		cl.run()
		return nil, nil, fmt.Errorf("open %s and %s on a mem link: %w", nameA, nameB, err)
	}
	la, lb := link.NewMemPair(cfg.mtu())
	var linkA, linkB link.Link = la, lb
	if linkA, err = cfg.withFaults(linkA, nameA); err != nil {
		la.Close()
		lb.Close()
		return fail(err)
	}
	linkB, _ = cfg.withFaults(linkB, nameB) // the same spec parsed again
	if linkA, err = cfg.capture(linkA, &cl); err != nil {
		linkB.Close()
		return fail(err)
	}
	cfgA := rxe.Config{Name: nameA, Link: linkA, Seed: cfg.Seed, Congestion: cfg.Congestion, FastRecovery: cfg.FastRecovery}
	cfgB := rxe.Config{Name: nameB, Link: linkB, Congestion: cfg.Congestion, FastRecovery: cfg.FastRecovery}
	if cfg.Seed != 0 {
		cfgB.Seed = cfg.Seed + 1
	}
	setAddr(&cfgA, addrA)
	setAddr(&cfgB, addrB)
	if a, err = startDevice(cfgA, cl); err != nil {
		linkB.Close()
		return fail(err)
	}
	if b, err = startDevice(cfgB, nil); err != nil {
		a.Close()
		return nil, nil, fmt.Errorf("open %s and %s on a mem link: %w", nameA, nameB, err)
	}
	return a, b, nil
}

// Open opens a new verbs context on the device (ibv_open_device). Each
// context owns the objects it creates and receives the asynchronous events
// about them; Device.Close closes the contexts still open.
func (d *Device) Open() (*Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil, fmt.Errorf("open context on %s: %w", d.dev.Name(), ErrClosed)
	}
	c := OpenDevice(d.dev)
	c.onClose = d.forget
	d.ctxs[c] = struct{}{}
	return c, nil
}

func (d *Device) forget(c *Context) {
	d.mu.Lock()
	delete(d.ctxs, c)
	d.mu.Unlock()
}

// Name returns the device's name.
func (d *Device) Name() string { return d.dev.Name() }

// RXE returns the underlying device, for what verbs do not cover (the
// simulator, resource listings).
func (d *Device) RXE() *rxe.Device { return d.dev }

// Close closes the contexts still open (destroying what they hold), stops
// the device and releases its link and capture file. It returns the first
// error, a failed capture write included.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.done {
		d.mu.Unlock()
		return fmt.Errorf("close %s: %w", d.dev.Name(), ErrClosed)
	}
	d.done = true
	ctxs := keys(d.ctxs)
	d.mu.Unlock()
	var first error
	for _, c := range ctxs {
		if err := c.Close(); err != nil && !errors.Is(err, ErrClosed) && first == nil {
			first = err
		}
	}
	if err := d.closers.run(); err != nil && first == nil {
		first = err
	}
	return first
}

// startDevice creates and starts a device on rc.Link; cl (which may be
// nil) is what the Device must release after the device itself.
func startDevice(rc rxe.Config, cl closers) (*Device, error) {
	d, err := rxe.New(rc)
	if err != nil {
		rc.Link.Close()
		return nil, err
	}
	if err := d.Start(); err != nil {
		d.Close()
		return nil, err
	}
	cl.add(d.Close)
	return &Device{dev: d, closers: cl, ctxs: map[*Context]struct{}{}}, nil
}

func (cfg *LinkConfig) mtu() int {
	if cfg.MTU == 0 {
		return DefaultMTU
	}
	return cfg.MTU
}

func orKind(k string) string {
	if k == "" {
		return LinkMem
	}
	return k
}

func setAddr(rc *rxe.Config, addr netip.Addr) {
	if addr.Is4() {
		rc.IPv4 = addr
	} else {
		rc.IPv6 = addr
	}
}

// withFaults wraps l in the fault middleware when cfg.Fault asks for it;
// stream names the fault model's random stream (the device's name), so two
// devices with one spec draw independently.
func (cfg *LinkConfig) withFaults(l link.Link, stream string) (link.Link, error) {
	if strings.TrimSpace(cfg.Fault) == "" {
		return l, nil
	}
	spec, err := fault.Parse(cfg.Fault) // its errors say "fault spec"
	if err != nil {
		return l, err
	}
	if spec.IsZero() {
		return l, nil
	}
	seed := cfg.FaultSeed
	if seed == 0 {
		seed = 1
	}
	if spec.SeedSet {
		seed = spec.Seed
	}
	return link.Faulty(l, fault.New(spec, fault.Stream(seed, stream).Uint64())), nil
}

// Middleware wraps a bare link in the fault and capture middleware cfg
// asks for (Fault, Pcap; capture outermost), for programs that send frames
// without a device (softroce replay --to). stream names the fault model's
// random stream. The returned function closes the capture file; on error,
// l is closed.
func (cfg *LinkConfig) Middleware(l link.Link, stream string) (link.Link, func() error, error) {
	l, err := cfg.withFaults(l, stream)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	var cl closers
	if l, err = cfg.capture(l, &cl); err != nil {
		return nil, nil, err
	}
	return l, cl.run, nil
}

// capture wraps l in the capture middleware when cfg.Pcap is set, and adds
// closing the file (and reporting a failed write) to cl.
func (cfg *LinkConfig) capture(l link.Link, cl *closers) (link.Link, error) {
	if cfg.Pcap == "" {
		return l, nil
	}
	w, err := pcapio.Create(cfg.Pcap)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: %w", ErrCapture, err)
	}
	c := link.Capture(l, w, time.Now)
	path := cfg.Pcap
	cl.add(func() error {
		err := w.Close()
		if c.Err() != nil {
			return fmt.Errorf("capture to %s: %w", path, c.Err())
		}
		if err != nil {
			return fmt.Errorf("capture to %s: %w", path, err)
		}
		return nil
	})
	return c, nil
}

// ErrCapture wraps the failure to create LinkConfig.Pcap.
var ErrCapture = errors.New("capture file")

// closers runs cleanups in reverse order and keeps the first error.
type closers []func() error

func (c *closers) add(f func() error) { *c = append(*c, f) }

func (c closers) run() error {
	var first error
	for i := len(c) - 1; i >= 0; i-- {
		if err := c[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}
