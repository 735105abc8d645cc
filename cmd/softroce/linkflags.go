package main

// linkflags.go: the link flags shared by every command that runs a softroce
// device (demo, devinfo, pingpong, perf, daemon, run, replay --to), turned
// into a verbsapi.LinkConfig.
//
//	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
//	    registers --link udp|tap|mem, --addr ADDR, --peer-port, --tap NAME, --addr6,
//	    --pcap FILE, --fault SPEC, --mtu, --no-gso, --gro, --busy-poll, --dcqcn, --cc KEY=VALUE
//	    and --fast-recovery
//	    with the given defaults.
//	ctx, closeDev, err := openDevice(*lf, "rxe0")
//	    verbsapi.NewDevice plus a context on it; closeDev closes both and
//	    reports the first error (a failed capture write included).
//	a, b, closePair, err := openDevicePair(*lf, "rxe0", "rxe1")
//	    verbsapi.NewDevicePair (--link mem only), a context on each.
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
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/verbsapi"
)

// linkFlags is what the link flags set.
type linkFlags struct {
	Link         string        // "udp", "tap" or "mem"
	Addr         string        // IPv4 or IPv6 address, optionally with a port (udp): 10.0.0.1, 127.0.0.2:4791, [::1]:4792
	PeerPort     uint16        // udp: the port datagrams go to (0: 4791)
	NoGSO        bool          // udp: no segmentation offload (link.UDPOptions.NoGSO)
	GRO          bool          // udp: receive offload (link.UDPOptions.GRO)
	BusyPoll     time.Duration // udp: busy polling after bulk batches (0: off)
	Tap          string        // tap: interface name ("" lets the kernel choose)
	Addr6        string        // tap: an IPv6 address besides the IPv4 --addr ("" none)
	Pcap         string        // capture file to write ("" none)
	Fault        string        // fault spec (fault.Parse grammar; "" none)
	MTU          int           // link MTU, largest IP packet (0: 1500)
	DCQCN        bool          // congestion control on: ECN, CNPs, DCQCN
	CC           []string      // congestion settings, mlx5 names: rp_ai_rate=20
	FastRecovery bool          // recover from loss sooner than kernel rxe does

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
	fs.BoolVar(&lf.GRO, "gro", def.GRO, "udp: keep UDP GRO on for good (without it the link turns GRO on for bulk traffic and off for ping-pong)")
	fs.DurationVar(&lf.BusyPoll, "busy-poll", orDefault(def.BusyPoll, link.DefaultBusyPoll), "udp: after a batch of bulk traffic, keep asking the socket for the next one this long before waiting (0: never; ping-pong never polls)")
	fs.StringVar(&lf.Tap, "tap", def.Tap, "tap: interface name (default: the kernel chooses)")
	fs.StringVar(&lf.Addr6, "addr6", def.Addr6, "tap: an IPv6 address as well as the IPv4 --addr (its GID follows the IPv4-mapped one)")
	fs.StringVar(&lf.Pcap, "pcap", def.Pcap, "write the device's frames to this pcapng file")
	fs.StringVar(&lf.Fault, "fault", def.Fault, `inject faults into sent frames, e.g. "loss=2%,reorder=1%" (keys: loss, dup, reorder, reorder_delay, corrupt, bits, delay, jitter, burst, seed)`)
	fs.IntVar(&lf.MTU, "mtu", def.MTU, "link MTU, the largest IP packet (0: 1500)")
	fs.BoolVar(&lf.DCQCN, "dcqcn", def.DCQCN, "congestion control: send ECN-capable packets, answer CE marks with CNPs, cut QP rates on CNPs (DCQCN, ConnectX's defaults)")
	fs.BoolVar(&lf.FastRecovery, "fast-recovery", def.FastRecovery, "recover from loss sooner than kernel rxe: after a loss, go back N when an answer is a few measured round trips late, and NAK a gap again when a resend is lost too (default: resend on a PSN sequence NAK, a gap in READ responses or the local ACK timeout)")
	fs.StringArrayVar(&lf.CC, "cc", def.CC, "congestion control setting `NAME=VALUE` under mlx5's names, repeatable (softroce devinfo lists them): roce_np=1, rp_ai_rate=20, np_min_time_between_cnps=50")
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

// config turns the flags into a link config, checking them as flags (the
// errors name the flag).
func (lf *linkFlags) config() (verbsapi.LinkConfig, error) {
	ap, err := parseAddr(lf.Addr)
	if err != nil {
		return verbsapi.LinkConfig{}, err
	}
	addr6, err := lf.tapIPv6()
	if err != nil {
		return verbsapi.LinkConfig{}, err
	}
	switch lf.Link {
	case verbsapi.LinkUDP, verbsapi.LinkMem:
	case verbsapi.LinkTAP:
		if !ap.Addr().Is4() {
			return verbsapi.LinkConfig{}, fmt.Errorf("--addr %s: a tap link needs an IPv4 address (an IPv6 one goes in --addr6)", ap.Addr())
		}
	default:
		return verbsapi.LinkConfig{}, fmt.Errorf("--link %q: want udp, tap or mem", lf.Link)
	}
	if _, err := fault.Parse(lf.Fault); strings.TrimSpace(lf.Fault) != "" && err != nil {
		return verbsapi.LinkConfig{}, fmt.Errorf("--fault: %w", err)
	}
	cc, err := lf.congestion()
	if err != nil {
		return verbsapi.LinkConfig{}, err
	}
	busyPoll := lf.BusyPoll
	if busyPoll <= 0 {
		busyPoll = -1 // the flag's 0 is "never"; the link's is its default
	}
	return verbsapi.LinkConfig{Kind: lf.Link, Addr: ap, Addr6: addr6, PeerPort: lf.PeerPort, NoGSO: lf.NoGSO,
		GRO: lf.GRO, BusyPoll: busyPoll, Tap: lf.Tap, MTU: lf.MTU, Pcap: lf.Pcap, Fault: lf.Fault, FaultSeed: lf.FaultSeed,
		Seed: lf.Seed, Congestion: cc, FastRecovery: lf.FastRecovery}, nil
}

// realPaceBurst is how far a paced QP may run ahead of its slot on a real
// link: timers on this machine class wake about a millisecond late (a 50 us
// timer takes 1.1 ms), so exact per-packet slots would hold the rate far
// below the one set (BenchmarkPacedWrite).
const realPaceBurst = qp.Millisecond

// congestion turns --dcqcn and --cc into the device's settings; nil when
// neither is given.
func (lf *linkFlags) congestion() (*rxe.Congestion, error) {
	if !lf.DCQCN && len(lf.CC) == 0 {
		return nil, nil
	}
	c := rxe.DefaultCongestion()
	c.Engine.Burst = realPaceBurst
	if lf.DCQCN {
		c.Enable()
	}
	for _, kv := range lf.CC {
		if err := c.Set(kv); err != nil {
			return nil, fmt.Errorf("--cc: %w", err)
		}
	}
	return &c, nil
}

// openDevice starts the device the flags describe and opens a context on
// it; see the top of this file.
func openDevice(lf linkFlags, name string) (*verbsapi.Context, func() error, error) {
	cfg, err := lf.config()
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	d, err := verbsapi.NewDevice(name, cfg)
	if err != nil {
		return nil, nil, flagError(err, cfg)
	}
	ctx, err := d.Open()
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return ctx, d.Close, nil
}

// openDevicePair starts two devices on the ends of one mem link; see the
// top of this file.
func openDevicePair(lf linkFlags, nameA, nameB string) (a, b *verbsapi.Context, closeFn func() error, err error) {
	if lf.Link != verbsapi.LinkMem {
		return nil, nil, nil, fmt.Errorf("--link %s: two devices in one process need --link mem", lf.Link)
	}
	cfg, err := lf.config()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s and %s: %w", nameA, nameB, err)
	}
	da, db, err := verbsapi.NewDevicePair(nameA, nameB, cfg)
	if err != nil {
		return nil, nil, nil, flagError(err, cfg)
	}
	closeFn = func() error {
		errB := db.Close()
		if errA := da.Close(); errA != nil {
			return errA
		}
		return errB
	}
	if a, err = da.Open(); err == nil {
		b, err = db.Open()
	}
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return a, b, closeFn, nil
}

// flagError names the flag behind a device error a user can fix with one:
// the capture file (--pcap) is the one the device cannot check in advance.
func flagError(err error, cfg verbsapi.LinkConfig) error {
	if errors.Is(err, verbsapi.ErrCapture) {
		return fmt.Errorf("--pcap %s: %w", cfg.Pcap, err)
	}
	return err
}
