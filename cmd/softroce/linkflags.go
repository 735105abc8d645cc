package main

// linkflags.go: the flags and constructor shared by every command that runs
// a softroce device (demo, devinfo, pingpong, perf).
//
//	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
//	    registers --link udp|tap|mem, --addr ADDR, --peer-port, --tap NAME, --addr6,
//	    --pcap FILE, --fault SPEC and --mtu, with the given defaults.
//	ctx, closeDev, err := openDevice(*lf, "rxe0")
//	    builds the link (link.ListenUDP, link.OpenTAP or one end of
//	    link.NewMemPair), wraps it in link.Faulty when --fault is set and in
//	    link.Capture when --pcap is set (capture outermost: sent frames are
//	    written before faults apply, so every captured "out" frame is intact),
//	    creates the rxe device on it, starts its runtime and opens a verbs
//	    context. closeDev closes the context, the device and its link, and
//	    the capture file, and reports the first error (a capture write error
//	    included).
//	a, b, closePair, err := openDevicePair(*lf, "rxe0", "rxe1")
//	    two devices in one process on the two ends of a mem link (--link mem
//	    only): a at --addr, b at the next address. Faults apply to both
//	    directions; --pcap captures at a (its "out" frames before faults, its
//	    "in" frames after the peer's), so each packet appears once.
//
// linkFlags.Seed (not a flag) seeds the devices' memory keys (0: random) and
// linkFlags.FaultSeed seeds the fault model when the spec names no seed=
// (0: 1); commands with a --seed flag set them.

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/verbsapi"
)

// linkFlags is what the link flags set.
type linkFlags struct {
	Link     string // "udp", "tap" or "mem"
	Addr     string // IPv4 or IPv6 address, optionally with a port (udp): 10.0.0.1, 127.0.0.2:4791, [::1]:4792
	PeerPort uint16 // udp: the port datagrams go to (0: 4791)
	NoGSO    bool   // udp: no segmentation offload (link.UDPOptions.NoGSO)
	GRO      bool   // udp: receive offload (link.UDPOptions.GRO)
	Tap      string // tap: interface name ("" lets the kernel choose)
	Addr6    string // tap: an IPv6 address besides the IPv4 --addr ("" none)
	Pcap     string // capture file to write ("" none)
	Fault    string // fault spec (fault.Parse grammar; "" none)
	MTU      int    // link MTU, largest IP packet (0: 1500)

	Seed      uint64 // device memory-key seed (0: random)
	FaultSeed uint64 // fault model seed when the spec has none (0: 1)
}

// defaultLinkMTU is the link MTU when --mtu is 0: Ethernet's, which gives
// the 1024-byte active MTU an rxe device on a standard NIC reports.
const defaultLinkMTU = 1500

// addLinkFlags registers the link flags on cmd with def as defaults and
// returns where they land.
func addLinkFlags(cmd *cobra.Command, def linkFlags) *linkFlags {
	lf := def
	fs := cmd.Flags()
	fs.StringVar(&lf.Link, "link", orDefault(def.Link, "mem"), "link to run the device on: udp (kernel UDP socket), tap (TAP interface, needs CAP_NET_ADMIN) or mem (in-process)")
	fs.StringVar(&lf.Addr, "addr", def.Addr, "device address: IPv4 or IPv6, with a port for udp (127.0.0.2, [::1]:4792)")
	fs.Uint16Var(&lf.PeerPort, "peer-port", def.PeerPort, "udp: UDP port to send to (0: 4791)")
	fs.BoolVar(&lf.NoGSO, "no-gso", def.NoGSO, "udp: send every datagram on its own (no UDP segmentation offload)")
	fs.BoolVar(&lf.GRO, "gro", def.GRO, "udp: receive with UDP GRO (fewer system calls for bulk traffic, more latency on a busy machine)")
	fs.StringVar(&lf.Tap, "tap", def.Tap, "tap: interface name (default: the kernel chooses)")
	fs.StringVar(&lf.Addr6, "addr6", def.Addr6, "tap: an IPv6 address as well as the IPv4 --addr (its GID follows the IPv4-mapped one)")
	fs.StringVar(&lf.Pcap, "pcap", def.Pcap, "write the device's frames to this pcapng file")
	fs.StringVar(&lf.Fault, "fault", def.Fault, `inject faults into sent frames, e.g. "loss=2%,reorder=1%" (keys: loss, dup, reorder, reorder_delay, corrupt, bits, delay, jitter, burst, seed)`)
	fs.IntVar(&lf.MTU, "mtu", def.MTU, "link MTU, the largest IP packet (0: 1500)")
	return &lf
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// parseAddr reads an address with an optional port.
func parseAddr(s string) (netip.AddrPort, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.AddrPort{}, errors.New("--addr is required")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 0), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("--addr %q: want an IPv4 or IPv6 address, optionally with :port", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// deviceAddrs puts addr in the IPv4 or IPv6 slot of a device config.
func deviceAddrs(cfg *rxe.Config, addr netip.Addr) {
	if addr.Is4() {
		cfg.IPv4 = addr
	} else {
		cfg.IPv6 = addr
	}
}

// tapIPv6 parses --addr6: an IPv6 address (not IPv4-mapped) that a tap link
// answers neighbour discovery for and the device puts in its GID table next
// to --addr's IPv4 one. Other links have one address, --addr's.
func (lf *linkFlags) tapIPv6() (netip.Addr, error) {
	if lf.Addr6 == "" {
		return netip.Addr{}, nil
	}
	if lf.Link != "tap" {
		return netip.Addr{}, fmt.Errorf("--addr6 is for the tap link (a %s link has one address: --addr)", lf.Link)
	}
	a, err := netip.ParseAddr(lf.Addr6)
	if err != nil || !a.Is6() || a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("--addr6 %q: want an IPv6 address", lf.Addr6)
	}
	return a, nil
}

// faultModel returns the model --fault asks for, or nil.
func (lf *linkFlags) faultModel(stream string) (*fault.Model, error) {
	if strings.TrimSpace(lf.Fault) == "" {
		return nil, nil
	}
	spec, err := fault.Parse(lf.Fault)
	if err != nil {
		return nil, fmt.Errorf("--fault: %w", err)
	}
	if spec.IsZero() {
		return nil, nil
	}
	seed := orDefault(lf.FaultSeed, 1)
	if spec.SeedSet {
		seed = spec.Seed
	}
	return fault.New(spec, fault.Stream(seed, stream).Uint64()), nil
}

// linkClosers runs cleanups in reverse order and keeps the first error.
type linkClosers []func() error

func (c *linkClosers) add(f func() error) { *c = append(*c, f) }

func (c linkClosers) run() error {
	var first error
	for i := len(c) - 1; i >= 0; i-- {
		if err := c[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// capture opens --pcap, if set, and returns the wrapper to apply to a link.
func (lf *linkFlags) capture(cl *linkClosers) (func(link.Link) link.Link, error) {
	if lf.Pcap == "" {
		return func(l link.Link) link.Link { return l }, nil
	}
	w, err := pcapio.Create(lf.Pcap)
	if err != nil {
		return nil, fmt.Errorf("--pcap: %w", err)
	}
	var c *link.Captured
	cl.add(func() error {
		err := w.Close()
		if c != nil && c.Err() != nil {
			return fmt.Errorf("capture to %s: %w", lf.Pcap, c.Err())
		}
		if err != nil {
			return fmt.Errorf("capture to %s: %w", lf.Pcap, err)
		}
		return nil
	})
	return func(l link.Link) link.Link {
		c = link.Capture(l, w, time.Now)
		return c
	}, nil
}

// withFaults wraps l in the fault middleware when --fault asks for it.
func (lf *linkFlags) withFaults(l link.Link, stream string) (link.Link, error) {
	m, err := lf.faultModel(stream)
	if err != nil || m == nil {
		return l, err
	}
	return link.Faulty(l, m), nil
}

// startDevice creates a device on l, starts it and opens a context.
func startDevice(cfg rxe.Config, cl *linkClosers) (*verbsapi.Context, error) {
	d, err := rxe.New(cfg)
	if err != nil {
		cfg.Link.Close()
		return nil, err
	}
	if err := d.Start(); err != nil {
		d.Close()
		return nil, err
	}
	cl.add(d.Close)
	ctx := verbsapi.OpenDevice(d)
	cl.add(ctx.Close)
	return ctx, nil
}

// openDevice builds the link the flags describe and a started device with
// a verbs context on it; see the top of this file.
func openDevice(lf linkFlags, name string) (*verbsapi.Context, func() error, error) {
	ap, err := parseAddr(lf.Addr)
	if err != nil {
		return nil, nil, err
	}
	addr := ap.Addr()
	addr6, err := lf.tapIPv6()
	if err != nil {
		return nil, nil, err
	}
	mtu := orDefault(lf.MTU, defaultLinkMTU)
	var cl linkClosers
	fail := func(err error) (*verbsapi.Context, func() error, error) {
		cl.run()
		return nil, nil, fmt.Errorf("open %s on %s link: %w", name, lf.Link, err)
	}
	var l link.Link
	switch lf.Link {
	case "mem":
		a, b := link.NewMemPair(mtu)
		cl.add(b.Close)
		l = a
	case "udp":
		u, err := link.ListenUDP(link.UDPOptions{Addr: ap, PeerPort: lf.PeerPort, MTU: mtu, SocketBuffer: udpSocketBuffer, NoGSO: lf.NoGSO, GRO: lf.GRO})
		if err != nil {
			return fail(err)
		}
		l = u
	case "tap":
		if !addr.Is4() {
			return fail(fmt.Errorf("--addr %s: a tap link needs an IPv4 address (an IPv6 one goes in --addr6)", addr))
		}
		t, err := link.OpenTAP(link.TAPOptions{Name: lf.Tap, IPv4: addr, IPv6: addr6, MTU: mtu})
		if err != nil {
			return fail(err)
		}
		l = t
	default:
		return fail(fmt.Errorf("--link %q: want udp, tap or mem", lf.Link))
	}
	if l, err = lf.withFaults(l, name); err != nil {
		l.Close()
		return fail(err)
	}
	wrap, err := lf.capture(&cl)
	if err != nil {
		l.Close()
		return fail(err)
	}
	cfg := rxe.Config{Name: name, Link: wrap(l), Seed: lf.Seed}
	deviceAddrs(&cfg, addr)
	if addr6.IsValid() {
		cfg.IPv6 = addr6
	}
	ctx, err := startDevice(cfg, &cl)
	if err != nil {
		return fail(err)
	}
	return ctx, cl.run, nil
}

// openDevicePair starts two devices on the ends of one mem link; see the
// top of this file.
func openDevicePair(lf linkFlags, nameA, nameB string) (a, b *verbsapi.Context, closeFn func() error, err error) {
	if lf.Link != "mem" {
		return nil, nil, nil, fmt.Errorf("--link %s: two devices in one process need --link mem", lf.Link)
	}
	ap, err := parseAddr(lf.Addr)
	if err != nil {
		return nil, nil, nil, err
	}
	addrA := ap.Addr()
	addrB := addrA.Next()
	if !addrB.IsValid() {
		return nil, nil, nil, fmt.Errorf("--addr %s: no next address for the second device", addrA)
	}
	var cl linkClosers
	fail := func(err error) (*verbsapi.Context, *verbsapi.Context, func() error, error) {
		cl.run()
		return nil, nil, nil, fmt.Errorf("open %s and %s on a mem link: %w", nameA, nameB, err)
	}
	la, lb := link.NewMemPair(orDefault(lf.MTU, defaultLinkMTU))
	var linkA, linkB link.Link = la, lb
	if linkA, err = lf.withFaults(linkA, nameA); err != nil {
		la.Close()
		lb.Close()
		return fail(err)
	}
	linkB, _ = lf.withFaults(linkB, nameB)
	wrap, err := lf.capture(&cl)
	if err != nil {
		linkA.Close()
		linkB.Close()
		return fail(err)
	}
	cfgA := rxe.Config{Name: nameA, Link: wrap(linkA), Seed: lf.Seed}
	cfgB := rxe.Config{Name: nameB, Link: linkB, Seed: lf.Seed + 1}
	if lf.Seed == 0 {
		cfgB.Seed = 0
	}
	deviceAddrs(&cfgA, addrA)
	deviceAddrs(&cfgB, addrB)
	if a, err = startDevice(cfgA, &cl); err != nil {
		linkB.Close()
		return fail(err)
	}
	if b, err = startDevice(cfgB, &cl); err != nil {
		return fail(err)
	}
	return a, b, cl.run, nil
}

// udpSocketBuffer is the SO_RCVBUF/SO_SNDBUF the udp link asks for. With the
// kernel's default the receive buffer overflows under a window of 64 KiB
// WRITEs (RcvbufErrors climbs) and RC stalls on retransmit timeouts.
const udpSocketBuffer = 4 << 20
