package qp_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// ucudFlow is the UC or UD traffic from one address to one QP.
type ucudFlow struct {
	typ      qp.Type
	src, dst netip.Addr
	dqpn     uint32
	frames   []*capFrame
	mtu      qp.MTU
}

func findUnreliableFlows(frames []*capFrame) []*ucudFlow {
	type key struct {
		src, dst netip.Addr
		dqpn     uint32
	}
	byKey := map[key]*ucudFlow{}
	var order []*ucudFlow
	for _, c := range frames {
		tr := c.pkt.Info().Transport
		if tr != packet.TransportUC && tr != packet.TransportUD || c.pkt.BTH.DestQP == 1 {
			continue // QP1 (GSI, CM MADs) is the device's, not a user QP
		}
		k := key{c.addr.Src, c.addr.Dst, c.pkt.BTH.DestQP}
		fl := byKey[k]
		if fl == nil {
			fl = &ucudFlow{typ: qp.UC, src: k.src, dst: k.dst, dqpn: k.dqpn, mtu: 1024}
			if tr == packet.TransportUD {
				fl.typ = qp.UD
			}
			byKey[k] = fl
			order = append(order, fl)
		}
		fl.frames = append(fl.frames, c)
		if p := c.pkt.Info().Pos; p == packet.PosFirst || p == packet.PosMiddle {
			fl.mtu = qp.MTU(len(c.pkt.Payload))
		}
	}
	return order
}

// ucudMessages splits a flow into messages (payload, immediate, first frame).
type ucudMsg struct {
	data  []byte
	imm   *uint32
	first *capFrame
}

func ucudMessages(fl *ucudFlow) []ucudMsg {
	var ms []ucudMsg
	var cur *ucudMsg
	for _, c := range fl.frames {
		info := c.pkt.Info()
		if info.Pos == packet.PosFirst || info.Pos == packet.PosOnly {
			ms = append(ms, ucudMsg{first: c})
			cur = &ms[len(ms)-1]
		}
		if cur == nil {
			continue
		}
		cur.data = append(cur.data, c.pkt.Payload...)
		if info.Is(packet.HdrImmDt) {
			v := c.pkt.Imm
			cur.imm = &v
		}
		if info.Pos == packet.PosLast || info.Pos == packet.PosOnly {
			cur = nil
		}
	}
	return ms
}

// TestGoldenRxeUnreliable replays the UC and UD traffic of rxe captures
// (QP1 MADs aside). Receiving: the captured packets, fed to a QP like the
// captured receiver, give one successful completion per message with its
// bytes; for UD the 40-byte GRH area holds 20 zero bytes and the IPv4
// header as captured, the source QP and immediate data are reported.
// Sending: a QP like the captured sender, given the same SENDs, emits the
// captured packets byte for byte (ICRC aside), without AckReq.
func TestGoldenRxeUnreliable(t *testing.T) {
	for _, name := range []string{"uc_pingpong", "ud_pingpong", "udaddy", "send"} {
		t.Run(name, func(t *testing.T) {
			frames := readCapture(t, filepath.Join("..", "testdata", "pcaps", "rxe", name+".pcap"))
			flows := findUnreliableFlows(frames)
			require.NotEmpty(t, flows)
			for _, fl := range flows {
				t.Run(fmt.Sprintf("%v-%v/qp%#x", fl.typ, fl.dst, fl.dqpn), func(t *testing.T) {
					ms := ucudMessages(fl)
					require.NotEmpty(t, ms)
					t.Run("receive", func(t *testing.T) { unreliableReceive(t, fl, ms) })
					t.Run("send", func(t *testing.T) { unreliableSend(t, fl, ms) })
				})
			}
		})
	}
}

func newGoldenQP(t *testing.T, typ qp.Type, qpn uint32, mem *fakeMem, nrecv int) (*qp.QP, *qp.CQ, *qp.CQ) {
	sendCQ, recvCQ := qp.NewCQ(1<<10), qp.NewCQ(1<<10)
	q, err := qp.New(qp.Config{QPN: qpn, Type: typ, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendWR: 256,
		MaxRecvWR: nrecv + 1, MaxSendSGE: 1, MaxRecvSGE: 1, Memory: mem, MaxMTU: 4096, SrcPort: 0xC000})
	require.NoError(t, err)
	return q, sendCQ, recvCQ
}

func bringUpUnreliable(t *testing.T, q *qp.QP, fl *ucudFlow, peer netip.Addr, destQPN, sq, rq uint32) {
	first := &fl.frames[0].pkt
	a := qp.Attr{State: qp.Init, Port: 1, AccessFlags: allRemote, QKey: first.DETH.QKey}
	m := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if fl.typ == qp.UD {
		m |= qp.AttrQKey
	} else {
		m |= qp.AttrAccessFlags
	}
	require.NoError(t, modify(q, &a, m))
	a = qp.Attr{State: qp.RTR}
	m = qp.AttrState
	if fl.typ == qp.UC {
		a.AV, a.PathMTU, a.DestQPN, a.RQPSN = qp.AddressVector{DGID: peer, HopLimit: 64}, fl.mtu, destQPN, rq
		m |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	}
	require.NoError(t, modify(q, &a, m))
	require.NoError(t, modify(q, &qp.Attr{State: qp.RTS, SQPSN: sq}, qp.AttrState|qp.AttrSQPSN))
}

func unreliableReceive(t *testing.T, fl *ucudFlow, ms []ucudMsg) {
	bufLen := uint64(16 * fl.mtu)
	local := make([]byte, uint64(len(ms))*bufLen)
	mem := newFakeMem()
	mem.Register(localKey, localVA, local, qp.AccessLocalWrite)
	q, _, recvCQ := newGoldenQP(t, fl.typ, fl.dqpn, mem, len(ms))
	bringUpUnreliable(t, q, fl, fl.src, 0x99, 0, fl.frames[0].pkt.BTH.PSN)
	for i := range ms {
		require.NoError(t, q.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: localVA + uint64(i)*bufLen,
			Length: uint32(bufLen), LKey: localKey}}}))
	}
	for _, c := range fl.frames {
		q.Receive(c.t, &qp.Incoming{Pkt: c.pkt, Src: c.addr.Src, Dst: c.addr.Dst, IPHeader: c.ip})
		var out qp.Outgoing
		require.False(t, q.Transmit(c.t, &out), "UC and UD receivers send nothing back")
	}
	var wcs [1 << 10]qp.WC
	n := recvCQ.Poll(wcs[:])
	ids := make([]uint64, len(ms))
	for i := range ids {
		ids[i] = uint64(i)
	}
	requireWCs(t, wcs[:n], ids, qp.WCSuccess)
	for i, m := range ms {
		w := wcs[i]
		buf := local[uint64(i)*bufLen:]
		off := 0
		if fl.typ == qp.UD {
			off = 40
			require.NotZero(t, w.Flags&qp.WCWithGRH)
			require.Equal(t, m.first.pkt.DETH.SrcQP, w.SrcQP)
			ip := m.first.ip
			require.Equal(t, append(make([]byte, 40-len(ip)), ip...), buf[:40], "GRH area of message %d", i)
		}
		require.Equal(t, uint32(off+len(m.data)), w.ByteLen)
		require.Equal(t, m.data, buf[off:off+len(m.data)], "message %d", i)
		if m.imm != nil {
			require.NotZero(t, w.Flags&qp.WCWithImm)
			require.Equal(t, *m.imm, w.Imm)
		} else {
			require.Zero(t, w.Flags&qp.WCWithImm)
		}
	}
}

func unreliableSend(t *testing.T, fl *ucudFlow, ms []ucudMsg) {
	var size uint64
	for _, m := range ms {
		size += uint64(len(m.data)) + 8
	}
	local := make([]byte, size)
	mem := newFakeMem()
	mem.Register(localKey, localVA, local, qp.AccessLocalWrite)
	qpn := uint32(0x77) // UC: the sender's QPN is not on the wire
	if fl.typ == qp.UD {
		qpn = fl.frames[0].pkt.DETH.SrcQP
	}
	q, sendCQ, _ := newGoldenQP(t, fl.typ, qpn, mem, 1)
	bringUpUnreliable(t, q, fl, fl.dst, fl.dqpn, fl.frames[0].pkt.BTH.PSN, 0)
	var off uint64
	for i, m := range ms {
		copy(local[off:], m.data)
		wr := qp.SendWR{ID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: localVA + off, Length: uint32(len(m.data)), LKey: localKey}}}
		if m.imm != nil {
			wr.Opcode, wr.Imm = qp.WRSendImm, *m.imm
		}
		if fl.typ == qp.UD {
			wr.AH = &qp.AddressVector{DGID: fl.dst, HopLimit: 64}
			wr.RemoteQPN, wr.RemoteQKey = fl.dqpn, m.first.pkt.DETH.QKey
		}
		require.NoError(t, q.PostSend(&wr))
		off += uint64(len(m.data)) + 8
	}
	for _, c := range fl.frames {
		var out qp.Outgoing
		require.True(t, q.Transmit(c.t, &out), "frame %d: ours has nothing to send", c.n)
		if !samePacket(&out.Pkt, &c.pkt) {
			t.Fatalf("frame %d differs:\n ours:   %x\n theirs: %x", c.n,
				out.Pkt.AppendTo(nil)[:packet.BTHLen+8], c.pkt.AppendTo(nil)[:packet.BTHLen+8])
		}
		require.Equal(t, fl.dst, out.AV.DGID)
	}
	var out qp.Outgoing
	require.False(t, q.Transmit(0, &out), "nothing more to send")
	var wcs [1 << 10]qp.WC
	n := sendCQ.Poll(wcs[:])
	ids := make([]uint64, len(ms))
	for i := range ids {
		ids[i] = uint64(i)
	}
	requireWCs(t, wcs[:n], ids, qp.WCSuccess)
}
