package sim

// refModel is the reference model of a flow's responder memory: what the
// remote region must hold after the flow's WRITEs and atomics, in the order
// they were posted. A WRITE's bytes are a message pattern (fillPattern), so
// the model need not copy them as they are posted: it notes each WRITE and
// writes the patterns only when its bytes are read (by a READ's or an
// atomic's expectation, or the final comparison), newest first and only
// where no newer WRITE lands, so that a long run of large WRITEs to a small
// region costs the model about one region's worth of bytes instead of a
// copy per message.
type refModel struct {
	b       []byte
	id      uint32      // the flow, for the patterns
	pending []noteWrite // WRITEs not yet in b, oldest first
	s       *modelScratch
}

// modelScratch is the scratch space of a run's models, which one goroutine
// uses one model at a time: a run of 1,000 QPs would otherwise carry 1,000
// copies of it.
type modelScratch struct {
	covered []span // what newer pending WRITEs cover
	period  []byte // a message's header and first pattern period (made when first needed)
}

// noteWrite is a WRITE of message seq's size bytes at off.
type noteWrite struct {
	off  int
	size int
	seq  uint32
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
	m := &refModel{b: b, id: id, s: s}
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

// bytes returns the model's bytes with every WRITE noted so far in them.
// The caller may change them (an atomic), until the next write.
func (m *refModel) bytes() []byte {
	if len(m.pending) == 0 {
		return m.b
	}
	cov := m.s.covered[:0]
	for i := len(m.pending) - 1; i >= 0; i-- {
		w := m.pending[i]
		lo, hi := w.off, w.off+w.size
		pos := lo
		for _, c := range cov { // sorted, disjoint
			if c.hi <= pos {
				continue
			}
			if c.lo >= hi {
				break
			}
			if c.lo > pos {
				m.fill(m.b[pos:c.lo], w, pos-lo)
			}
			pos = c.hi
			if pos >= hi {
				break
			}
		}
		if pos < hi {
			m.fill(m.b[pos:hi], w, pos-lo)
		}
		cov = addSpan(cov, span{lo, hi})
		if len(cov) == 1 && cov[0].lo == 0 && cov[0].hi == len(m.b) {
			break // older WRITEs are all overwritten
		}
	}
	m.s.covered, m.pending = cov[:0], m.pending[:0]
	return m.b
}

// fill writes bytes [from, from+len(dst)) of w's message to dst.
func (m *refModel) fill(dst []byte, w noteWrite, from int) {
	if m.s.period == nil {
		m.s.period = make([]byte, 8+patternPeriod)
	}
	p := m.s.period[:min(w.size, len(m.s.period))]
	fillPattern(p, m.id, w.seq)
	if len(p) == w.size { // the whole message (a short one has no header)
		copy(dst, p[from:])
		return
	}
	for len(dst) > 0 {
		k := from
		if from >= 8 {
			k = 8 + (from-8)%patternPeriod // the pattern repeats past byte 8
		}
		n := copy(dst, p[k:])
		dst, from = dst[n:], from+n
	}
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
