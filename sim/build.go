package sim

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/sim/netsim"
)

// Defaults of a link direction.
const (
	defaultBandwidth = 10_000_000_000 // 10 Gb/s
	defaultDelay     = netsim.Microsecond
	defaultMTU       = 1500
	defaultDuration  = netsim.Second
)

// hostInfo is a host's resolved identity.
type hostInfo struct {
	Index int
	Name  string
	IP    netip.Addr
	MAC   [6]byte
	MTU   int
}

// deviceFactory makes the device a host runs.
type deviceFactory func(h hostInfo, seed uint64) (Device, error)

// world is a built simulation: the network, its hosts and the fault schedule.
type world struct {
	sc     *Scenario
	seed   uint64
	loop   *netsim.Loop
	net    *netsim.Network
	hosts  []*host
	infos  []hostInfo
	byName map[string]netsim.NodeID
	hostOf map[string]*host
	sws    []*netsim.Switch
	swPFC  []*PFCSpec // by switch, as sws
	pfc    bool       // some switch has PFC
	rec    *recorder
	// lastHeal is the time the last fault or partition ends (0 if none).
	lastHeal netsim.Time
	// A Parallel scenario's switches run in a shard of their own
	// (parallel.go), on swLoop, with their own recorder; loop runs the
	// hosts.
	swLoop  *netsim.Loop
	swShard int
	swRec   *recorder
}

// resolveHosts lists the scenario's hosts with their addresses.
func resolveHosts(sc *Scenario) ([]hostInfo, error) {
	var out []hostInfo
	seen := map[string]bool{}
	add := func(hs HostSpec) error {
		i := len(out)
		if hs.Name == "" {
			return fmt.Errorf("host %d has no name", i)
		}
		if seen[hs.Name] {
			return fmt.Errorf("host %s defined twice", hs.Name)
		}
		seen[hs.Name] = true
		h := hostInfo{Index: i, Name: hs.Name, MTU: hs.MTU}
		if h.MTU == 0 {
			h.MTU = sc.MTU
		}
		if h.MTU == 0 {
			h.MTU = defaultMTU
		}
		if hs.IP != "" {
			ip, err := netip.ParseAddr(hs.IP)
			if err != nil {
				return fmt.Errorf("host %s: %w", hs.Name, err)
			}
			h.IP = ip.Unmap()
		} else {
			h.IP = netip.AddrFrom4([4]byte{10, 0, byte((i + 1) >> 8), byte(i + 1)})
		}
		h.MAC = [6]byte{0x02, 0, 0, 0, byte((i + 1) >> 8), byte(i + 1)}
		if hs.MAC != "" {
			var m [6]byte
			if _, err := fmt.Sscanf(hs.MAC, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]); err != nil {
				return fmt.Errorf("host %s: bad MAC %q", hs.Name, hs.MAC)
			}
			h.MAC = m
		}
		out = append(out, h)
		return nil
	}
	for _, hs := range sc.Hosts {
		if err := add(hs); err != nil {
			return nil, err
		}
	}
	for i := 0; i < sc.HostCount; i++ {
		if err := add(HostSpec{Name: fmt.Sprintf("h%d", i)}); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("scenario %s has no hosts", sc.Name)
	}
	return out, nil
}

func pipeConfig(ps PipeSpec) netsim.PipeConfig {
	c := netsim.PipeConfig{
		Bandwidth:   int64(ps.Bandwidth),
		Delay:       netsim.Time(ps.Delay),
		QueueBytes:  int(ps.Queue),
		QueueFrames: ps.QueueFrames,
	}
	if c.Bandwidth == 0 {
		c.Bandwidth = defaultBandwidth
	}
	if c.Delay == 0 {
		c.Delay = defaultDelay
	}
	return c
}

// build creates the network, hosts and switches, and schedules faults.
func build(sc *Scenario, seed uint64, newDev deviceFactory, rec func(*netsim.Loop) *recorder) (*world, error) {
	sc, err := sc.withTopology()
	if err != nil {
		return nil, err
	}
	infos, err := resolveHosts(sc)
	if err != nil {
		return nil, err
	}
	loop := netsim.NewLoop()
	w := &world{
		sc: sc, seed: seed, loop: loop, net: netsim.NewNetwork(loop), infos: infos,
		byName: map[string]netsim.NodeID{}, hostOf: map[string]*host{},
	}
	w.rec = rec(loop)
	w.net.Trace = w.rec.network
	if sc.Parallel {
		if err := parallelOK(sc); err != nil {
			return nil, err
		}
		w.swLoop = netsim.NewLoop()
		w.swShard = w.net.AddShard(w.swLoop)
		w.swRec = w.rec.shard(w.swLoop)
		w.net.SetShardTrace(w.swShard, w.swRec.network)
	}
	for _, hi := range infos {
		dev, err := newDev(hi, fault.Stream(seed, "device/"+hi.Name).Uint64())
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", hi.Name, err)
		}
		h := newHost(hi.Index, hi.Name, loop, dev)
		h.addr = netsim.Addr{MAC: hi.MAC, IP: hi.IP}
		h.id = w.net.AddNode(hi.Name, h)
		w.hosts = append(w.hosts, h)
		w.byName[hi.Name] = h.id
		w.hostOf[hi.Name] = h
	}
	addSwitch := func(ss SwitchSpec) error {
		if ss.Name == "" {
			return fmt.Errorf("a switch has no name")
		}
		if _, dup := w.byName[ss.Name]; dup {
			return fmt.Errorf("node %s defined twice", ss.Name)
		}
		sw := w.net.AddSwitch(ss.Name, netsim.Time(ss.Latency))
		if w.swLoop != nil {
			if err := w.net.SetShard(sw.ID(), w.swShard); err != nil {
				return err
			}
		}
		w.sws = append(w.sws, sw)
		w.swPFC = append(w.swPFC, ss.PFC)
		w.byName[ss.Name] = sw.ID()
		return nil
	}
	for _, ss := range sc.Switches {
		if err := addSwitch(ss); err != nil {
			return nil, err
		}
	}
	var static []staticFault
	var marks []staticRED
	connect := func(a, b string, ab, ba PipeSpec, fab, fba string) error {
		ia, ok := w.byName[a]
		if !ok {
			return fmt.Errorf("link %s-%s: no node %s", a, b, a)
		}
		ib, ok := w.byName[b]
		if !ok {
			return fmt.Errorf("link %s-%s: no node %s", a, b, b)
		}
		pab, pba := w.net.Connect(ia, ib, pipeConfig(ab), pipeConfig(ba))
		static = append(static, staticFault{pab, fab}, staticFault{pba, fba})
		marks = append(marks, staticRED{pab, ab.ECN.red()}, staticRED{pba, ba.ECN.red()})
		return nil
	}
	for _, ls := range sc.Links {
		ba := ls.PipeSpec
		if ls.BA != nil {
			ba = *ls.BA
		}
		fba := ls.Fault
		if ls.FaultBA != nil {
			fba = *ls.FaultBA
		}
		if err := connect(ls.A, ls.B, ls.PipeSpec, ba, ls.Fault, fba); err != nil {
			return nil, err
		}
	}
	if st := sc.Star; st != nil {
		ss := st.SwitchSpec
		ss.Name = st.Switch
		if ss.Name == "" {
			ss.Name = "sw0"
		}
		if err := addSwitch(ss); err != nil {
			return nil, err
		}
		down := st.PipeSpec
		if st.Downlink != nil {
			down = *st.Downlink
		}
		for _, hi := range infos {
			if err := connect(hi.Name, ss.Name, st.PipeSpec, down, st.Fault, st.Fault); err != nil {
				return nil, err
			}
		}
	}
	for _, h := range w.hosts {
		switch w.net.Ports(h.id) {
		case 0:
			return nil, fmt.Errorf("host %s is on no link", h.name)
		case 1:
			h.out, h.net = w.net.Out(h.id, 0), w.net
		default:
			return nil, fmt.Errorf("host %s is on %d links; a host has one port", h.name, w.net.Ports(h.id))
		}
	}
	addrs := map[netsim.NodeID][]netsim.Addr{}
	for _, h := range w.hosts {
		addrs[h.id] = []netsim.Addr{h.addr}
	}
	if err := w.net.Route(addrs); err != nil {
		return nil, err
	}
	if w.swLoop != nil {
		if la := w.net.Lookahead(); la <= 0 || la == netsim.Never {
			return nil, fmt.Errorf("parallel: the hosts' links need a delay (a lookahead between hosts and switches), and hosts must be on switches: lookahead %s", la)
		}
	}
	for _, sf := range static {
		if sf.spec == "" {
			continue
		}
		s, err := fault.Parse(sf.spec)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", sf.pipe.Name(), err)
		}
		sf.pipe.SetFaults(fault.New(s, fault.Stream(seed, "link/"+sf.pipe.Name()).Uint64()))
	}
	if err := w.scheduleFaults(); err != nil {
		return nil, err
	}
	if err := w.setupPFC(); err != nil {
		return nil, err
	}
	if err := w.setupCongestion(marks); err != nil {
		return nil, err
	}
	return w, nil
}

type staticFault struct {
	pipe *netsim.Pipe
	spec string
}

// pipes resolves a link name: "A-B" (both directions), "A->B", or "*".
func (w *world) pipes(name string) ([]*netsim.Pipe, error) {
	if name == "*" {
		return w.net.Pipes(), nil
	}
	if a, b, ok := strings.Cut(name, "->"); ok {
		if p := w.net.Pipe(a + "->" + b); p != nil {
			return []*netsim.Pipe{p}, nil
		}
		return nil, fmt.Errorf("no link direction %s", name)
	}
	if a, b, ok := strings.Cut(name, "-"); ok {
		p, q := w.net.Pipe(a+"->"+b), w.net.Pipe(b+"->"+a)
		if p != nil && q != nil {
			return []*netsim.Pipe{p, q}, nil
		}
	}
	return nil, fmt.Errorf("no link %s (want A-B, A->B or *)", name)
}

// scheduleFaults installs timed fault models and partitions. Overlapping
// faults on one direction: the later start wins; an end removes a model
// only if it is still the one installed.
func (w *world) scheduleFaults() error {
	for i, f := range w.sc.Faults {
		ps, err := w.pipes(f.Link)
		if err != nil {
			return fmt.Errorf("fault %d: %w", i, err)
		}
		spec, err := fault.Parse(f.Spec)
		if err != nil {
			return fmt.Errorf("fault %d: %w", i, err)
		}
		for _, p := range ps {
			m := fault.New(spec, fault.Stream(w.seed, fmt.Sprintf("fault/%d/%s", i, p.Name())).Uint64())
			w.loop.At(netsim.Time(f.From), func() {
				p.SetFaults(m)
				w.rec.event("fault", p.Name(), strconv.Quote(spec.String()))
			})
			if f.Until != 0 {
				w.loop.At(netsim.Time(f.Until), func() {
					if p.Faults() == m {
						p.SetFaults(nil)
						w.rec.event("fault-end", p.Name())
					}
				})
				w.lastHeal = max(w.lastHeal, netsim.Time(f.Until))
			}
		}
	}
	for i, pt := range w.sc.Partitions {
		ps, err := w.pipes(pt.Link)
		if err != nil {
			return fmt.Errorf("partition %d: %w", i, err)
		}
		for _, p := range ps {
			w.loop.At(netsim.Time(pt.Start), func() { p.SetPartitioned(true) })
			if pt.Heal != 0 {
				w.loop.At(netsim.Time(pt.Heal), func() { p.SetPartitioned(false) })
				w.lastHeal = max(w.lastHeal, netsim.Time(pt.Heal))
			}
		}
	}
	return nil
}

// setupPFC turns on the flow control of the switches that have it, once
// they are connected, and lets a host resume feeding its port when an XON
// ends a pause.
func (w *world) setupPFC() error {
	any := false
	for i, sw := range w.sws {
		ps := w.swPFC[i]
		if ps == nil {
			continue
		}
		if ps.Quanta < 0 || ps.Quanta > 0xFFFF {
			return fmt.Errorf("switch %d: pfc quanta %d outside 0..65535", i, ps.Quanta)
		}
		err := sw.SetPFC(netsim.PFC{XOff: int(ps.XOff), XOn: int(ps.XOn), Headroom: int(ps.Headroom), Quanta: uint16(ps.Quanta),
			Priorities: ps.Priorities, WatchdogDetect: netsim.Time(ps.WatchdogDetect), WatchdogRestore: netsim.Time(ps.WatchdogRestore)})
		if err != nil {
			return err
		}
		any = true
	}
	if any {
		for _, h := range w.hosts {
			h.out.SetOnResume(h.kick)
		}
		w.pfc = true
	}
	for i, st := range w.sc.PFCStorms {
		h := w.hostOf[st.Host]
		if h == nil {
			return fmt.Errorf("pfc storm %d: no host %q", i, st.Host)
		}
		if st.Until != 0 && st.Until <= st.From {
			return fmt.Errorf("pfc storm %d: until %s is not after from %s", i, netsim.Time(st.Until), netsim.Time(st.From))
		}
		p := h.out
		if !p.Lossless() {
			return fmt.Errorf("pfc storm %d: host %s's switch has no pfc", i, st.Host)
		}
		var storm func()
		storm = func() {
			if err := p.SendPause(0xFFFF); err != nil {
				return
			}
			if st.Until == 0 || w.loop.Now()+p.QuantaTime(0xFFFF)/2 < netsim.Time(st.Until) {
				w.loop.After(max(p.QuantaTime(0xFFFF)/2, 1), storm)
			}
		}
		w.loop.At(netsim.Time(st.From), func() {
			w.rec.event("pfc-storm", st.Host)
			storm()
		})
	}
	return nil
}
