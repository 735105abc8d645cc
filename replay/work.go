package replay

import (
	"errors"
	"fmt"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// work turns the host's request messages into send work requests, posted
// when the walk reaches their first frame. UD datagrams are one message each.
func (s *session) work() error {
	if s.flow.Type == qp.UD {
		if s.opt.ResponderOnly {
			return nil
		}
		s.hostMsgs = nil
		for _, c := range s.fromHost {
			s.hostMsgs = append(s.hostMsgs, &message{first: c, last: c, kind: packet.KindSend, payload: c.Pkt.Payload, npkts: 1})
		}
	}
	for i, m := range s.hostMsgs {
		p, last := &m.first.Pkt, &m.last.Pkt
		wr := qp.SendWR{ID: uint64(i), Flags: qp.SendSignaled}
		if last.BTH.SE {
			wr.Flags |= qp.SendSolicited
		}
		local := append([]byte(nil), m.payload...)
		switch m.kind {
		case packet.KindSend:
			wr.Opcode = qp.WRSend
			if last.Info().Is(packet.HdrImmDt) {
				wr.Opcode, wr.Imm = qp.WRSendImm, last.Imm
			}
			if last.Info().Is(packet.HdrIETH) {
				wr.Opcode, wr.InvRKey = qp.WRSendInv, last.IETH
			}
		case packet.KindWrite:
			wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRWrite, p.RETH.VA, p.RETH.RKey
			if last.Info().Is(packet.HdrImmDt) {
				wr.Opcode, wr.Imm = qp.WRWriteImm, last.Imm
			}
		case packet.KindReadRequest:
			wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRead, p.RETH.VA, p.RETH.RKey
			if p.RETH.Length > maxRebuild {
				return fmt.Errorf("frame %d: a read of %d bytes, too many to rebuild", m.first.No, p.RETH.Length)
			}
			local = make([]byte, p.RETH.Length)
		case packet.KindCompareSwap, packet.KindFetchAdd:
			wr.Opcode, wr.CompareAdd = qp.WRFetchAdd, p.AtomicETH.SwapAdd
			if m.kind == packet.KindCompareSwap {
				wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRCmpSwap, p.AtomicETH.Compare, p.AtomicETH.SwapAdd
			}
			wr.RemoteAddr, wr.RKey = p.AtomicETH.VA, p.AtomicETH.RKey
			local = make([]byte, 8)
		default:
			return fmt.Errorf("frame %d: cannot rebuild a %v request", m.first.No, m.kind)
		}
		if s.flow.Type == qp.UD {
			ah, err := s.d.CreateAH(s.pd, qp.AddressVector{DGID: m.first.Dst, SGIDIndex: uint8(s.d.GIDIndex(s.host.Addr)),
				HopLimit: m.first.TTL, TrafficClass: m.first.TOS})
			if err != nil {
				return fmt.Errorf("frame %d: %w", m.first.No, err)
			}
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.AV(), p.BTH.DestQP, p.DETH.QKey
		}
		if len(local) > 0 {
			lm, err := s.d.RegMR(s.pd, local, qp.AccessLocalWrite)
			if err != nil {
				return err
			}
			wr.SGL = []qp.SGE{{Addr: lm.Addr(), Length: uint32(len(local)), LKey: lm.LKey()}}
		}
		pw := &posted{msg: m, wr: wr, local: local}
		s.sent = append(s.sent, pw)
		s.wrs[m.first] = pw
	}
	if len(s.sent) > depth {
		return errors.New("too many messages for one send queue")
	}
	return nil
}
