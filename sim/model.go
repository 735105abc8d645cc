package sim

// refModel is the reference model of a flow's responder memory: what the
// remote region must hold after the flow's WRITEs and atomics, in the order
// they were posted. A WRITE's bytes are a message pattern (fillPattern), so
// the model need not copy them as they are posted: it notes each WRITE and
// writes the patterns only where an atomic reads and changes bytes, and
// only those bytes, newest first and only where no newer WRITE lands, so
// that a long run of large WRITEs to a small region costs the model about
// one region's worth of bytes instead of a copy per message. A READ's
// expectation is made from the notes without writing them, and the final
// comparison compares the region with the patterns themselves: a run of a
// thousand QPs no longer writes a model's worth of bytes per flow to read
// them once.
type refModel struct {
	b       []byte
	id      uint32      // the flow, for the patterns
	pending []noteWrite // notes not yet in b, oldest first
	s       *modelScratch
}

// modelScratch is the scratch space of a run's models, which one goroutine
// uses one model at a time: a run of 1,000 QPs would otherwise carry 1,000
// copies of it.
type modelScratch struct {
	covered []span // what newer pending WRITEs cover
	period  []byte // a message's header and first pattern period (made when first needed)
	direct  [directMax]byte

	// The message whose bytes period holds (none while periodLen is 0: a
	// note is never empty): a walk meets one note in several pieces, and
	// READs of a region never written meet the same note each time.
	periodID, periodSeq uint32
	periodLen           int
}

// noteWrite is a WRITE of message seq's size bytes at off, or, inPlace,
// a note that the model's own bytes there are what it holds (written when
// part of it was read, or changed by an atomic since).
type noteWrite struct {
	off     int
	size    int
	seq     uint32
	inPlace bool
}

// span is the byte range [lo, hi).
type span struct{ lo, hi int }

// initialSeq is the message number of a remote region's first content: the
// pattern it is filled with before the flow starts.
const initialSeq = 0xFFFFFFFF

// newRefModel returns the model of flow id's remote region, which starts
// as the pattern of message initialSeq over the whole region. The model
// keeps its bytes in b, which may hold anything: the initial pattern is
// noted as the oldest WRITE, so it is written only where no later WRITE
// covers it, when the model is first read (copying it whole at setup was
// 8 MiB per flow in incast-dcqcn-pfc, most of it overwritten before any
// read).
func newRefModel(id uint32, s *modelScratch, b []byte) *refModel {
	// Room for a few notes at once: the notes of a short flow grew one
	// allocation at a time.
	m := &refModel{b: b, id: id, s: s, pending: make([]noteWrite, 0, 8)}
	m.write(0, len(b), initialSeq)
	return m
}

// len returns the region's size.
func (m *refModel) len() int { return len(m.b) }

// write notes a WRITE of message seq (size bytes) at off.
func (m *refModel) write(off, size int, seq uint32) {
	if size > 0 {
		m.pending = append(m.pending, noteWrite{off: off, size: size, seq: seq})
	}
}

// maxPending is how many notes a model keeps before a read of part of it
// writes them all into its bytes: a read of a few bytes walks the notes
// newest first, so the notes are kept few.
const maxPending = 64

// bytes returns the model's bytes with every WRITE noted so far in them.
// The caller may change them (an atomic), until the next write.
func (m *refModel) bytes() []byte {
	if len(m.pending) > 0 {
		m.walk(0, len(m.b), m.fillPiece)
		m.pending = m.pending[:0]
	}
	return m.b
}

// span returns the model's bytes [lo, hi) with every WRITE noted so far in
// them, writing only those bytes (an atomic's eight where the first read
// wrote the whole region). The caller may change them (the atomic), until
// the next write.
func (m *refModel) span(lo, hi int) []byte {
	switch {
	case len(m.pending) == 0:
	case len(m.pending) >= maxPending || (lo == 0 && hi == len(m.b)):
		m.bytes()
	case lo < hi:
		m.walk(lo, hi, m.fillPiece)
		// m.b[lo:hi] is now what the model holds there: a note says so,
		// so that older notes are not written over it later.
		m.pending = append(m.pending, noteWrite{off: lo, size: hi - lo, inPlace: true})
	}
	return m.b[lo:hi]
}

// read copies the model's bytes [lo, lo+len(dst)) to dst (a READ's
// expectation) without writing them into the model: made from the notes
// where they land, from the model's bytes elsewhere.
func (m *refModel) read(dst []byte, lo int) {
	if len(m.pending) >= maxPending {
		m.bytes()
	}
	if len(m.pending) == 0 || len(dst) == 0 {
		copy(dst, m.b[lo:])
		return
	}
	m.walk(lo, lo+len(dst), func(p, q int, w noteWrite) {
		if w.inPlace {
			copy(dst[p-lo:q-lo], m.b[p:q])
		} else {
			m.fill(dst[p-lo:q-lo], w, p-w.off)
		}
	})
}

// matches reports whether got holds the model's bytes. It compares got
// with each note's pattern where that note is the newest, without writing
// the model's bytes.
func (m *refModel) matches(got []byte) bool {
	if len(got) != len(m.b) {
		return false
	}
	ok := true
	m.walk(0, len(m.b), func(lo, hi int, w noteWrite) {
		if !ok {
			return
		}
		if w.inPlace {
			ok = string(got[lo:hi]) == string(m.b[lo:hi])
			return
		}
		ok = m.equal(got[lo:hi], w, lo-w.off)
	})
	return ok
}

// walk calls do for each piece [lo, hi) of the range [from, to) with the
// note that is newest there, newest notes first, then for the pieces no
// note covers (with an inPlace note: the model's bytes hold them).
func (m *refModel) walk(from, to int, do func(lo, hi int, w noteWrite)) {
	cov := m.s.covered[:0]
	for i := len(m.pending) - 1; i >= 0; i-- {
		w := m.pending[i]
		lo, hi := max(w.off, from), min(w.off+w.size, to)
		if lo >= hi {
			continue
		}
		pos := lo
		for _, c := range cov { // sorted, disjoint
			if c.hi <= pos {
				continue
			}
			if c.lo >= hi {
				break
			}
			if c.lo > pos {
				do(pos, c.lo, w)
			}
			pos = c.hi
			if pos >= hi {
				break
			}
		}
		if pos < hi {
			do(pos, hi, w)
		}
		cov = addSpan(cov, span{lo, hi})
		if len(cov) == 1 && cov[0].lo == from && cov[0].hi == to {
			m.s.covered = cov[:0]
			return // older notes are all overwritten here
		}
	}
	// Where no note lands, the model's bytes are what it holds.
	pos := from
	for _, c := range cov {
		if c.lo > pos {
			do(pos, c.lo, noteWrite{off: pos, size: c.lo - pos, inPlace: true})
		}
		pos = c.hi
	}
	if pos < to {
		do(pos, to, noteWrite{off: pos, size: to - pos, inPlace: true})
	}
	m.s.covered = cov[:0]
}

// fillPiece writes w's bytes [lo, hi) of the region into the model's.
func (m *refModel) fillPiece(lo, hi int, w noteWrite) {
	if !w.inPlace {
		m.fill(m.b[lo:hi], w, lo-w.off)
	}
}

// directMax is the longest piece of a message made word by word where it
// goes rather than copied from the message's first period. Making the
// period costs a period's worth of words, and one piece after another
// belongs to a different message, so a short piece is cheaper made in
// place, a long one copied. (In scale's instruction and cache-miss counts
// under cachegrind, 64 to 512 bytes measured alike; a whole period cost
// 0.5% more.)
const directMax = patternPeriod / 4

// fill writes bytes [from, from+len(dst)) of w's message to dst.
func (m *refModel) fill(dst []byte, w noteWrite, from int) {
	if len(dst) <= directMax {
		patternRange(dst, m.id, w.seq, w.size, from)
		return
	}
	m.pattern(dst, w, from, func(d, p []byte) bool { copy(d, p); return true })
}

// equal reports whether b holds bytes [from, from+len(b)) of w's message.
func (m *refModel) equal(b []byte, w noteWrite, from int) bool {
	if len(b) <= directMax {
		p := m.s.direct[:len(b)]
		patternRange(p, m.id, w.seq, w.size, from)
		return string(b) == string(p)
	}
	return m.pattern(b, w, from, func(g, p []byte) bool { return string(g) == string(p) })
}

// pattern calls do with each stretch of b and the bytes [from,
// from+len(b)) of w's message that belong there, in order, until do
// returns false, and reports whether none did. The message's first bytes
// are made once per message in the shared scratch; past them the pattern
// repeats.
func (m *refModel) pattern(b []byte, w noteWrite, from int, do func(b, p []byte) bool) bool {
	p := m.period(w)
	if len(p) == w.size { // the whole message (a short one has no header)
		return do(b, p[from:from+len(b)])
	}
	for len(b) > 0 {
		k := from
		if from >= 8 {
			k = 8 + (from-8)%patternPeriod // the pattern repeats past byte 8
		}
		n := min(len(b), len(p)-k)
		if !do(b[:n], p[k:k+n]) {
			return false
		}
		b, from = b[n:], from+n
	}
	return true
}

// period returns w's message's first bytes up to one pattern period past
// its header, made in the scratch unless they are there from the last call.
func (m *refModel) period(w noteWrite) []byte {
	s := m.s
	if s.period == nil {
		s.period = make([]byte, 8+patternPeriod)
	}
	n := min(w.size, len(s.period))
	if s.periodLen != n || s.periodID != m.id || s.periodSeq != w.seq {
		fillPattern(s.period[:n], m.id, w.seq)
		s.periodID, s.periodSeq, s.periodLen = m.id, w.seq, n
	}
	return s.period[:n]
}

// addSpan adds s to the sorted, disjoint spans cov, merging what touches it.
func addSpan(cov []span, s span) []span {
	i := 0
	for i < len(cov) && cov[i].hi < s.lo {
		i++
	}
	j := i
	for j < len(cov) && cov[j].lo <= s.hi {
		s.lo, s.hi = min(s.lo, cov[j].lo), max(s.hi, cov[j].hi)
		j++
	}
	if i == j {
		cov = append(cov, span{})
		copy(cov[i+1:], cov[i:])
		cov[i] = s
		return cov
	}
	cov[i] = s
	return append(cov[:i+1], cov[j:]...)
}
