package netsim

import (
	"fmt"
	"sync"
	"testing"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardedRun builds two hosts on shard 0 and two switches between them on
// shard 1 (faults, an ECN-marking queue, a switch latency), sends frames
// both ways from the hosts' loop, runs it in windows of the lookahead (the
// shards one after another, or on a goroutine each) and returns what each
// host received, when, and the network's trace.
func shardedRun(t *testing.T, parallel bool) (got []string, trace []string) {
	hl, fl := NewLoop(), NewLoop()
	n := NewNetwork(hl)
	f := n.AddShard(fl)
	ra, rb := &recorder{loop: hl}, &recorder{loop: hl}
	a := n.AddNode("a", ra)
	b := n.AddNode("b", rb)
	s1 := n.AddSwitch("s1", 0)
	s2 := n.AddSwitch("s2", 300)
	require.NoError(t, n.SetShard(s1.ID(), f))
	require.NoError(t, n.SetShard(s2.ID(), f))
	fast := PipeConfig{Bandwidth: 1e9, Delay: Microsecond}
	slow := PipeConfig{Bandwidth: 2e8, Delay: 2 * Microsecond, QueueBytes: 20_000}
	as1, s1a := n.Connect(a, s1.ID(), fast, fast)
	n.Connect(s1.ID(), s2.ID(), fast, fast)
	s2b, bs2 := n.Connect(s2.ID(), b, slow, slow)
	require.NoError(t, n.Route(map[NodeID][]Addr{a: {{MAC: macA, IP: ipA}}, b: {{MAC: macB, IP: ipB}}}))
	spec, err := fault.Parse("loss=5%,dup=5%,reorder=10%,delay=3us,corrupt=5%")
	require.NoError(t, err)
	as1.SetFaults(fault.New(spec, 1))
	s2b.SetFaults(fault.New(spec, 2))
	require.NoError(t, s2b.SetECN(RED{Kmin: 2000, Kmax: 10000, Pmax: 1}, fault.Stream(1, "red")))
	var mu sync.Mutex // the shards' traces, in parallel
	tr := func(k int) func(*TraceEvent) {
		return func(ev *TraceEvent) {
			mu.Lock()
			trace = append(trace, fmt.Sprintf("%d %d %s %d %d", k, n.ShardLoop(k).Now(), ev.Pipe.Name(), ev.Kind, ev.Sum()))
			mu.Unlock()
		}
	}
	n.Trace = tr(0)
	n.SetShardTrace(f, tr(1))
	for i := range 200 {
		hl.At(Time(i)*700, func() {
			as1.Send(ectFrame(200+i*7%900, uint32(i), packet.ECNECT0))
			if i%3 == 0 {
				bs2.Send(roceFrame(macA, macB, ipA, 100+i, uint32(i)))
			}
		})
	}
	la := n.Lookahead()
	require.Equal(t, Microsecond, la)
	for {
		start := min(hl.Next(), fl.Next(), n.Ready())
		if start == Never {
			break
		}
		end := start + la
		run := func(k int, l *Loop) {
			n.Import(k)
			for l.Next() < end {
				l.Step()
			}
		}
		if parallel {
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); run(f, fl) }()
			run(0, hl)
			wg.Wait()
		} else {
			run(0, hl)
			run(f, fl)
		}
		n.Exchange()
	}
	for _, r := range []*recorder{ra, rb} {
		for k, d := range r.data {
			got = append(got, fmt.Sprintf("%d %x", r.times[k], frameSum(d)))
		}
	}
	assert.NotEmpty(t, ra.data)
	assert.NotEmpty(t, rb.data)
	assert.NotZero(t, s2b.Counters().ECNMarked)
	assert.NotZero(t, s1a.Counters().Delivered)
	return got, trace
}

// TestShardsRunApart: two shards run in windows of the lookahead give the
// same deliveries and the same trace (by shard, in order) whether they run
// one after another or at the same time; and every frame crossing between
// them is accounted for.
func TestShardsRunApart(t *testing.T) {
	serial, serialTrace := shardedRun(t, false)
	parallel, parallelTrace := shardedRun(t, true)
	assert.Equal(t, serial, parallel)
	byShard := func(tr []string) (s [2][]string) {
		for _, l := range tr {
			k := l[0] - '0'
			s[k] = append(s[k], l)
		}
		return s
	}
	assert.Equal(t, byShard(serialTrace), byShard(parallelTrace))
}

// TestShardSetup: nodes go in a shard before they are connected, and the
// lookahead is the least delay between shards.
func TestShardSetup(t *testing.T) {
	n := NewNetwork(NewLoop())
	a := n.AddNode("a", &recorder{})
	s := n.AddSwitch("s", 0)
	assert.Equal(t, Never, n.Lookahead())
	k := n.AddShard(NewLoop())
	assert.Error(t, n.SetShard(s.ID(), 5))
	require.NoError(t, n.SetShard(s.ID(), k))
	n.Connect(a, s.ID(), PipeConfig{Delay: 3 * Microsecond}, PipeConfig{Delay: 2 * Microsecond})
	assert.Equal(t, 2*Microsecond, n.Lookahead())
	assert.Error(t, n.SetShard(a, k), "connected already")
	assert.Equal(t, k, n.ShardOf(s.ID()))
}
