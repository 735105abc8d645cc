package netsim

import (
	"fmt"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
)

// RED is a queue's ECN marking, the congestion point of DCQCN: a frame that
// finds q bytes queued ahead of it is marked CE with probability 0 up to
// Kmin, rising linearly to Pmax at Kmax, and 1 above Kmax. Only
// ECN-capable frames are marked; others pass unmarked (this queue never
// drops early). The decision is made as the frame joins the queue, as most
// switch ASICs do; HPCC's ns-3 model decides at dequeue.
type RED struct {
	Kmin, Kmax int     // bytes
	Pmax       float64 // 0..1
}

// Check reports a RED that cannot be run.
func (r RED) Check() error {
	if r.Kmin < 0 || r.Kmax <= 0 || r.Kmin > r.Kmax || r.Pmax < 0 || r.Pmax > 1 {
		return fmt.Errorf("ecn marking kmin %d kmax %d pmax %g: want 0 <= kmin <= kmax, kmax > 0, 0 <= pmax <= 1",
			r.Kmin, r.Kmax, r.Pmax)
	}
	return nil
}

// SetECN installs RED marking on the pipe's queue, drawing from rng (a
// stream of its own, so that marking does not perturb other draws); a zero
// RED removes it.
func (p *Pipe) SetECN(r RED, rng *fault.Rand) error {
	if r == (RED{}) {
		p.red, p.redRNG = RED{}, nil
		return nil
	}
	if err := r.Check(); err != nil {
		return fmt.Errorf("pipe %s: %w", p.name, err)
	}
	p.red, p.redRNG = r, rng
	return nil
}

// ECN returns the pipe's RED marking (zero: none).
func (p *Pipe) ECN() RED { return p.red }

// redMarks decides whether the frame joining the queue now, behind
// p.queueBytes, is to be marked. The probability is compared in 32-bit
// fixed point, so runs are identical on every machine.
func (p *Pipe) redMarks() bool {
	r := &p.red
	if r.Kmax == 0 {
		return false
	}
	q := p.queueBytes
	switch {
	case q <= r.Kmin:
		return false
	case q > r.Kmax:
		return true
	}
	pmax := uint64(r.Pmax * (1 << 32))
	prob := pmax * uint64(q-r.Kmin) / uint64(max(r.Kmax-r.Kmin, 1))
	return uint64(p.redRNG.Uint64()>>32) < prob
}

// markCE marks buf CE if it is ECN-capable, and counts it.
func (p *Pipe) markCE(buf []byte) bool {
	if !packet.MarkCE(buf) {
		return false
	}
	p.counters.ECNMarked++
	return true
}
