package replay

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// memory registers the regions the peer's requests address, filled with
// what the host's read responses and atomic ACKs say they held, and posts
// receives for the peer's SENDs and WRITEs with immediate data.
func (s *session) memory() error {
	if s.flow.Type == qp.UD {
		for _, c := range s.fromPeer {
			if c.Pkt.BTH.DestQP == s.host.QPN {
				s.recvBufs = append(s.recvBufs, make([]byte, 40+len(c.Pkt.Payload)))
				s.recvFor = append(s.recvFor, c)
			}
		}
		return s.postRecvs()
	}
	var wrapErr error
	regionOf := func(rkey uint32, va, n uint64) {
		if va+n < va {
			wrapErr = fmt.Errorf("rkey %#x: %d bytes at %#x wrap the address space", rkey, n, va)
			return
		}
		r := s.regions[rkey]
		if r == nil {
			r = &region{rkey: rkey, lo: va, hi: va + n}
			s.regions[rkey] = r
		}
		r.lo, r.hi = min(r.lo, va), max(r.hi, va+n)
	}
	for _, m := range s.peerMsgs {
		p := &m.first.Pkt
		switch m.kind {
		case packet.KindSend:
			s.recvBufs = append(s.recvBufs, make([]byte, max(len(m.payload), 1)))
		case packet.KindWrite, packet.KindReadRequest:
			regionOf(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length))
		case packet.KindCompareSwap, packet.KindFetchAdd:
			regionOf(p.AtomicETH.RKey, p.AtomicETH.VA, 8)
		}
		if m.kind == packet.KindWrite && m.last.Pkt.Info().Is(packet.HdrImmDt) {
			s.recvBufs = append(s.recvBufs, make([]byte, 1))
		}
	}
	if wrapErr != nil {
		return wrapErr
	}
	if n := s.hostRNRs(); n > 0 {
		// The host's receive queue ran empty (it answered RNR NAKs):
		// receives are posted as the capture shows them taken (walk).
		s.lazyRecv = true
		s.note(fmt.Sprintf("receive queue: the host answered %d RNR NAKs, so each receive is posted when the capture shows it taken", n))
	}
	for _, r := range s.regions {
		if r.hi-r.lo > maxRebuild {
			return fmt.Errorf("rkey %#x: the peer addresses %d bytes, too many to rebuild", r.rkey, r.hi-r.lo)
		}
		r.init = make([]byte, max(r.hi-r.lo, 1))
	}
	seenAtomic := map[uint64]bool{}
	type rkeyByte struct {
		rkey uint32
		off  uint64
	}
	filled := map[rkeyByte]bool{}
	for _, m := range s.peerMsgs {
		p := &m.first.Pkt
		switch m.kind {
		case packet.KindReadRequest:
			r := s.regions[p.RETH.RKey]
			for _, c := range s.fromHost {
				if c.Pkt.Info().Kind == packet.KindReadResponse && readResponds(m, c.Pkt.BTH.PSN, s.mtu) {
					off := p.RETH.VA - r.lo + uint64((c.Pkt.BTH.PSN-p.BTH.PSN)&0xFFFFFF)*uint64(s.mtu)
					for i, b := range c.Pkt.Payload {
						// The first response that shows a byte gives its
						// initial value; later changes are the
						// application's (beforeFeed).
						if j := off + uint64(i); j < uint64(len(r.init)) && !filled[rkeyByte{r.rkey, j}] {
							r.init[j] = b
							filled[rkeyByte{r.rkey, j}] = true
						}
					}
				}
			}
		case packet.KindCompareSwap, packet.KindFetchAdd:
			r := s.regions[p.AtomicETH.RKey]
			if seenAtomic[p.AtomicETH.VA] {
				continue
			}
			seenAtomic[p.AtomicETH.VA] = true
			for _, c := range s.fromHost {
				if c.Pkt.Info().Kind == packet.KindAtomicAck && c.Pkt.BTH.PSN == p.BTH.PSN {
					binary.LittleEndian.PutUint64(r.init[p.AtomicETH.VA-r.lo:], c.Pkt.AtomicAck)
					break
				}
			}
		}
	}
	for _, k := range s.regionKeys() {
		r := s.regions[k]
		var err error
		r.mr, err = s.d.RegMRKey(s.pd, append([]byte(nil), r.init...), r.lo, r.rkey, memAll)
		if err != nil {
			return err
		}
		r.expected = append([]byte(nil), r.init...)
		r.touched = make([]bool, len(r.init))
	}
	if s.lazyRecv {
		return nil
	}
	return s.postRecvs()
}

func (s *session) regionKeys() []uint32 {
	keys := make([]uint32, 0, len(s.regions))
	for k := range s.regions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

func (s *session) postRecvs() error {
	for range s.recvBufs {
		if err := s.postRecv(); err != nil {
			return err
		}
	}
	return nil
}

// postRecv posts the next receive buffer.
func (s *session) postRecv() error {
	i := s.recvPosted
	if i >= len(s.recvBufs) {
		return fmt.Errorf("the peer's message needs receive %d, the capture shows %d", i+1, len(s.recvBufs))
	}
	b := s.recvBufs[i]
	m, err := s.d.RegMR(s.pd, b, qp.AccessLocalWrite)
	if err != nil {
		return err
	}
	wr := qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: m.Addr(), Length: uint32(len(b)), LKey: m.LKey()}}}
	if err := s.x.PostRecv(&wr); err != nil {
		return fmt.Errorf("post receive %d: %w", i, err)
	}
	s.recvPosted++
	return nil
}

// hostRNRs counts the RNR NAKs the host answered.
func (s *session) hostRNRs() int {
	n := 0
	for _, c := range s.fromHost {
		if p := &c.Pkt; p.Info().Is(packet.HdrAETH) && p.AETH.Syndrome.IsRNR() {
			n++
		}
	}
	return n
}

// acceptedAt reports whether the host took the peer's frame i of the
// flow, so that a receive must be there for it: the host's first
// acknowledgement at or after the frame's PSN acknowledges it (an RNR NAK
// or a NAK there means the queue was empty or the frame out of sequence),
// and the peer does not send the PSN again before that answer (a frame the
// host dropped silently, behind an earlier NAK, gets none). With no answer
// in the capture the frame counts as taken.
func (s *session) acceptedAt(i int) bool {
	psn := s.flow.Frames[i].Pkt.BTH.PSN
	for _, a := range s.flow.Frames[i+1:] {
		if a.Src == s.peer.Addr {
			if !isResponse(&a.Pkt) && a.Pkt.BTH.PSN == psn {
				return false
			}
			continue
		}
		if p := &a.Pkt; p.Info().Is(packet.HdrAETH) && packet.PSNDiff(p.BTH.PSN, psn) >= 0 {
			return p.AETH.Syndrome.IsACK() || p.BTH.PSN != psn
		}
	}
	return true
}

// beforeFeed keeps the host's memory in step with the capture before the
// peer's frame c is fed. The peer's writes and atomics mark the bytes they
// address. Before a read, bytes no peer request has touched are set to what
// the host's responses to that read carry: they are the host application's
// own data, which it may have changed since the region was rebuilt (rping
// rewrites its buffer before each round the server reads). Bytes the peer
// wrote are left alone, so that softroce's handling of the writes is what
// the responses check.
func (s *session) beforeFeed(c *Frame) {
	m := s.peerMsg[c]
	if m == nil {
		return
	}
	p := &c.Pkt
	mark := func(rkey uint32, va, n uint64) {
		if r := s.regions[rkey]; r != nil && va >= r.lo {
			for i := va - r.lo; i < va-r.lo+n && i < uint64(len(r.touched)); i++ {
				r.touched[i] = true
			}
		}
	}
	switch m.kind {
	case packet.KindWrite:
		mark(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length))
	case packet.KindCompareSwap, packet.KindFetchAdd:
		mark(p.AtomicETH.RKey, p.AtomicETH.VA, 8)
	case packet.KindReadRequest:
		r := s.regions[p.RETH.RKey]
		if r == nil || p.RETH.VA < r.lo {
			return
		}
		mem := r.mr.Bytes()
		for _, h := range s.fromHost {
			if h.Time < c.Time || h.Pkt.Info().Kind != packet.KindReadResponse || !readResponds(m, h.Pkt.BTH.PSN, s.mtu) {
				continue
			}
			off := p.RETH.VA - r.lo + uint64((h.Pkt.BTH.PSN-p.BTH.PSN)&0xFFFFFF)*uint64(s.mtu)
			for i, b := range h.Pkt.Payload {
				j := off + uint64(i)
				if j < uint64(len(mem)) && !r.touched[j] && mem[j] != b {
					mem[j], r.expected[j] = b, b
					s.appWrites++
				}
			}
		}
	}
}
