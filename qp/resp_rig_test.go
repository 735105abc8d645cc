package qp

import (
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// respRig drives one QP's responder directly: tests hand it request packets
// (encoded and decoded again, so they are real wire packets) and read back
// what the QP transmits and completes. The send side stays idle.
type respRig struct {
	t      *testing.T
	q      *QP
	mem    *fakeMemory
	rcq    *CQ
	events []Event
	now    Time
}

const (
	rspQPN     uint32 = 0x11
	rspDestQPN uint32 = 0x22
	rspPSN     uint32 = 0x100
	rspMTU            = 256
	rspRNR            = 12
	rspQKey           = 0x1234
	rspSrcPort        = 0xC123
	// rspRecvKey names the receive buffer region, rspRemoteKey the region
	// remote operations target.
	rspRecvKey   uint32 = 0x10
	rspRemoteKey uint32 = 0x20
)

type rspOpt func(*Config, *Attr)

func rspWithSRQ(s *SRQ) rspOpt        { return func(c *Config, _ *Attr) { c.SRQ = s } }
func rspWithRQPSN(psn uint32) rspOpt  { return func(_ *Config, a *Attr) { a.RQPSN = psn } }
func rspWithAccess(acc Access) rspOpt { return func(_ *Config, a *Attr) { a.AccessFlags = acc } }
func rspWithMaxDestRdAtomic(n uint8) rspOpt {
	return func(_ *Config, a *Attr) { a.MaxDestRdAtomic = n }
}
func rspWithRecvCap(wr, sge int) rspOpt {
	return func(c *Config, _ *Attr) { c.MaxRecvWR, c.MaxRecvSGE = wr, sge }
}
func rspWithCQDepth(n int) rspOpt          { return func(c *Config, _ *Attr) { c.RecvCQ = NewCQ(n) } }
func rspWithMaxMTU(m MTU) rspOpt           { return func(c *Config, _ *Attr) { c.MaxMTU = m } }
func rspWithQKey(k uint32) rspOpt          { return func(_ *Config, a *Attr) { a.QKey = k } }
func rspWithPathMTU(m MTU) rspOpt          { return func(_ *Config, a *Attr) { a.PathMTU = m } }
func rspWithMinRNRTimer(code uint8) rspOpt { return func(_ *Config, a *Attr) { a.MinRNRTimer = code } }
func rspWithConfig(f func(*Config)) rspOpt { return func(c *Config, _ *Attr) { f(c) } }
func rspWithAttr(f func(*Attr)) rspOpt     { return func(_ *Config, a *Attr) { f(a) } }
func rspAllAccess() Access {
	return AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
}
func rspAV() AddressVector { return AddressVector{DGID: netip.MustParseAddr("10.0.0.2"), HopLimit: 64} }
func rspDefaultAttr() Attr {
	return Attr{AccessFlags: rspAllAccess(), Port: 1, QKey: rspQKey, AV: rspAV(), PathMTU: rspMTU,
		DestQPN: rspDestQPN, RQPSN: rspPSN, MaxDestRdAtomic: 4, MinRNRTimer: rspRNR}
}

// newRespRig creates a QP of type t, brought to RTR with rspDefaultAttr as
// modified by opts, with a receive region (rspRecvKey, 64 KiB, local write)
// and a remote region (rspRemoteKey, 64 KiB at VA 0x10000, all remote
// access) registered.
func newRespRig(t *testing.T, typ Type, opts ...rspOpt) *respRig {
	t.Helper()
	r := &respRig{t: t, mem: newFakeMemory()}
	cfg := Config{QPN: rspQPN, Type: typ, SendCQ: NewCQ(64), RecvCQ: NewCQ(64), MaxSendWR: 4,
		MaxRecvWR: 8, MaxRecvSGE: 4, Memory: r.mem, MaxMTU: 4096, SrcPort: rspSrcPort,
		Events: func(e Event) { r.events = append(r.events, e) }}
	attr := rspDefaultAttr()
	for _, o := range opts {
		o(&cfg, &attr)
	}
	r.rcq = cfg.RecvCQ
	r.mem.Register(rspRecvKey, make([]byte, 64<<10), AccessLocalWrite)
	r.mem.RegisterAt(rspRemoteKey, 0x10000, make([]byte, 64<<10), rspAllAccess())
	q, err := New(cfg)
	require.NoError(t, err)
	r.q = q
	switch typ {
	case UD:
		require.NoError(t, q.Modify(&Attr{State: Init, Port: 1, QKey: attr.QKey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey))
		require.NoError(t, q.Modify(&Attr{State: RTR}, AttrState))
	case UC:
		attr.State = Init
		require.NoError(t, q.Modify(&attr, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		attr.State = RTR
		require.NoError(t, q.Modify(&attr, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN))
	default:
		attr.State = Init
		require.NoError(t, q.Modify(&attr, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		attr.State = RTR
		require.NoError(t, q.Modify(&attr, AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|
			AttrMaxDestRdAtomic|AttrMinRNRTimer))
	}
	require.Equal(t, RTR, q.State())
	return r
}

// recvBuf returns the receive region's bytes.
func (r *respRig) recvBuf() []byte { return r.mem.regions[rspRecvKey].buf }

// remote returns the remote region's bytes at offset off (VA 0x10000+off).
func (r *respRig) remote(off, n int) []byte { return r.mem.regions[rspRemoteKey].buf[off : off+n] }

const rspRemoteVA = 0x10000

// post posts a receive WQE with one SGE per length, laid out back to back
// in the receive region from addr.
func (r *respRig) post(id uint64, addr uint64, lengths ...uint32) {
	r.t.Helper()
	wr := RecvWR{ID: id}
	for _, l := range lengths {
		wr.SGL = append(wr.SGL, SGE{Addr: addr, Length: l, LKey: rspRecvKey})
		addr += uint64(l)
	}
	require.NoError(r.t, r.q.PostRecv(&wr))
}

// pkt builds a request packet; f fills extension headers.
func rspPkt(op packet.Opcode, psn uint32, payload []byte, f func(*packet.Packet)) packet.Packet {
	p := packet.Packet{Payload: payload}
	p.BTH = packet.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: rspQPN, PSN: psn}
	if f != nil {
		f(&p)
	}
	return p
}

func rspAckReq(p *packet.Packet) { p.BTH.AckReq = true }

func rspReth(va uint64, rkey, length uint32) func(*packet.Packet) {
	return func(p *packet.Packet) { p.RETH = packet.RETHFields{VA: va, RKey: rkey, Length: length} }
}

// recv hands the QP a packet after a round trip through the wire format.
func (r *respRig) recv(p packet.Packet) {
	r.t.Helper()
	b := p.AppendTo(nil)
	var d packet.Packet
	require.NoError(r.t, d.Decode(b))
	r.q.Receive(r.now, &Incoming{Pkt: d})
}

// recvRaw hands the QP a packet as is (for packets the decoder would refuse).
func (r *respRig) recvRaw(p packet.Packet) {
	r.q.Receive(r.now, &Incoming{Pkt: p})
}

// drain returns every packet the QP transmits now, payloads copied.
func (r *respRig) drain() []packet.Packet {
	r.t.Helper()
	var out []packet.Packet
	for i := 0; r.q.Pending(r.now); i++ {
		require.Less(r.t, i, 100000, "transmit does not stop")
		var o Outgoing
		require.True(r.t, r.q.Transmit(r.now, &o))
		require.Same(r.t, &r.q.attr.AV, o.AV)
		require.Equal(r.t, uint16(rspSrcPort), o.SrcPort)
		require.Equal(r.t, uint16(0xFFFF), o.Pkt.BTH.PKey)
		require.Equal(r.t, uint32(rspDestQPN), o.Pkt.BTH.DestQP)
		o.Pkt.Payload = append([]byte(nil), o.Pkt.Payload...)
		// Every packet must encode and decode cleanly.
		var d packet.Packet
		require.NoError(r.t, d.Decode(o.Pkt.AppendTo(nil)))
		out = append(out, o.Pkt)
	}
	var o Outgoing
	require.False(r.t, r.q.Transmit(r.now, &o))
	return out
}

// wcs polls every completion from the receive CQ.
func (r *respRig) wcs() []WC {
	out := make([]WC, r.rcq.Len())
	n := r.rcq.Poll(out)
	return out[:n]
}

// requireAck checks that pkts is exactly one RC ACKNOWLEDGE with the
// syndrome, PSN and MSN.
func rspRequireAck(t *testing.T, pkts []packet.Packet, syn packet.Syndrome, psn, msn uint32) {
	t.Helper()
	require.Len(t, pkts, 1)
	p := pkts[0]
	require.Equal(t, packet.RCAcknowledge, p.BTH.Opcode)
	require.Equal(t, syn, p.AETH.Syndrome, "syndrome %s", p.AETH.Syndrome)
	require.Equal(t, psn, p.BTH.PSN, "ack psn")
	require.Equal(t, msn, p.AETH.MSN, "msn")
}

// requireFatal checks the aftermath of an RC class A/C error: one NAK with
// syn for psn, the QP in ERR, and event ev raised.
func (r *respRig) requireFatal(syn packet.Syndrome, psn uint32, ev EventType) {
	r.t.Helper()
	rspRequireAck(r.t, r.drain(), syn, psn, r.q.resp.msn)
	require.Equal(r.t, Err, r.q.State())
	require.Contains(r.t, r.events, Event{Type: ev, QPN: rspQPN})
}

// fill returns n bytes of a recognizable pattern.
func rspFill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}
