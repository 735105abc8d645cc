package bytepool

import "sync"

// Pool holds byte slices by length, at most Keep bytes in all. The zero
// Pool keeps nothing.
type Pool struct {
	Keep int // bytes kept at most; what would go past it is dropped

	mu    sync.Mutex
	free  map[int][][]byte
	bytes int
}

// Get returns n zeroed bytes: a slice put back with that length, cleared,
// or a new one.
func (p *Pool) Get(n int) []byte {
	b, reused := p.take(n)
	if reused {
		clear(b)
	}
	return b
}

// Take returns n bytes as Get does but, when they were put back (reused),
// with what they held: for a caller that overwrites every byte before it
// reads one, or clears only the parts it needs zeroed, so that what a job
// sees never depends on the job before it. New bytes are zero.
func (p *Pool) Take(n int) (b []byte, reused bool) { return p.take(n) }

func (p *Pool) take(n int) (b []byte, reused bool) {
	p.mu.Lock()
	if l := p.free[n]; len(l) > 0 {
		b = l[len(l)-1]
		l[len(l)-1] = nil
		p.free[n] = l[:len(l)-1]
		p.bytes -= n
	}
	p.mu.Unlock()
	if b == nil {
		return make([]byte, n), false
	}
	return b, true
}

// Put gives b back for a later Get of its length. The caller must not use
// b afterwards.
func (p *Pool) Put(b []byte) {
	n := len(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n == 0 || p.bytes+n > p.Keep {
		return
	}
	if p.free == nil {
		p.free = map[int][][]byte{}
	}
	p.free[n] = append(p.free[n], b[:n:n])
	p.bytes += n
}

// Each calls f on every slice the pool holds, under its lock (a test fills
// them with bytes no job writes, to show that no job reads what another
// left).
func (p *Pool) Each(f func(b []byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.free {
		for _, b := range l {
			f(b)
		}
	}
}

// Drain drops every slice the pool holds, for the garbage collector to
// take: what a job of another shape would otherwise inherit.
func (p *Pool) Drain() {
	p.mu.Lock()
	p.free, p.bytes = nil, 0
	p.mu.Unlock()
}
