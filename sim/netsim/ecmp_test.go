package netsim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestECMP: between a and b there are two equal-cost paths (s1-s2-s4 and
// s1-s3-s4). Frames of one UDP source port (one RoCE QP) all take one path;
// many source ports spread over both; the reverse direction is routed too.
func TestECMP(t *testing.T) {
	l := NewLoop()
	n := NewNetwork(l)
	ra, rb := &recorder{loop: l}, &recorder{loop: l}
	a, b := n.AddNode("a", ra), n.AddNode("b", rb)
	s := make([]*Switch, 4)
	for i := range s {
		s[i] = n.AddSwitch(string(rune('1'+i)), 0)
	}
	cfg := PipeConfig{Bandwidth: 1e9, Delay: Microsecond}
	n.Connect(a, s[0].ID(), cfg, cfg)
	n.Connect(s[0].ID(), s[1].ID(), cfg, cfg)
	n.Connect(s[0].ID(), s[2].ID(), cfg, cfg)
	n.Connect(s[1].ID(), s[3].ID(), cfg, cfg)
	n.Connect(s[2].ID(), s[3].ID(), cfg, cfg)
	n.Connect(s[3].ID(), b, cfg, cfg)
	require.NoError(t, n.Route(map[NodeID][]Addr{a: {{MAC: macA, IP: ipA}}, b: {{MAC: macB, IP: ipB}}}))

	out := n.Out(a, 0)
	send := func(sport uint16, seq uint32) {
		f := roceFrame(macB, macA, ipB, 100, seq)
		binary.BigEndian.PutUint16(f[34:], sport)
		out.Send(f)
	}
	for i := range 10 {
		send(0xC001, uint32(i))
	}
	l.RunUntil(Never)
	require.Len(t, rb.seqs, 10)
	via2, via3 := s[1].Counters().Forwarded, s[2].Counters().Forwarded
	assert.True(t, via2 == 10 && via3 == 0 || via2 == 0 && via3 == 10, "one flow, one path: %d %d", via2, via3)
	assert.Equal(t, uint64(10), s[0].Counters().ECMP)

	for i := range 200 {
		send(uint16(0xC000+i), uint32(100+i))
	}
	l.RunUntil(Never)
	require.Len(t, rb.seqs, 210)
	via2, via3 = s[1].Counters().Forwarded, s[2].Counters().Forwarded
	assert.InDelta(t, 105, float64(via2), 30, "many flows spread")
	assert.InDelta(t, 105, float64(via3), 30)

	back := n.Out(b, 0)
	f := roceFrame(macA, macB, ipA, 100, 7)
	back.Send(f)
	l.RunUntil(Never)
	assert.Len(t, ra.seqs, 1)
	assert.Equal(t, uint64(1), s[3].Counters().ECMP)
}
