package qp_test

import (
	"bytes"
	"fmt"

	"github.com/softroce/softroce/qp"
)

func checkSendWCs(ep *endpoint, ops []rop) error {
	k := 0
	for i, o := range ops {
		if !o.signaled {
			continue
		}
		if k >= len(ep.sendWCs) {
			return fmt.Errorf("%s: %d send completions, want more: %s", ep.name, len(ep.sendWCs), wcsString(ep.sendWCs))
		}
		wc := ep.sendWCs[k]
		k++
		if wc.ID != uint64(i+1) || wc.Status != qp.WCSuccess || wc.Opcode != wcOpcodeOf[o.op] {
			return fmt.Errorf("%s send completion %d: got id=%d %v %v, want id=%d SUCCESS %v",
				ep.name, k-1, wc.ID, wc.Opcode, wc.Status, i+1, wcOpcodeOf[o.op])
		}
		if wc.ByteLen != o.size {
			return fmt.Errorf("%s send completion %d (%v): byte_len %d, want %d", ep.name, i+1, o.op, wc.ByteLen, o.size)
		}
	}
	if k != len(ep.sendWCs) {
		return fmt.Errorf("%s: %d send completions, want %d: %s", ep.name, len(ep.sendWCs), k, wcsString(ep.sendWCs))
	}
	return nil
}

// checkRC checks the responder resp after ops: receive completions in
// order, its memory and receive buffers as modelled, still in RTS.
func checkRC(resp *endpoint, ops []rop, want model) error {
	k := 0
	for _, o := range ops {
		if o.recv < 0 {
			continue
		}
		if k >= len(resp.recvWCs) {
			return fmt.Errorf("%s: %d receive completions, want more", resp.name, len(resp.recvWCs))
		}
		if err := checkRecvWC(resp.recvWCs[k], o); err != nil {
			return fmt.Errorf("%s: %w", resp.name, err)
		}
		k++
	}
	if k != len(resp.recvWCs) {
		return fmt.Errorf("%s: %d receive completions, want %d", resp.name, len(resp.recvWCs), k)
	}
	if !bytes.Equal(resp.remote, want.remote) {
		return fmt.Errorf("%s memory (WRITE/atomic targets) differs at %d", resp.name, firstDiff(resp.remote, want.remote))
	}
	if !bytes.Equal(resp.local[recvBase:], want.local[recvBase:]) {
		return fmt.Errorf("%s receive buffers differ at %d", resp.name, recvBase+firstDiff(resp.local[recvBase:], want.local[recvBase:]))
	}
	if resp.qp.State() != qp.RTS {
		return fmt.Errorf("%s state %v, want RTS", resp.name, resp.qp.State())
	}
	return nil
}

func checkRecvWC(wc qp.WC, o rop) error {
	if wc.ID != 1000+uint64(o.recv) || wc.Status != qp.WCSuccess {
		return fmt.Errorf("receive completion: got id=%d %v, want id=%d SUCCESS", wc.ID, wc.Status, 1000+o.recv)
	}
	want := qp.WCRecv
	if o.op == qp.WRWriteImm {
		want = qp.WCRecvRDMAImm
	}
	if wc.Opcode != want || wc.ByteLen != o.size {
		return fmt.Errorf("receive completion %d: %v len %d, want %v len %d", wc.ID, wc.Opcode, wc.ByteLen, want, o.size)
	}
	hasImm := o.op == qp.WRSendImm || o.op == qp.WRWriteImm
	if (wc.Flags&qp.WCWithImm != 0) != hasImm || (hasImm && wc.Imm != o.imm) {
		return fmt.Errorf("receive completion %d: flags %#x imm %#x, want imm %v %#x", wc.ID, wc.Flags, wc.Imm, hasImm, o.imm)
	}
	return nil
}

// checkUC checks a UC responder: delivered messages are intact, and in
// order when the wire neither duplicates nor reorders (UC detects neither);
// lost ones leave no completion; WRITE targets hold, byte for byte, the
// old or the new data (a WRITE cut by a gap may land partly).
func checkUC(resp *endpoint, ops []rop, wantRemote, oldRemote, reqLocal []byte, ordered bool) error {
	next := 0
	for _, wc := range resp.recvWCs {
		if wc.Status != qp.WCSuccess {
			return fmt.Errorf("%s UC receive completion %d: %v", resp.name, wc.ID, wc.Status)
		}
		found := false
		if !ordered {
			next = 0
		}
		for ; next < len(ops); next++ {
			o := ops[next]
			if o.recv < 0 {
				continue
			}
			if checkRecvWC(qp.WC{ID: 1000 + uint64(o.recv), Status: wc.Status, Opcode: wc.Opcode, ByteLen: wc.ByteLen,
				Imm: wc.Imm, Flags: wc.Flags}, o) != nil {
				continue
			}
			if o.op != qp.WRWriteImm {
				// The data must be the message's, in the buffer that completed.
				var buf []piece
				for _, p := range ops {
					if p.recv >= 0 && 1000+uint64(p.recv) == wc.ID {
						buf = p.recvBuf
					}
				}
				if buf == nil || !bytes.Equal(gather(resp.local, buf)[:o.size], gather(reqLocal, o.local)) {
					continue
				}
			}
			found = true
			next++
			break
		}
		if !found {
			return fmt.Errorf("%s UC receive completion %d (len %d) matches no message (ordered=%v)", resp.name, wc.ID, wc.ByteLen, ordered)
		}
	}
	for i := range resp.remote {
		if resp.remote[i] != wantRemote[i] && resp.remote[i] != oldRemote[i] {
			return fmt.Errorf("%s UC memory byte %d is neither old nor new", resp.name, i)
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
