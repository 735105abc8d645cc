package fault

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRoundTrip(t *testing.T) {
	cases := []struct {
		in, canon string
	}{
		{"", ""},
		{"loss=2%,dup=1%,reorder=1%,corrupt=0.1%,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3,seed=7",
			"loss=2%,burst=gilbert:p=0.01:r=0.3,dup=1%,reorder=1%,corrupt=0.1%,delay=100us,jitter=50us,seed=7"},
		{"loss=0.02", "loss=2%"},
		{" loss = 0.5 ", ""}, // key with spaces is unknown: handled in the bad table
		{"loss=100%", "loss=100%"},
		{"loss=1", "loss=100%"},
		{"loss=0.0000001%", "loss=0.0000001%"},
		{"delay=1.5ms,jitter=1500ns", "delay=1500us,jitter=1500ns"},
		{"delay=2s", "delay=2s"},
		{"reorder=5%,reorder_delay=20us", "reorder=5%,reorder_delay=20us"},
		{"corrupt=1%,bits=3", "corrupt=1%,bits=3"},
		{"burst=gilbert:p=1%:r=30%:bad=0.5:good=0.001", "burst=gilbert:p=0.01:r=0.3:bad=0.5:good=0.001"},
		{"seed=0x10", "seed=16"},
		{"seed=0", "seed=0"},
	}
	for _, c := range cases {
		if c.canon == "" && c.in != "" {
			continue
		}
		t.Run(c.in, func(t *testing.T) {
			s, err := Parse(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.canon, s.String())
			s2, err := Parse(s.String())
			require.NoError(t, err)
			assert.Equal(t, s, s2)
		})
	}
}

func TestParseValues(t *testing.T) {
	s, err := Parse("loss=2%,dup=0.01,corrupt=0.1%,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3,seed=7")
	require.NoError(t, err)
	assert.Equal(t, Prob(20_000_000), s.Loss)
	assert.Equal(t, Prob(10_000_000), s.Dup)
	assert.Equal(t, Prob(1_000_000), s.Corrupt)
	assert.Equal(t, 100*time.Microsecond, s.Delay)
	assert.Equal(t, 50*time.Microsecond, s.Jitter)
	assert.Equal(t, Gilbert{P: 10_000_000, R: 300_000_000, Bad: One}, s.Burst)
	assert.Equal(t, uint64(7), s.Seed)
	assert.True(t, s.SeedSet)
	assert.InDelta(t, 0.02, s.Loss.Float(), 1e-12)
	assert.Equal(t, Prob(20_000_000), Percent(2))
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"loss", "not key=value"},
		{"=3", "not key=value"},
		{"loss=2%,loss=3%", "loss given twice"},
		{"los=2%", "los: unknown item"},
		{" loss = 0.5 ", "unknown item"},
		{"loss=abc", "loss: \"abc\" is not a number"},
		{"loss=101%", "loss: \"101%\" is more than 100%"},
		{"loss=1.5", "loss: \"1.5\" is more than 100%"},
		{"loss=-1%", "loss: \"-1\" is not a number"},
		{"loss=%", "loss: \"\" is not a number"},
		{"loss=0.00000000001", "loss: \"0.00000000001\" has more precision"},
		{"dup=1e-3", "dup: \"1e-3\" is not a number"},
		{"delay=10", "delay: \"10\" is not a duration"},
		{"jitter=-5us", "jitter: \"-5us\" is negative"},
		{"bits=0", "bits: \"0\" is not in 1..8"},
		{"bits=9", "bits: \"9\" is not in 1..8"},
		{"bits=x", "bits: strconv.Atoi"},
		{"seed=-1", "seed: strconv.ParseUint"},
		{"burst=markov:p=0.1:r=0.1", "burst: \"markov:p=0.1:r=0.1\": the only burst model"},
		{"burst=gilbert:p=0.1", "needs both p and r"},
		{"burst=gilbert:p=0.1:r=0", "r=0 would never leave"},
		{"burst=gilbert:p=0.1:r=0.2:q=1", "unknown gilbert parameter \"q\""},
		{"burst=gilbert:p=2:r=0.2", "gilbert p: \"2\" is more than 100%"},
		{"burst=gilbert:p=0.1:p=0.2:r=0.2", "p given twice"},
		{"burst=gilbert:p", "\"p\" is not key=value"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			_, err := Parse(c.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "fault spec: ")
		})
	}
}

func TestZeroSpecIsTransparent(t *testing.T) {
	m := New(Spec{}, 1)
	assert.True(t, Spec{}.IsZero())
	for i := 0; i < 1000; i++ {
		d := m.Decide(100)
		require.False(t, d.Drop)
		require.Len(t, d.Copies, 1)
		require.Equal(t, Copy{}, d.Copies[0])
	}
}

func mustParse(t testing.TB, s string) Spec {
	t.Helper()
	sp, err := Parse(s)
	require.NoError(t, err)
	return sp
}

const statFrames = 100_000

func TestLossRate(t *testing.T) {
	for _, pct := range []float64{0.5, 2, 10, 50} {
		t.Run(fmt.Sprint(pct), func(t *testing.T) {
			m := New(Spec{Loss: Percent(pct)}, 42)
			lost := 0
			for i := 0; i < statFrames; i++ {
				if m.Decide(0).Drop {
					lost++
				}
			}
			p := pct / 100
			sigma := math.Sqrt(p * (1 - p) / statFrames)
			assert.InDelta(t, p, float64(lost)/statFrames, 5*sigma)
			assert.Equal(t, uint64(lost), m.Stats().Lost)
		})
	}
}

func TestAlwaysAndNever(t *testing.T) {
	m := New(mustParse(t, "loss=100%"), 3)
	for i := 0; i < 100; i++ {
		require.True(t, m.Decide(10).Drop)
	}
	m = New(mustParse(t, "dup=100%,corrupt=100%,bits=8"), 3)
	for i := 0; i < 100; i++ {
		d := m.Decide(10)
		require.Len(t, d.Copies, 2)
		for _, c := range d.Copies {
			require.NotEmpty(t, c.FlipBits)
		}
	}
}

func TestGilbertElliott(t *testing.T) {
	m := New(mustParse(t, "burst=gilbert:p=0.01:r=0.3"), 7)
	lost, bursts, run := 0, 0, 0
	for i := 0; i < 10*statFrames; i++ {
		d := m.Decide(0)
		if d.Drop {
			require.True(t, d.Burst)
			lost++
			run++
			continue
		}
		if run > 0 {
			bursts++
			run = 0
		}
	}
	n := float64(10 * statFrames)
	assert.InDelta(t, 0.01/(0.01+0.3), float64(lost)/n, 0.003, "stationary loss p/(p+r)")
	mean := float64(lost) / float64(bursts)
	assert.InDelta(t, 1/0.3, mean, 0.15, "mean burst length 1/r")
	assert.Equal(t, uint64(lost), m.Stats().BurstLost)
}

func TestDupDelayReorder(t *testing.T) {
	m := New(mustParse(t, "dup=10%,delay=100us,jitter=50us,reorder=5%,reorder_delay=1ms"), 9)
	dups, reordered, copies := 0, 0, 0
	var sum time.Duration
	for i := 0; i < statFrames; i++ {
		d := m.Decide(64)
		require.False(t, d.Drop)
		if len(d.Copies) == 2 {
			dups++
		}
		for _, c := range d.Copies {
			copies++
			if c.Reordered {
				reordered++
				require.Greater(t, c.Delay, 50*time.Microsecond)
				require.LessOrEqual(t, c.Delay, 150*time.Microsecond+time.Millisecond)
				continue
			}
			require.GreaterOrEqual(t, c.Delay, 50*time.Microsecond)
			require.LessOrEqual(t, c.Delay, 150*time.Microsecond)
			sum += c.Delay
			require.Nil(t, c.FlipBits)
		}
	}
	assert.InDelta(t, 0.10, float64(dups)/statFrames, 0.005)
	assert.InDelta(t, 0.05, float64(reordered)/float64(copies), 0.004)
	mean := sum / time.Duration(copies-reordered)
	assert.InDelta(t, float64(100*time.Microsecond), float64(mean), float64(time.Microsecond))
	st := m.Stats()
	assert.Equal(t, uint64(dups), st.Duplicated)
	assert.Equal(t, uint64(reordered), st.Reordered)
}

func TestJitterClampsAtZero(t *testing.T) {
	m := New(mustParse(t, "delay=10us,jitter=100us"), 1)
	zero := 0
	for i := 0; i < 10000; i++ {
		d := m.Decide(0).Copies[0].Delay
		require.GreaterOrEqual(t, d, time.Duration(0))
		if d == 0 {
			zero++
		}
	}
	assert.Greater(t, zero, 3000) // 90/200 of the draws are at or below zero
}

func TestCorruptPositions(t *testing.T) {
	for _, n := range []int{1, 3, 60, 4096} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := New(mustParse(t, "corrupt=50%,bits=4"), uint64(n))
			corrupted, seen := 0, map[int]bool{}
			for i := 0; i < 20000; i++ {
				d := m.Decide(n)
				c := d.Copies[0]
				if c.FlipBits == nil {
					continue
				}
				corrupted++
				require.NotEmpty(t, c.FlipBits)
				require.LessOrEqual(t, len(c.FlipBits), min(4, 8*n))
				for j, b := range c.FlipBits {
					require.GreaterOrEqual(t, b, 0)
					require.Less(t, b, 8*n)
					require.NotContains(t, c.FlipBits[:j], b, "distinct")
					seen[b/8] = true
				}
			}
			assert.InDelta(t, 0.5, float64(corrupted)/20000, 0.02)
			if n <= 60 {
				assert.Len(t, seen, n, "every byte gets hit")
			}
		})
	}
	m := New(mustParse(t, "corrupt=100%"), 1)
	assert.Nil(t, m.Decide(0).Copies[0].FlipBits, "empty range: nothing to corrupt")
	assert.Len(t, m.Decide(5).Copies[0].FlipBits, 1, "bits defaults to 1")
}

func TestFlipBits(t *testing.T) {
	b := []byte{0, 0, 0}
	FlipBits(b, []int{0, 15, 23, 24, -1})
	assert.Equal(t, []byte{0x80, 0x01, 0x01}, b)
}

func TestDeterminism(t *testing.T) {
	spec := mustParse(t, "loss=2%,dup=1%,reorder=1%,corrupt=0.1%,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3")
	run := func(seed uint64) string {
		m := New(spec, seed)
		h := uint64(0)
		for i := 0; i < 20000; i++ {
			d := m.Decide(1000)
			h = h*31 + uint64(len(d.Copies))
			for _, c := range d.Copies {
				h = h*31 + uint64(c.Delay)
				for _, b := range c.FlipBits {
					h = h*31 + uint64(b)
				}
			}
		}
		return fmt.Sprintf("%x %+v", h, m.Stats())
	}
	assert.Equal(t, run(7), run(7))
	assert.NotEqual(t, run(7), run(8))
}

// Turning on duplication must not change which frames are lost.
func TestComponentsIndependent(t *testing.T) {
	a := New(mustParse(t, "loss=10%"), 5)
	b := New(mustParse(t, "loss=10%,dup=30%,jitter=1ms,reorder=10%,corrupt=5%"), 5)
	for i := 0; i < 10000; i++ {
		require.Equal(t, a.Decide(100).Drop, b.Decide(100).Drop, "frame %d", i)
	}
}

func TestStreams(t *testing.T) {
	a, b, a2 := Stream(1, "a"), Stream(1, "b"), Stream(1, "a")
	same := 0
	for i := 0; i < 1000; i++ {
		x, y, z := a.Uint64(), b.Uint64(), a2.Uint64()
		require.Equal(t, x, z)
		if x == y {
			same++
		}
	}
	assert.Zero(t, same)
	r := NewRand(3)
	for i := 0; i < 10000; i++ {
		v := r.IntN(7)
		require.True(t, v >= 0 && v < 7)
		f := r.Float64()
		require.True(t, f >= 0 && f < 1)
	}
	hits := 0
	for i := 0; i < statFrames; i++ {
		if r.Chance(Percent(25)) {
			hits++
		}
	}
	assert.InDelta(t, 0.25, float64(hits)/statFrames, 0.01)
	assert.True(t, r.Chance(One))
	assert.False(t, r.Chance(0))
	c1, c2 := NewRand(9).Stream("x"), NewRand(9).Stream("x")
	assert.Equal(t, c1.Uint64(), c2.Uint64())
}

func TestDecideDoesNotAllocate(t *testing.T) {
	m := New(mustParse(t, "loss=2%,dup=10%,reorder=1%,corrupt=10%,bits=3,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3"), 1)
	allocs := testing.AllocsPerRun(1000, func() { m.Decide(4096) })
	assert.Zero(t, allocs)
}

func BenchmarkDecide(b *testing.B) {
	m := New(mustParse(b, "loss=2%,dup=1%,reorder=1%,corrupt=0.1%,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3"), 1)
	for b.Loop() {
		m.Decide(4096)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("loss=2%,dup=1%,reorder=1%,corrupt=0.1%,delay=100us,jitter=50us,burst=gilbert:p=0.01:r=0.3,seed=7")
	f.Add("burst=gilbert:p=1%:r=30%:bad=0.5:good=0.001,bits=3")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			return
		}
		s2, err := Parse(s.String())
		require.NoError(t, err, "canonical form %q", s.String())
		require.Equal(t, s, s2)
		m := New(s, 1)
		for i := 0; i < 10; i++ {
			m.Decide(i)
		}
	})
}
