package fault

import (
	"math/bits"
	"math/rand/v2"
)

// Rand is a deterministic pseudo-random generator. The zero value is not
// ready: make one with NewRand or Stream. It is not safe for concurrent use.
type Rand struct {
	pcg rand.PCG
}

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) *Rand {
	r := &Rand{}
	r.reseed(seed)
	return r
}

// Stream returns a generator for the component called name, independent of
// the streams of other names derived from the same seed.
func Stream(seed uint64, name string) *Rand {
	return NewRand(seed ^ hashName(name))
}

// Stream derives a child generator for name from r's next output, so that a
// component seeded from r can hand out streams to its parts.
func (r *Rand) Stream(name string) *Rand { return Stream(r.Uint64(), name) }

func (r *Rand) reseed(seed uint64) {
	a := splitmix64(&seed)
	b := splitmix64(&seed)
	r.pcg.Seed(a, b)
}

// splitmix64 advances *x and returns a well-mixed output; it spreads nearby
// seeds (0, 1, 2...) over the whole state space of PCG.
func splitmix64(x *uint64) uint64 {
	*x += 0x9E3779B97F4A7C15
	z := *x
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// hashName is 64-bit FNV-1a followed by a splitmix finaliser.
func hashName(name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	return splitmix64(&h)
}

// Uint64 returns 64 random bits.
func (r *Rand) Uint64() uint64 { return r.pcg.Uint64() }

// Uint64N returns a uniform value in [0, n); n must be > 0. It uses
// Lemire's multiply-and-reject method, so the result is unbiased.
func (r *Rand) Uint64N(n uint64) uint64 {
	if n == 0 {
		panic("fault: Uint64N(0)")
	}
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// IntN returns a uniform value in [0, n); n must be > 0.
func (r *Rand) IntN(n int) int {
	if n <= 0 {
		panic("fault: IntN of a non-positive bound")
	}
	return int(r.Uint64N(uint64(n)))
}

// Float64 returns a uniform value in [0, 1).
func (r *Rand) Float64() float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// Chance reports true with probability p, using one draw.
func (r *Rand) Chance(p Prob) bool {
	switch {
	case p == 0:
		r.Uint64() // keep the stream's position independent of p
		return false
	case p >= One:
		r.Uint64()
		return true
	}
	return r.Uint64() < p.threshold()
}
