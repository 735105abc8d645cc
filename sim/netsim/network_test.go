package netsim

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a host that records what arrives.
type recorder struct {
	loop  *Loop
	times []Time
	seqs  []uint32
	data  [][]byte
}

func (r *recorder) Receive(_ int, frame []byte) {
	r.times = append(r.times, r.loop.Now())
	r.data = append(r.data, append([]byte(nil), frame...))
	if len(frame) >= 64 {
		r.seqs = append(r.seqs, binary.BigEndian.Uint32(frame[60:]))
	}
}

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
	ipA  = netip.MustParseAddr("10.0.0.1")
	ipB  = netip.MustParseAddr("10.0.0.2")
)

// roceFrame builds an IPv4/UDP 4791 frame of n bytes (n >= 64) from src to
// dst, with seq at byte 60 (inside the BTH's PSN area).
func roceFrame(dst, src [6]byte, dstIP netip.Addr, n int, seq uint32) []byte {
	f := make([]byte, n)
	copy(f[0:], dst[:])
	copy(f[6:], src[:])
	f[12], f[13] = 0x08, 0x00
	f[14] = 0x45
	binary.BigEndian.PutUint16(f[16:], uint16(n-14))
	f[23] = 17
	copy(f[26:], ipA.AsSlice())
	copy(f[30:], dstIP.AsSlice())
	binary.BigEndian.PutUint16(f[36:], 4791)
	binary.BigEndian.PutUint32(f[60:], seq)
	return f
}

func pair(cfg PipeConfig) (*Loop, *Network, *Pipe, *recorder) {
	l := NewLoop()
	n := NewNetwork(l)
	a := n.AddNode("a", &recorder{loop: l})
	rb := &recorder{loop: l}
	b := n.AddNode("b", rb)
	ab, _ := n.Connect(a, b, cfg, cfg)
	return l, n, ab, rb
}

func TestPipeSerializationAndPropagation(t *testing.T) {
	// 1 Gb/s, 1 us: a 1000-byte frame takes (1000+24)*8 ns to serialize.
	l, _, ab, rb := pair(PipeConfig{Bandwidth: 1e9, Delay: Microsecond})
	for i := 0; i < 3; i++ {
		ab.Send(roceFrame(macB, macA, ipB, 1000, uint32(i)))
	}
	l.RunUntil(Never)
	ser := Time(1024 * 8)
	assert.Equal(t, []Time{ser + 1000, 2*ser + 1000, 3*ser + 1000}, rb.times)
	assert.Equal(t, []uint32{0, 1, 2}, rb.seqs)
	c := ab.Counters()
	assert.Equal(t, uint64(3), c.Sent)
	assert.Equal(t, uint64(3), c.Delivered)
	assert.Equal(t, 3000, c.MaxQueueBytes)
}

func TestPipeDropTail(t *testing.T) {
	tests := []struct {
		name      string
		cfg       PipeConfig
		delivered int
	}{
		{"bytes", PipeConfig{Bandwidth: 1e9, QueueBytes: 2500}, 2},
		{"frames", PipeConfig{Bandwidth: 1e9, QueueFrames: 3}, 3},
		{"unbounded", PipeConfig{Bandwidth: 1e9}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _, ab, rb := pair(tc.cfg)
			for i := 0; i < 5; i++ {
				ab.Send(roceFrame(macB, macA, ipB, 1000, uint32(i)))
			}
			l.RunUntil(Never)
			assert.Len(t, rb.times, tc.delivered)
			c := ab.Counters()
			assert.Equal(t, uint64(5-tc.delivered), c.DropQueue)
			// Once the queue drains, frames fit again.
			ab.Send(roceFrame(macB, macA, ipB, 1000, 9))
			l.RunUntil(Never)
			assert.Equal(t, uint32(9), rb.seqs[len(rb.seqs)-1])
		})
	}
}

func TestPipePartition(t *testing.T) {
	l, _, ab, rb := pair(PipeConfig{Delay: 10 * Microsecond})
	var drops []DropCause
	ab.net.Trace = func(ev *TraceEvent) {
		if ev.Kind == TraceDrop {
			drops = append(drops, ev.Cause)
		}
	}
	ab.Send(roceFrame(macB, macA, ipB, 100, 1)) // in flight when the cut happens
	l.At(5*Microsecond, func() { ab.SetPartitioned(true) })
	l.At(6*Microsecond, func() { ab.Send(roceFrame(macB, macA, ipB, 100, 2)) })
	l.At(20*Microsecond, func() { ab.SetPartitioned(false) })
	l.At(21*Microsecond, func() { ab.Send(roceFrame(macB, macA, ipB, 100, 3)) })
	l.RunUntil(Never)
	assert.Equal(t, []uint32{3}, rb.seqs)
	assert.Equal(t, uint64(2), ab.Counters().DropPartition)
	assert.Equal(t, []DropCause{DropPartition, DropPartition}, drops)
}

func runFaulty(t *testing.T, spec string, seed uint64, frames int) (*Pipe, *recorder) {
	t.Helper()
	s, err := fault.Parse(spec)
	require.NoError(t, err)
	l, _, ab, rb := pair(PipeConfig{Bandwidth: 10e9, Delay: Microsecond})
	ab.SetFaults(fault.New(s, seed))
	for i := 0; i < frames; i++ {
		f := roceFrame(macB, macA, ipB, 200, uint32(i))
		l.At(Time(i)*Microsecond, func() { ab.Send(f) })
	}
	l.RunUntil(Never)
	return ab, rb
}

func TestPipeFaults(t *testing.T) {
	const n = 5000
	t.Run("loss", func(t *testing.T) {
		ab, rb := runFaulty(t, "loss=10%", 1, n)
		c := ab.Counters()
		assert.InDelta(t, 500, float64(c.DropLoss), 100)
		assert.Equal(t, uint64(n)-c.DropLoss, c.Delivered)
		assert.Len(t, rb.seqs, int(c.Delivered))
	})
	t.Run("burst", func(t *testing.T) {
		ab, rb := runFaulty(t, "burst=gilbert:p=1%:r=25%", 1, n)
		c := ab.Counters()
		assert.Greater(t, c.DropBurst, uint64(50))
		// Bursty: losses come in runs, so there are fewer gaps than losses.
		gaps := 0
		for i := 1; i < len(rb.seqs); i++ {
			if rb.seqs[i] != rb.seqs[i-1]+1 {
				gaps++
			}
		}
		assert.Less(t, gaps, int(c.DropBurst))
	})
	t.Run("dup", func(t *testing.T) {
		ab, rb := runFaulty(t, "dup=5%", 1, n)
		c := ab.Counters()
		assert.Greater(t, c.Duplicated, uint64(150))
		assert.Equal(t, uint64(n)+c.Duplicated, c.Delivered)
		assert.Len(t, rb.seqs, int(c.Delivered))
	})
	t.Run("reorder", func(t *testing.T) {
		ab, rb := runFaulty(t, "reorder=5%,reorder_delay=20us", 1, n)
		c := ab.Counters()
		assert.Greater(t, c.Reordered, uint64(150))
		inversions := 0
		for i := 1; i < len(rb.seqs); i++ {
			if rb.seqs[i] < rb.seqs[i-1] {
				inversions++
			}
		}
		assert.Greater(t, inversions, 100)
		for i := 1; i < len(rb.times); i++ {
			require.LessOrEqual(t, rb.times[i-1], rb.times[i])
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		ab, rb := runFaulty(t, "corrupt=10%,bits=3", 1, n)
		c := ab.Counters()
		assert.InDelta(t, 500, float64(c.Corrupted), 100)
		// Flips land only in the UDP payload, never in byte 4 of the BTH.
		changed := 0
		for _, d := range rb.data {
			want := roceFrame(macB, macA, ipB, 200, binary.BigEndian.Uint32(d[60:]))
			for i := range d {
				if d[i] != want[i] && i != 60 && i != 61 && i != 62 && i != 63 {
					require.GreaterOrEqual(t, i, 42, "flip outside the UDP payload")
					require.NotEqual(t, 42+4, i, "flip in the ICRC-masked BTH byte")
					changed++
					break
				}
			}
		}
		assert.Greater(t, changed, 300)
	})
}

func TestPipeFaultsDeterministic(t *testing.T) {
	spec := "loss=3%,dup=2%,reorder=3%,corrupt=1%,jitter=2us,burst=gilbert:p=1%:r=30%"
	_, a := runFaulty(t, spec, 7, 2000)
	_, b := runFaulty(t, spec, 7, 2000)
	_, c := runFaulty(t, spec, 8, 2000)
	assert.Equal(t, a.times, b.times)
	assert.Equal(t, a.data, b.data)
	assert.NotEqual(t, a.data, c.data)
}

// TestSwitchForwarding forwards by MAC, by IP when the MAC is unknown or
// zero (as softroce's devices send), floods broadcasts and drops frames for
// unknown hosts, with the switches' IPv4 tables as arrays (addresses close
// together, one unknown inside their range) and as maps (far apart).
func TestSwitchForwarding(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cIP, unknown string
		dense        bool
	}{
		{"dense", "10.0.0.5", "10.0.0.4", true},
		{"sparse", "10.200.0.3", "10.9.9.9", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLoop()
			n := NewNetwork(l)
			recs := make([]*recorder, 3)
			ids := make([]NodeID, 3)
			macs := [][6]byte{macA, macB, {2, 0, 0, 0, 0, 3}}
			ips := []netip.Addr{ipA, ipB, netip.MustParseAddr(tc.cIP)}
			for i := range recs {
				recs[i] = &recorder{loop: l}
				ids[i] = n.AddNode(string(rune('a'+i)), recs[i])
			}
			// Two switches in a line: a on s1; b and c on s2.
			s1 := n.AddSwitch("s1", 0)
			s2 := n.AddSwitch("s2", 100)
			cfg := PipeConfig{Bandwidth: 1e9, Delay: Microsecond}
			n.Connect(ids[0], s1.ID(), cfg, cfg)
			n.Connect(s1.ID(), s2.ID(), cfg, cfg)
			n.Connect(ids[1], s2.ID(), cfg, cfg)
			n.Connect(ids[2], s2.ID(), cfg, cfg)
			hosts := map[NodeID][]Addr{}
			for i, id := range ids {
				hosts[id] = []Addr{{MAC: macs[i], IP: ips[i]}}
			}
			require.NoError(t, n.Route(hosts))
			assert.Equal(t, tc.dense, s1.ip4 != nil)

			out := n.Out(ids[0], 0)
			out.Send(roceFrame(macs[1], macA, ips[1], 100, 1))                   // by MAC to b
			out.Send(roceFrame([6]byte{2, 9, 9, 9, 9, 9}, macA, ips[2], 100, 2)) // unknown MAC, by IP to c
			out.Send(roceFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, macA, ips[1], 100, 3))
			out.Send(roceFrame([6]byte{2, 9, 9, 9, 9, 9}, macA, netip.MustParseAddr(tc.unknown), 100, 4))
			out.Send(roceFrame([6]byte{}, macA, ips[2], 100, 5)) // zero MAC, by IP to c
			l.RunUntil(Never)
			assert.Equal(t, []uint32{1, 3}, recs[1].seqs)
			assert.Equal(t, []uint32{2, 3, 5}, recs[2].seqs)
			assert.Empty(t, recs[0].seqs)
			assert.Equal(t, uint64(1), s1.Counters().Unknown)
			assert.Equal(t, uint64(1), s1.Counters().Flooded)
			assert.Equal(t, uint64(1), s2.Counters().Flooded)
			// a -> s1 -> s2 -> b: three serializations, three propagations, 100 ns in s2.
			assert.Equal(t, 3*Time(124*8)+3*Microsecond+100, recs[1].times[0])
			tot := n.Totals()
			assert.Equal(t, tot.Sent, tot.Delivered)
		})
	}
}

// intactRecorder records, for each frame that arrives, whether the network
// called it intact.
type intactRecorder struct {
	net    *Network
	intact []bool
	data   [][]byte
}

func (r *intactRecorder) Receive(_ int, frame []byte) {
	r.intact = append(r.intact, r.net.Intact())
	r.data = append(r.data, append([]byte(nil), frame...))
}

// markingPath joins a to b through two switches (s1 forwards the buffer
// it got, s2 after a latency), with corrupt's faults on a's link and every
// ECN-capable frame marked CE on the slow last one; it returns a's pipe and
// the last.
func markingPath(t *testing.T, n *Network, ra, rb Node, corrupt string) (as1, s2b *Pipe) {
	a := n.AddNode("a", ra)
	b := n.AddNode("b", rb)
	s1 := n.AddSwitch("s1", 0)
	s2 := n.AddSwitch("s2", 100)
	cfg := PipeConfig{Bandwidth: 1e9, Delay: Microsecond}
	as1, _ = n.Connect(a, s1.ID(), cfg, cfg)
	n.Connect(s1.ID(), s2.ID(), cfg, cfg)
	slow := PipeConfig{Bandwidth: 1e8, Delay: Microsecond} // a queue for RED to mark in
	_, s2b = n.Connect(b, s2.ID(), slow, slow)
	require.NoError(t, n.Route(map[NodeID][]Addr{a: {{MAC: macA, IP: ipA}}, b: {{MAC: macB, IP: ipB}}}))
	s, err := fault.Parse(corrupt)
	require.NoError(t, err)
	as1.SetFaults(fault.New(s, 1))
	require.NoError(t, s2b.SetECN(RED{Kmin: 0, Kmax: 1, Pmax: 1}, fault.Stream(1, "red")))
	return as1, s2b
}

// TestIntact: a frame is intact at its receiver exactly when the bytes the
// ICRC covers are the sender's, whatever hop corrupted it; an ECN mark on a
// later hop (outside the ICRC) leaves it intact.
func TestIntact(t *testing.T) {
	l := NewLoop()
	n := NewNetwork(l)
	rb := &intactRecorder{net: n}
	as1, s2b := markingPath(t, n, &recorder{loop: l}, rb, "corrupt=30%,bits=2")
	const frames = 200
	sent := make([][]byte, frames)
	for i := range sent {
		sent[i] = ectFrame(300, uint32(i), packet.ECNECT0)
		as1.Send(sent[i])
	}
	l.RunUntil(Never)
	require.Len(t, rb.data, frames)
	intact := 0
	for k, f := range rb.data { // in order: nothing reorders them
		if rb.intact[k] {
			intact++
		}
		same := string(f[42:]) == string(sent[k][42:]) // the UDP payload
		assert.Equal(t, same, rb.intact[k], "frame %d", k)
	}
	assert.Greater(t, intact, frames/2)
	assert.Less(t, intact, frames)
	assert.NotZero(t, s2b.Counters().ECNMarked)
	assert.False(t, n.Intact(), "outside a delivery")
}

// TestTraceSums: every trace event's Sum is the frame's, whether a host's
// Send took it, an earlier hop carried it or the trace computes it; and
// SumKnown holds exactly when the same bytes were traced before (not at a
// frame's first trace, nor after a corruption or an ECN mark changed it).
func TestTraceSums(t *testing.T) {
	l := NewLoop()
	n := NewNetwork(l)
	as1, s2b := markingPath(t, n, &recorder{loop: l}, &recorder{loop: l}, "corrupt=20%,bits=2")
	traced := map[string]bool{}
	var known, first int
	n.Trace = func(ev *TraceEvent) {
		k := string(ev.Frame)
		assert.Equal(t, traced[k], ev.SumKnown())
		assert.Equal(t, frameSum(ev.Frame), ev.Sum())
		if ev.SumKnown() {
			known++
		} else {
			first++
		}
		traced[k] = true
	}
	for i := range 100 {
		as1.Send(ectFrame(300, uint32(i), packet.ECNECT0))
	}
	l.RunUntil(Never)
	assert.Greater(t, known, 100)
	assert.Greater(t, first, 100, "corrupted or marked frames are traced anew")
	assert.NotZero(t, s2b.Counters().ECNMarked)
}
