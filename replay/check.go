package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// check compares what the host's application would have seen with what the
// capture shows: completions, read and atomic results, received messages
// and the memory the peer wrote.
func (s *session) check(r *Result) {
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	wcs := make([]qp.WC, depth)
	n := s.scq.Poll(wcs)
	if n != len(s.sent) {
		bad("%d send completions, want %d", n, len(s.sent))
	}
	for i, wc := range wcs[:min(n, len(s.sent))] {
		if wc.Status != qp.WCSuccess || wc.ID != uint64(i) {
			bad("send completion %d: wr %d %s, want wr %d success", i, wc.ID, wc.Status, i)
			continue
		}
		pw := s.sent[i]
		switch pw.msg.kind {
		case packet.KindReadRequest:
			var want []byte
			for _, c := range s.fromPeer {
				if c.Pkt.Info().Kind == packet.KindReadResponse && readResponds(pw.msg, c.Pkt.BTH.PSN, s.mtu) {
					want = append(want, c.Pkt.Payload...)
				}
			}
			if !bytes.Equal(want, pw.local) {
				bad("read of frame %d: data %s", pw.msg.first.No, firstByteDiff(want, pw.local))
			}
		case packet.KindCompareSwap, packet.KindFetchAdd:
			for _, c := range s.fromPeer {
				if c.Pkt.Info().Kind == packet.KindAtomicAck && c.Pkt.BTH.PSN == pw.msg.first.Pkt.BTH.PSN {
					if got := binary.LittleEndian.Uint64(pw.local); got != c.Pkt.AtomicAck {
						bad("atomic of frame %d returned %#x, the peer's ACK says %#x", pw.msg.first.No, got, c.Pkt.AtomicAck)
					}
				}
			}
		}
	}
	var recvs []qp.WC
	for {
		k := s.rcq.Poll(wcs)
		if k == 0 {
			break
		}
		recvs = append(recvs, wcs[:k]...)
	}
	if len(recvs) != len(s.recvBufs) {
		bad("%d receive completions, want %d", len(recvs), len(s.recvBufs))
		return
	}
	if s.flow.Type == qp.UD {
		s.checkUD(r, recvs)
		return
	}
	ri := 0
	for _, m := range s.peerMsgs {
		p := &m.first.Pkt
		switch m.kind {
		case packet.KindSend:
			wc := recvs[ri]
			switch {
			case wc.Status != qp.WCSuccess:
				bad("receive of frame %d: %s", m.first.No, wc.Status)
			case wc.ByteLen != uint32(len(m.payload)):
				bad("receive of frame %d: %d bytes, want %d", m.first.No, wc.ByteLen, len(m.payload))
			case !bytes.Equal(m.payload, s.recvBufs[ri][:len(m.payload)]):
				bad("receive of frame %d: data %s", m.first.No, firstByteDiff(m.payload, s.recvBufs[ri][:len(m.payload)]))
			}
			ri++
		case packet.KindWrite:
			rg := s.regions[p.RETH.RKey]
			copy(rg.expected[p.RETH.VA-rg.lo:], m.payload)
			if m.last.Pkt.Info().Is(packet.HdrImmDt) {
				ri++
			}
		case packet.KindCompareSwap, packet.KindFetchAdd:
			rg := s.regions[p.AtomicETH.RKey]
			w := rg.expected[p.AtomicETH.VA-rg.lo:]
			v := binary.LittleEndian.Uint64(w)
			if m.kind == packet.KindFetchAdd {
				binary.LittleEndian.PutUint64(w, v+p.AtomicETH.SwapAdd)
			} else if v == p.AtomicETH.Compare {
				binary.LittleEndian.PutUint64(w, p.AtomicETH.SwapAdd)
			}
		}
	}
	if s.opt.ResponderOnly {
		// Retransmitted requests make the rebuilt messages unreliable;
		// the responses compared already show what memory held.
		return
	}
	for _, k := range s.regionKeys() {
		rg := s.regions[k]
		if !bytes.Equal(rg.expected, rg.mr.Bytes()) {
			bad("memory of rkey %#x after the peer's requests: %s", k, firstByteDiff(rg.expected, rg.mr.Bytes()))
		}
	}
}

// checkUD checks the datagrams the host received: each lands behind the
// 40-byte GRH area, which holds the IPv4 header in its last 20 bytes.
func (s *session) checkUD(r *Result, recvs []qp.WC) {
	bad := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	for _, wc := range recvs {
		if wc.Status != qp.WCSuccess || wc.ID >= uint64(len(s.recvFor)) {
			bad("receive completion for wr %d: %s", wc.ID, wc.Status)
			continue
		}
		c, buf := s.recvFor[wc.ID], s.recvBufs[wc.ID]
		switch {
		case wc.ByteLen != uint32(40+len(c.Pkt.Payload)):
			bad("datagram %d: %d bytes, want %d", c.No, wc.ByteLen, 40+len(c.Pkt.Payload))
		case wc.SrcQP != c.Pkt.DETH.SrcQP:
			bad("datagram %d: source QP %#x, want %#x", c.No, wc.SrcQP, c.Pkt.DETH.SrcQP)
		case !bytes.Equal(c.Pkt.Payload, buf[40:]):
			bad("datagram %d: data %s", c.No, firstByteDiff(c.Pkt.Payload, buf[40:]))
		case c.Pkt.Info().Is(packet.HdrImmDt) && wc.Imm != c.Pkt.Imm:
			bad("datagram %d: immediate %#x, want %#x", c.No, wc.Imm, c.Pkt.Imm)
		}
		if c.Src.Is4() {
			var fr packet.Frame
			if packet.ParseFrame(c.Data, &fr) == nil && !bytes.Equal(fr.IP, buf[20:40]) {
				bad("datagram %d: the GRH area does not hold its IPv4 header", c.No)
			}
		}
	}
}
