package qp_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// TestGoldenRxeRequester replays the other half: a requester configured
// like the captured one (its QPN, first PSN, path MTU, the responder as
// destination) is given work requests that reproduce the captured messages
// (opcodes, lengths, payload bytes, remote addresses and keys, atomic
// operands), all posted up front. The capture is then walked in order:
// where the captured requester sent a request, ours must send the same
// packet, byte for byte (ICRC aside); where rxe's responder answered, ours
// receives that answer. Every WR must then complete successfully, READs
// with rxe's bytes and atomics with rxe's original values.
//
// Rule: the loss capture is left out, because which requests a requester
// retransmits depends on when its timer fires and NAKs arrive, which the
// capture's timing (a kernel's jiffies and tasklets) does not pin down.
func TestGoldenRxeRequester(t *testing.T) {
	for _, name := range []string{"write", "read", "atomic", "send", "rc_pingpong", "rc_pingpong_ipv6", "rping", "send_rdmacm", "veth_local_write"} {
		t.Run(name, func(t *testing.T) {
			frames := readCapture(t, filepath.Join("..", "testdata", "pcaps", "rxe", name+".pcap"))
			flows := findFlows(t, frames)
			require.NotEmpty(t, flows)
			for _, fl := range flows {
				t.Run(fmt.Sprintf("%v/qp%#x", fl.reqIP, fl.reqQPN), func(t *testing.T) {
					replayRequester(t, fl)
				})
			}
		})
	}
}

func replayRequester(t *testing.T, fl *rcFlow) {
	ms := messages(fl)
	byPSN := map[uint32]*capFrame{}
	for _, c := range fl.requests {
		if _, ok := byPSN[c.pkt.BTH.PSN]; !ok {
			byPSN[c.pkt.BTH.PSN] = c
		}
	}
	require.Len(t, byPSN, len(fl.requests), "a capture without retransmissions")
	// Local memory: each message's source or destination, one after the
	// other, 8-byte aligned.
	var size uint64
	offs := make([]uint64, len(ms))
	for i, m := range ms {
		offs[i] = size
		size = (size + uint64(m.len) + 64) &^ 7
		if m.kind == packet.KindSend {
			var n uint64
			for k := uint32(0); k < m.npkt; k++ {
				n += uint64(len(byPSN[psnAdd(m.psn, k)].pkt.Payload))
			}
			size = (offs[i] + n + 64) &^ 7
		}
	}
	local := make([]byte, size+64)
	mem := newFakeMem()
	mem.Register(localKey, localVA, local, qp.AccessLocalWrite)
	sendCQ, recvCQ := qp.NewCQ(1<<12), qp.NewCQ(1<<12)
	q, err := qp.New(qp.Config{QPN: fl.reqQPN, Type: qp.RC, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendWR: len(ms) + 1,
		MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, Memory: mem, MaxMTU: 4096, SrcPort: 0xC000})
	require.NoError(t, err)
	peer := &endpoint{addr: fl.resp.ip}
	require.NoError(t, modify(q, &qp.Attr{State: qp.Init, Port: 1, AccessFlags: allRemote},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	require.NoError(t, modify(q, &qp.Attr{State: qp.RTR, AV: peer.av(), PathMTU: fl.mtu, DestQPN: fl.resp.qpn, RQPSN: 0,
		MaxDestRdAtomic: 16, MinRNRTimer: 12},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	require.NoError(t, modify(q, &qp.Attr{State: qp.RTS, SQPSN: ms[0].psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))

	// The work requests.
	wantRead := map[int][]byte{}
	wantOrig := map[int]uint64{}
	for i, m := range ms {
		first := &m.first.pkt
		wr := qp.SendWR{ID: uint64(i), Flags: qp.SendSignaled}
		var data []byte
		for k := uint32(0); k < m.npkt && m.kind != packet.KindReadRequest; k++ {
			c := byPSN[psnAdd(m.psn, k)]
			require.NotNil(t, c, "message at %#x: packet %d missing", m.psn, k)
			data = append(data, c.pkt.Payload...)
			if c.pkt.Info().Is(packet.HdrImmDt) {
				wr.Imm = c.pkt.Imm
				if m.kind == packet.KindSend {
					wr.Opcode = qp.WRSendImm
				} else {
					wr.Opcode = qp.WRWriteImm
				}
			}
		}
		n := uint32(len(data))
		switch m.kind {
		case packet.KindSend:
			if wr.Opcode != qp.WRSendImm {
				wr.Opcode = qp.WRSend
			}
		case packet.KindWrite:
			if wr.Opcode != qp.WRWriteImm {
				wr.Opcode = qp.WRWrite
			}
			wr.RemoteAddr, wr.RKey = first.RETH.VA, first.RETH.RKey
		case packet.KindReadRequest:
			wr.Opcode, n = qp.WRRead, first.RETH.Length
			wr.RemoteAddr, wr.RKey = first.RETH.VA, first.RETH.RKey
			var b []byte
			for _, c := range fl.responses {
				if psnIn(c.pkt.BTH.PSN, m.psn, psnAdd(m.psn, m.npkt-1)) {
					b = append(b, c.pkt.Payload...)
				}
			}
			wantRead[i] = b
		case packet.KindCompareSwap, packet.KindFetchAdd:
			wr.Opcode, n = qp.WRCmpSwap, 8
			if m.kind == packet.KindFetchAdd {
				wr.Opcode = qp.WRFetchAdd
			}
			wr.RemoteAddr, wr.RKey = first.AtomicETH.VA, first.AtomicETH.RKey
			wr.CompareAdd, wr.Swap = first.AtomicETH.Compare, first.AtomicETH.SwapAdd
			if m.kind == packet.KindFetchAdd {
				wr.CompareAdd = first.AtomicETH.SwapAdd
			}
			for _, c := range fl.responses {
				if c.pkt.BTH.PSN == m.psn && c.pkt.Info().Kind == packet.KindAtomicAck {
					wantOrig[i] = c.pkt.AtomicAck
				}
			}
		}
		copy(local[offs[i]:], data)
		if n > 0 {
			wr.SGL = []qp.SGE{{Addr: localVA + offs[i], Length: n, LKey: localKey}}
		}
		require.NoError(t, q.PostSend(&wr), "message %d at %#x", i, m.psn)
	}

	// Walk the capture.
	flow := append(append([]*capFrame(nil), fl.requests...), fl.responses...)
	sort.SliceStable(flow, func(i, j int) bool { return flow[i].n < flow[j].n })
	for _, c := range flow {
		if q.Deadline() <= c.t {
			q.Tick(c.t)
		}
		if isRequest(&c.pkt) {
			var out qp.Outgoing
			if !q.Transmit(c.t, &out) {
				t.Fatalf("frame %d: rxe's requester sent %s; ours has nothing to send", c.n, describe(&c.pkt))
			}
			if !samePacket(&out.Pkt, &c.pkt) {
				t.Fatalf("frame %d: request differs:\n ours:   %s %x\n theirs: %s %x", c.n,
					describe(&out.Pkt), out.Pkt.AppendTo(nil)[:packet.BTHLen+16], describe(&c.pkt), c.pkt.AppendTo(nil)[:packet.BTHLen+16])
			}
			require.Equal(t, fl.resp.ip, out.AV.DGID)
			continue
		}
		in := qp.Incoming{Pkt: c.pkt, Src: c.addr.Src, Dst: c.addr.Dst, IPHeader: c.ip}
		q.Receive(c.t, &in)
	}
	var out qp.Outgoing
	if q.Transmit(flow[len(flow)-1].t, &out) {
		t.Fatalf("ours sends more than rxe's requester: %s", describe(&out.Pkt))
	}
	var wcs [1 << 10]qp.WC
	n := sendCQ.Poll(wcs[:])
	ids := make([]uint64, len(ms))
	for i := range ids {
		ids[i] = uint64(i)
	}
	requireWCs(t, wcs[:n], ids, qp.WCSuccess)
	for i, b := range wantRead {
		require.Equal(t, b, local[offs[i]:offs[i]+uint64(len(b))], "READ %d data", i)
	}
	le := binary.LittleEndian
	for i, v := range wantOrig {
		require.Equal(t, v, le.Uint64(local[offs[i]:]), "atomic %d original value", i)
	}
	require.Equal(t, qp.Never, q.Deadline(), "no timer armed once everything is acknowledged")
}
