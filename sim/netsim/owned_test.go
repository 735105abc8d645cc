package netsim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
)

// TestFaultyEgressKeepsForwardedBuffer: a switch's faulty egress hands the
// frame's own buffer to its last copy instead of copying it. Every copy
// still arrives as sent unless a flip or a mark changed it (ECN marks
// first, so that marking a copy in place cannot show in another), and
// every buffer is back in the pool once the run is over, each once.
func TestFaultyEgressKeepsForwardedBuffer(t *testing.T) {
	l := NewLoop()
	n := NewNetwork(l)
	rb := &intactRecorder{net: n}
	a := n.AddNode("a", &recorder{loop: l})
	b := n.AddNode("b", rb)
	s := n.AddSwitch("s", 0)
	cfg := PipeConfig{Bandwidth: 1e9, Delay: Microsecond}
	as, _ := n.Connect(a, s.ID(), cfg, cfg)
	slow := PipeConfig{Bandwidth: 1e8, Delay: Microsecond} // a queue for RED to mark in
	_, sb := n.Connect(b, s.ID(), slow, slow)
	require.NoError(t, n.Route(map[NodeID][]Addr{a: {{MAC: macA, IP: ipA}}, b: {{MAC: macB, IP: ipB}}}))
	spec, err := fault.Parse("dup=30%,corrupt=20%,bits=1,reorder=20%,reorder_delay=5us")
	require.NoError(t, err)
	sb.SetFaults(fault.New(spec, 1))
	require.NoError(t, sb.SetECN(RED{Kmin: 0, Kmax: 4000, Pmax: 1}, fault.Stream(1, "red")))

	const frames = 400
	sent := make(map[uint32][]byte, frames)
	for i := range frames {
		f := ectFrame(300, uint32(i), packet.ECNECT0)
		for k := 64; k < len(f); k++ { // the rest names the frame too
			f[k] = byte(i*7 + k)
		}
		sent[uint32(i)] = f
		l.At(Time(i)*Microsecond, func() { as.Send(f) })
	}
	l.RunUntil(Never)

	c := sb.Counters()
	require.Len(t, rb.data, frames+int(c.Duplicated))
	require.NotZero(t, c.Duplicated)
	require.NotZero(t, c.Corrupted)
	require.NotZero(t, c.ECNMarked)
	intact := 0
	for k, f := range rb.data {
		want := sent[binary.BigEndian.Uint32(f[60:])]
		same := want != nil && string(f[42:]) == string(want[42:]) // the UDP payload
		assert.Equal(t, same, rb.intact[k], "delivery %d", k)
		if same {
			intact++
		}
	}
	assert.Greater(t, intact, frames/2)

	sh := n.shard
	handed, free := 0, map[int32]bool{}
	for _, ch := range sh.chunks {
		if ch == nil {
			continue
		}
		for _, sl := range ch {
			handed += sl.used
		}
	}
	for _, f := range sh.freeBufs {
		for _, i := range f {
			require.False(t, free[i], "buffer %d freed twice", i)
			free[i] = true
		}
	}
	assert.Equal(t, handed, len(free), "buffers handed out and not freed")
}
