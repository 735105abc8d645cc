package qp

import "sync"

// Spares holds QPs that are done with, for New to build later QPs in their
// memory instead of allocating: a simulation that runs seed after seed in
// one process creates and drops a thousand QPs a run, and their allocation
// set its garbage collector's pace. A QP built from a spare starts exactly
// as a new one does: its struct and its queues' slots are cleared. Safe for
// concurrent use; the zero Spares keeps nothing.
type Spares struct {
	Keep int // QPs held at most; what would go past it is dropped

	mu   sync.Mutex
	free []*QP
}

// Put gives q back for a later New. Nothing may use q afterwards: its
// owner drops it whole, as a device does when it is discarded.
func (s *Spares) Put(q *QP) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) < s.Keep {
		s.free = append(s.free, q)
	}
}

// take returns a spare QP, or nil when there is none.
func (s *Spares) take() *QP {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.free)
	if n == 0 {
		return nil
	}
	q := s.free[n-1]
	s.free[n-1] = nil
	s.free = s.free[:n-1]
	return q
}

// storage is what a QP allocates at creation beyond its struct: its send
// queue's WQEs with their SGL and inline blocks, and its receive queue's
// WQEs with their SGE block. A QP built from a spare takes them over where
// they are large enough.
type storage struct {
	ring   []sendWQE
	sgl    []SGE
	inline []byte
	rwqes  []recvWQE
	rsges  []SGE
}

// storage returns q's creation-time slices, for a QP built from q.
func (q *QP) storage() storage {
	return storage{ring: q.sq.ring, sgl: q.sq.sgl, inline: q.sq.inline, rwqes: q.rq.ring.wqes, rsges: q.rq.ring.sges}
}

// reuse returns n cleared elements of *old, as make would give them, or new
// ones when *old holds fewer; *old is used once.
func reuse[T any](old *[]T, n int) []T {
	s := *old
	*old = nil
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
