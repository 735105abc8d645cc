package fault

import "time"

// Copy is what happens to one delivered copy of a frame.
type Copy struct {
	// Delay is how long the copy takes beyond a perfect link.
	Delay time.Duration
	// Reordered is set when Delay includes the reorder extra delay.
	Reordered bool
	// FlipBits are the bit positions to invert, counted from the start of
	// the range passed to Decide (bit 0 is the most significant bit of the
	// first byte); nil when the copy is intact.
	FlipBits []int
}

// Decision is what happens to one frame. Its slices point into the Model
// and stay valid until the next Decide.
type Decision struct {
	// Drop is set when the frame is lost; Copies is then empty.
	Drop bool
	// Burst is set when the loss came from the Gilbert-Elliott channel.
	Burst bool
	// Copies holds one entry, or two when the frame is duplicated.
	Copies []Copy
}

// Stats counts a Model's decisions.
type Stats struct {
	Frames     uint64 // frames decided
	Lost       uint64 // frames dropped by independent loss
	BurstLost  uint64 // frames dropped by the burst channel
	Duplicated uint64 // frames delivered twice
	Reordered  uint64 // copies given the reorder delay
	Corrupted  uint64 // copies with flipped bits
}

// Model applies a Spec to a sequence of frames. It is deterministic: the
// same Spec, seed and sequence of Decide calls give the same decisions. It is
// not safe for concurrent use.
type Model struct {
	spec Spec

	lossTh, dupTh, reorderTh, corruptTh uint64
	pTh, rTh, badTh, goodTh             uint64
	always                              [8]bool // probability One for the fields above, in that order
	bits                                int
	reorderDelay                        time.Duration

	loss, burst, dup, delay, reorder, corrupt *Rand

	bad   bool // Gilbert-Elliott state
	stats Stats

	copies [2]Copy
	flips  [2][MaxFlipBits]int
}

// New returns a Model for s, drawing from streams derived from seed (s.Seed
// is not consulted: pass it when the spec should decide).
func New(s Spec, seed uint64) *Model {
	m := &Model{spec: s}
	probs := [8]Prob{s.Loss, s.Dup, s.Reorder, s.Corrupt, s.Burst.P, s.Burst.R, s.Burst.Bad, s.Burst.Good}
	ths := [8]*uint64{&m.lossTh, &m.dupTh, &m.reorderTh, &m.corruptTh, &m.pTh, &m.rTh, &m.badTh, &m.goodTh}
	for i, p := range probs {
		if p >= One {
			m.always[i] = true
		} else {
			*ths[i] = p.threshold()
		}
	}
	m.bits = max(1, min(s.Bits, MaxFlipBits))
	m.reorderDelay = s.ReorderDelay
	if m.reorderDelay <= 0 {
		m.reorderDelay = DefaultReorderDelay
	}
	m.loss = Stream(seed, "loss")
	m.burst = Stream(seed, "burst")
	m.dup = Stream(seed, "dup")
	m.delay = Stream(seed, "delay")
	m.reorder = Stream(seed, "reorder")
	m.corrupt = Stream(seed, "corrupt")
	return m
}

// Spec returns the spec the model applies.
func (m *Model) Spec() Spec { return m.spec }

// Stats returns the counts of decisions so far.
func (m *Model) Stats() Stats { return m.stats }

func (m *Model) chance(r *Rand, i int, th uint64) bool {
	v := r.Uint64()
	return m.always[i] || v < th
}

// Decide returns the fate of the next frame. n is the length in bytes of
// the part of the frame that corruption may touch (for RoCE, the transport
// headers, payload and ICRC, so that the receiver's ICRC check sees it);
// with n <= 0 nothing is corrupted. Decide does not allocate.
func (m *Model) Decide(n int) Decision {
	m.stats.Frames++
	// One draw each for loss, the burst channel and dup on every frame,
	// whatever happens, so each component's decisions do not depend on the
	// others' settings.
	lost := m.chance(m.loss, 0, m.lossTh)
	burstLost := false
	if m.spec.Burst.Enabled() {
		var lossIn bool
		if m.bad {
			lossIn = m.chance(m.burst, 6, m.badTh)
		} else {
			lossIn = m.chance(m.burst, 7, m.goodTh)
		}
		burstLost = lossIn
		// Step the channel after the frame: the first frame of a run is
		// sent in the state the previous transition left.
		if m.bad {
			m.bad = !m.chance(m.burst, 5, m.rTh)
		} else {
			m.bad = m.chance(m.burst, 4, m.pTh)
		}
	}
	dup := m.chance(m.dup, 1, m.dupTh)
	if lost || burstLost {
		if lost {
			m.stats.Lost++
		} else {
			m.stats.BurstLost++
		}
		return Decision{Drop: true, Burst: !lost}
	}
	nc := 1
	if dup {
		nc = 2
		m.stats.Duplicated++
	}
	for i := 0; i < nc; i++ {
		m.copies[i] = m.decideCopy(i, n)
	}
	return Decision{Copies: m.copies[:nc]}
}

func (m *Model) decideCopy(i, n int) Copy {
	var c Copy
	d := m.spec.Delay
	if j := m.spec.Jitter; j > 0 {
		d += time.Duration(m.delay.Uint64N(2*uint64(j)+1)) - j
		d = max(d, 0)
	}
	if m.spec.Reorder > 0 && m.chance(m.reorder, 2, m.reorderTh) {
		d += 1 + time.Duration(m.reorder.Uint64N(uint64(m.reorderDelay)))
		c.Reordered = true
		m.stats.Reordered++
	}
	c.Delay = d
	if m.spec.Corrupt > 0 && m.chance(m.corrupt, 3, m.corruptTh) && n > 0 {
		nbits := uint64(n) * 8
		k := 1
		if m.bits > 1 {
			k += m.corrupt.IntN(m.bits)
		}
		k = min(k, int(nbits))
		f := m.flips[i][:0]
		for len(f) < k {
			b := int(m.corrupt.Uint64N(nbits))
			if !contains(f, b) {
				f = append(f, b)
			}
		}
		c.FlipBits = f
		m.stats.Corrupted++
	}
	return c
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// FlipBits inverts the given bit positions of b (as in Copy.FlipBits).
// Positions past the end of b are ignored.
func FlipBits(b []byte, bitPos []int) {
	for _, p := range bitPos {
		if p >= 0 && p/8 < len(b) {
			b[p/8] ^= 0x80 >> (p % 8)
		}
	}
}
