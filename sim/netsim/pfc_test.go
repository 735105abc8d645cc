package netsim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

// pfcIncast: two senders at 10 Gb/s into one 10 Gb/s port through a PFC
// switch whose queues are otherwise unbounded.
func pfcIncast(t *testing.T, cfg *PFC, frames int) (*Switch, []*Pipe, *recorder, *Pipe) {
	l := NewLoop()
	n := NewNetwork(l)
	rx := &recorder{loop: l}
	dst := n.AddNode("dst", rx)
	a := n.AddNode("a", &recorder{loop: l})
	b := n.AddNode("b", &recorder{loop: l})
	sw := n.AddSwitch("sw", 0)
	pc := PipeConfig{Bandwidth: 10e9, Delay: Microsecond}
	pa, _ := n.Connect(a, sw.ID(), pc, pc)
	pb, _ := n.Connect(b, sw.ID(), pc, pc)
	down, _ := n.Connect(sw.ID(), dst, pc, pc)
	require.NoError(t, n.Route(map[NodeID][]Addr{dst: {{MAC: macB, IP: ipB}}, a: {{MAC: macA, IP: ipA}},
		b: {{MAC: [6]byte{2, 0, 0, 0, 0, 9}, IP: ipA}}}))
	if cfg != nil {
		require.NoError(t, sw.SetPFC(*cfg))
	}
	for i := range frames {
		pa.Send(roceFrame(macB, macA, ipB, 1000, uint32(2*i)))
		pb.Send(roceFrame(macB, macA, ipB, 1000, uint32(2*i+1)))
	}
	l.RunUntil(Never)
	return sw, []*Pipe{pa, pb}, rx, down
}

// TestPFCMakesIncastLossless: the 2:1 incast's queue stays within XOff +
// headroom per ingress port, the senders are paused and resumed, every
// frame arrives, and the bottleneck stays busy.
func TestPFCMakesIncastLossless(t *testing.T) {
	cfg := PFC{XOff: 20_000, XOn: 10_000, Headroom: 10_000}
	sw, senders, rx, down := pfcIncast(t, &cfg, 500)
	require.Len(t, rx.seqs, 1000, "lossless: every frame arrives")
	c := sw.PFCCounters()
	assert.Positive(t, c.XOffSent)
	assert.Positive(t, c.XOnSent)
	assert.Zero(t, c.DropHeadroom)
	assert.LessOrEqual(t, down.Counters().MaxQueueBytes, 2*(cfg.XOff+cfg.Headroom))
	for _, p := range senders {
		paused, n := p.PausedTime()
		assert.Positive(t, paused, p.Name())
		assert.Positive(t, n, p.Name())
	}
	// 1000 frames of 1024 bytes on the wire at 10 Gb/s: ~819 us if the
	// bottleneck never idles; allow a little for pause round trips.
	last := rx.times[len(rx.times)-1]
	assert.Less(t, last, Time(900*Microsecond))

	// Without PFC the same incast just queues (no bound set here), and
	// with a headroom too small for what is in flight, frames drop.
	_, _, rx0, down0 := pfcIncast(t, nil, 500)
	assert.Len(t, rx0.seqs, 1000)
	assert.Greater(t, down0.Counters().MaxQueueBytes, 400_000)
	tight := PFC{XOff: 3000, XOn: 1000, Headroom: 0}
	sw2, _, rx2, _ := pfcIncast(t, &tight, 500)
	assert.Positive(t, sw2.PFCCounters().DropHeadroom)
	assert.Less(t, len(rx2.seqs), 1000)
}

func TestPFCCheck(t *testing.T) {
	for _, bad := range []PFC{{}, {XOff: 10, XOn: 20}, {XOff: 10, Headroom: -1}} {
		assert.Error(t, bad.Check())
	}
	assert.NoError(t, PFC{XOff: 10, XOn: 5}.Check())
}

// stormRun: a sends 2,000 frames to stuck through a PFC switch while stuck
// pauses the switch's port towards it for ever (refreshing its PAUSE).
func stormRun(t *testing.T, cfg PFC) (*Switch, *Pipe, *recorder) {
	l := NewLoop()
	n := NewNetwork(l)
	rx := &recorder{loop: l}
	stuck := n.AddNode("stuck", rx)
	a := n.AddNode("a", &recorder{loop: l})
	sw := n.AddSwitch("sw", 0)
	pc := PipeConfig{Bandwidth: 10e9, Delay: Microsecond}
	pa, _ := n.Connect(a, sw.ID(), pc, pc)
	ps, _ := n.Connect(stuck, sw.ID(), pc, pc)
	require.NoError(t, n.Route(map[NodeID][]Addr{stuck: {{MAC: macB, IP: ipB}}, a: {{MAC: macA, IP: ipA}}}))
	require.NoError(t, sw.SetPFC(cfg))
	var storm func()
	storm = func() {
		require.NoError(t, ps.SendPause(0xFFFF))
		if l.Now() < 5*Millisecond {
			l.After(ps.QuantaTime(0xFFFF)/2, storm)
		}
	}
	storm()
	for i := range 2000 {
		l.At(Time(i)*Microsecond, func() { pa.Send(roceFrame(macB, macA, ipB, 1000, uint32(i))) })
	}
	l.RunUntil(Never)
	return sw, pa, rx
}

// TestPFCStormAndWatchdog: a NIC that pauses its switch port for ever
// stops its sender through the pause that spreads back (nothing reaches
// it until the storm ends); the watchdog finds the storm, drops what is
// queued for that port, ignores its PAUSEs, and the sender runs again.
func TestPFCStormAndWatchdog(t *testing.T) {
	base := PFC{XOff: 20_000, XOn: 10_000, Headroom: 10_000}
	sw, pa, rx := stormRun(t, base)
	paused, _ := pa.PausedTime()
	assert.Greater(t, paused, 4*Millisecond, "the sender is stopped while the storm lasts")
	assert.Zero(t, sw.PFCCounters().Storms)
	assert.Len(t, rx.seqs, 2000, "lossless: all delivered once the storm ends")
	assert.Greater(t, rx.times[0], 5*Millisecond)

	wd := base
	wd.WatchdogDetect, wd.WatchdogRestore = 500*Microsecond, 10*Millisecond
	sw, pa, rx = stormRun(t, wd)
	c := sw.PFCCounters()
	assert.Equal(t, uint64(1), c.Storms)
	assert.Positive(t, c.DropWatchdog)
	paused, _ = pa.PausedTime()
	assert.Less(t, paused, 2*Millisecond, "the sender runs again after the watchdog")
	assert.Equal(t, 2000-int(c.DropWatchdog), len(rx.seqs))

	bad := base
	bad.WatchdogDetect = Millisecond
	l := NewLoop()
	n := NewNetwork(l)
	s2 := n.AddSwitch("s", 0)
	assert.Error(t, s2.SetPFC(bad), "detect without restore")
}

// pausedPort is a switch with PFC (lossless priorities prios) between a
// sender a and a receiver dst that, 5 us before it returns, has paused the
// switch's port to it (priority 3) for about 100 us at 10 Gb/s. It returns
// the loop, dst's recorder, the switch and a's port.
func pausedPort(t *testing.T, prios []int) (*Loop, *recorder, *Switch, *Pipe) {
	l := NewLoop()
	n := NewNetwork(l)
	rx := &recorder{loop: l}
	dst := n.AddNode("dst", rx)
	a := n.AddNode("a", &recorder{loop: l})
	sw := n.AddSwitch("sw", 0)
	pc := PipeConfig{Bandwidth: 10e9, Delay: Microsecond}
	pa, _ := n.Connect(a, sw.ID(), pc, pc)
	pd, _ := n.Connect(dst, sw.ID(), pc, pc)
	require.NoError(t, n.Route(map[NodeID][]Addr{dst: {{MAC: macB, IP: ipB}}, a: {{MAC: macA, IP: ipA}}}))
	require.NoError(t, sw.SetPFC(PFC{XOff: 50_000, XOn: 20_000, Headroom: 20_000, Quanta: 2000, Priorities: prios}))
	require.NoError(t, pd.SendPause(2000))
	l.RunUntil(5 * Microsecond)
	return l, rx, sw, pa
}

// TestPFCStrictPriorityClass: frames of DSCP class 6 (CNPs' CS6) go by a
// queue of their own that a PAUSE does not stop, ahead of the lossless
// class's frames, which wait out the pause.
func TestPFCStrictPriorityClass(t *testing.T) {
	l, rx, _, pa := pausedPort(t, nil)
	cs6 := ectFrame(200, 99, 0)
	cs6[15] = 48 << 2
	fixCsum(cs6)
	pa.Send(roceFrame(macB, macA, ipB, 200, 1))
	pa.Send(cs6)
	l.RunUntil(Never)
	require.Len(t, rx.seqs, 2)
	assert.Equal(t, []uint32{99, 1}, rx.seqs, "the CS6 frame passes the paused data frame")
	assert.Less(t, rx.times[0], 20*Microsecond)
	assert.Greater(t, rx.times[1], 90*Microsecond)
}

// fixCsum recomputes an IPv4 frame's header checksum.
func fixCsum(f []byte) {
	f[24], f[25] = 0, 0
	binary.BigEndian.PutUint16(f[24:], packet.IPv4HeaderChecksum(f[14:34]))
}

// withDSCP returns f with its IPv4 DSCP set.
func withDSCP(f []byte, dscp int) []byte {
	f[15] = byte(dscp<<2) | f[15]&3
	fixCsum(f)
	return f
}

// TestPFCPrioritiesPauseApart: with priorities 3 and 4 lossless, a PAUSE
// for priority 3 (a host's) stops the switch port's priority-3 frames only:
// a priority-4 frame sent after a priority-3 one passes it, and so does a
// lossy priority-0 frame; the priority-3 frame waits out the pause.
func TestPFCPrioritiesPauseApart(t *testing.T) {
	l, rx, sw, pa := pausedPort(t, []int{3, 4})
	pa.Send(withDSCP(roceFrame(macB, macA, ipB, 200, 1), 26))
	pa.Send(withDSCP(roceFrame(macB, macA, ipB, 200, 2), 34))
	pa.Send(withDSCP(roceFrame(macB, macA, ipB, 200, 3), 0))
	l.RunUntil(Never)
	require.Len(t, rx.seqs, 3)
	assert.Equal(t, []uint32{2, 3, 1}, rx.seqs, "priorities 4 and 0 pass the paused priority 3")
	assert.Less(t, rx.times[1], 20*Microsecond)
	assert.Greater(t, rx.times[2], 90*Microsecond)
	down := sw.outs[1]
	assert.Positive(t, down.PausedTimeOf(3))
	assert.Zero(t, down.PausedTimeOf(4))
	total, _ := down.PausedTime()
	assert.Equal(t, down.PausedTimeOf(3), total)
}

// TestPFCLossyPriorityDrops: with only priority 3 lossless, an incast of
// priority-0 frames is neither counted towards XOFF nor paused: it drops at
// the port's queue bound, while the same incast in priority 3 drops
// nothing.
func TestPFCLossyPriorityDrops(t *testing.T) {
	run := func(dscp int) (*Switch, *recorder, *Pipe) {
		l := NewLoop()
		n := NewNetwork(l)
		rx := &recorder{loop: l}
		dst := n.AddNode("dst", rx)
		a := n.AddNode("a", &recorder{loop: l})
		b := n.AddNode("b", &recorder{loop: l})
		sw := n.AddSwitch("sw", 0)
		pc := PipeConfig{Bandwidth: 10e9, Delay: Microsecond, QueueBytes: 30_000}
		pa, _ := n.Connect(a, sw.ID(), pc, pc)
		pb, _ := n.Connect(b, sw.ID(), pc, pc)
		down, _ := n.Connect(sw.ID(), dst, pc, pc)
		require.NoError(t, n.Route(map[NodeID][]Addr{dst: {{MAC: macB, IP: ipB}}, a: {{MAC: macA, IP: ipA}},
			b: {{MAC: [6]byte{2, 0, 0, 0, 0, 9}, IP: ipA}}}))
		require.NoError(t, sw.SetPFC(PFC{XOff: 20_000, XOn: 10_000, Headroom: 10_000, Priorities: []int{3}}))
		for i := range 300 {
			pa.Send(withDSCP(roceFrame(macB, macA, ipB, 1000, uint32(2*i)), dscp))
			pb.Send(withDSCP(roceFrame(macB, macA, ipB, 1000, uint32(2*i+1)), dscp))
		}
		l.RunUntil(Never)
		return sw, rx, down
	}
	sw, rx, down := run(0)
	assert.Zero(t, sw.PFCCounters().XOffSent, "priority 0 is not lossless")
	assert.Positive(t, down.Counters().DropQueue)
	assert.Less(t, len(rx.seqs), 600)
	sw, rx, down = run(26)
	assert.Positive(t, sw.PFCCounters().XOffSent)
	assert.Zero(t, down.Counters().DropQueue)
	assert.Len(t, rx.seqs, 600)
}

// TestPFCPrioritiesChecked: priorities are 0-7, once each, and every switch
// gives the same list.
func TestPFCPrioritiesChecked(t *testing.T) {
	for _, ps := range [][]int{{8}, {-1}, {3, 3}} {
		assert.Error(t, PFC{XOff: 10, Priorities: ps}.Check(), "%v", ps)
	}
	n := NewNetwork(NewLoop())
	s1, s2 := n.AddSwitch("s1", 0), n.AddSwitch("s2", 0)
	require.NoError(t, s1.SetPFC(PFC{XOff: 10, Priorities: []int{3}}))
	assert.Error(t, s2.SetPFC(PFC{XOff: 10, Priorities: []int{3, 4}}))
	assert.NoError(t, s2.SetPFC(PFC{XOff: 10, Priorities: []int{3}}))
}
