package sim

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// sortedPercentiles is percentiles by sorting, as it was computed before it
// selected.
func sortedPercentiles(s []int64) Latency {
	s = slices.Clone(s)
	slices.Sort(s)
	at := func(p float64) int64 { return s[int(p*float64(len(s)-1)+0.5)] }
	var sum int64
	for _, v := range s {
		sum += v
	}
	return Latency{Count: len(s), Min: s[0], P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999),
		Max: s[len(s)-1], Mean: sum / int64(len(s))}
}

// TestPercentilesSelectAsSorting: selecting gives what sorting gave, for
// sample sets of every shape a run makes (one sample, all equal, a few
// values, sorted either way, random, long tails).
func TestPercentilesSelectAsSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func(n int) []int64{
		"random": func(n int) []int64 {
			s := make([]int64, n)
			for i := range s {
				s[i] = rng.Int64N(1e6)
			}
			return s
		},
		"equal": func(n int) []int64 { return slices.Repeat([]int64{4200}, n) },
		"few values": func(n int) []int64 {
			s := make([]int64, n)
			for i := range s {
				s[i] = int64(rng.IntN(3)) * 1000
			}
			return s
		},
		"ascending": func(n int) []int64 {
			s := make([]int64, n)
			for i := range s {
				s[i] = int64(i)
			}
			return s
		},
		"descending": func(n int) []int64 {
			s := make([]int64, n)
			for i := range s {
				s[i] = int64(n - i)
			}
			return s
		},
		"long tail": func(n int) []int64 {
			s := make([]int64, n)
			for i := range s {
				s[i] = 1000 + int64(rng.ExpFloat64()*float64(rng.IntN(3)+1)*1e4)
			}
			return s
		},
	}
	for name, gen := range shapes {
		for _, n := range []int{1, 2, 3, 16, 17, 100, 999, 1000, 1001, 5000, 20000} {
			s := gen(n)
			want := sortedPercentiles(s)
			require.Equal(t, want, percentiles(s), "%s, %d samples", name, n)
		}
	}
	require.Equal(t, Latency{}, percentiles(nil))
}
