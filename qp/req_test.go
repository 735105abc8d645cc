package qp

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

// sendRig drives one QP's send side directly: it posts WRs, collects the
// packets Transmit hands out, feeds crafted responses and polls the send CQ.
type sendRig struct {
	t      testing.TB
	q      *QP
	mem    *fakeMemory
	cq     *CQ
	now    Time
	events []Event
}

// sent is a request packet as the rig captured it (payload copied).
type sent struct {
	packet.Packet
	AV      *AddressVector
	SrcPort uint16
}

const (
	rigQPN    = 0x11
	rigDestQP = 0x22
	rigPSN    = 100
	rigQKey   = 0x1234
)

func newSendRig(t testing.TB, typ Type, mtu MTU, opts ...func(*Config, *Attr)) *sendRig {
	t.Helper()
	r := &sendRig{t: t, mem: newFakeMemory(), cq: NewCQ(512)}
	cfg := Config{QPN: rigQPN, Type: typ, SendCQ: r.cq, RecvCQ: NewCQ(16), Memory: r.mem,
		MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInline: 64, SrcPort: 0xC123,
		Events: func(e Event) { r.events = append(r.events, e) }}
	attr := Attr{PathMTU: mtu, DestQPN: rigDestQP, SQPSN: rigPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: 4, QKey: rigQKey,
		AV: AddressVector{DGID: netip.MustParseAddr("10.0.0.2"), HopLimit: 64}}
	for _, o := range opts {
		o(&cfg, &attr)
	}
	q, err := New(cfg)
	require.NoError(t, err)
	r.q = q
	r.modify(attr, RTS, AttrState|AttrSQPSN|AttrMaxQPRdAtomic|AttrRetryCnt|AttrRNRRetry|AttrTimeout|
		AttrPathMTU|AttrDestQPN|AttrAV|AttrQKey)
	return r
}

// modify stores attributes and a state, then tells the send side, as
// Modify does.
func (r *sendRig) modify(a Attr, st State, mask AttrMask) {
	prev := r.q.attr.State
	a.State = st
	r.q.attr = a
	r.q.sendOnModify(prev, mask)
}

// setState changes only the state.
func (r *sendRig) setState(st State) {
	a := r.q.attr
	r.modify(a, st, AttrState)
}

func (r *sendRig) post(wr SendWR) {
	r.t.Helper()
	require.NoError(r.t, r.q.PostSend(&wr))
}

// buf registers a region of n bytes filled with a pattern (key seeds it).
func (r *sendRig) buf(key uint32, n int, access Access) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(key)*31 + i*7 + i>>8)
	}
	r.mem.Register(key, b, access)
	return b
}

// tx drains every packet the QP will send now, checking that each encodes
// and decodes back to the same fields.
func (r *sendRig) tx() []sent {
	r.t.Helper()
	var out []sent
	for i := 0; i < 10000; i++ {
		pending := r.q.Pending(r.now)
		var o Outgoing
		if !r.q.Transmit(r.now, &o) {
			// Pending may promise a packet that a failing local operation
			// or a local protection error then prevents; it must not
			// promise one again.
			require.False(r.t, r.q.Pending(r.now), "Pending says a packet is ready after Transmit had none")
			return out
		}
		require.True(r.t, pending, "Pending missed a packet")
		wire := o.Pkt.AppendTo(nil)
		var d packet.Packet
		require.NoError(r.t, d.Decode(wire), "%s", o.Pkt.BTH.Opcode)
		require.Equal(r.t, len(wire), o.Pkt.Len())
		s := sent{Packet: d, AV: o.AV, SrcPort: o.SrcPort}
		s.Payload = append([]byte(nil), o.Pkt.Payload...)
		require.Equal(r.t, s.Payload, append([]byte(nil), d.Payload...))
		out = append(out, s)
	}
	r.t.Fatal("QP never stops transmitting")
	return nil
}

func (r *sendRig) recv(p packet.Packet) { r.q.Receive(r.now, &Incoming{Pkt: p}) }

func (r *sendRig) ack(psn uint32) { r.aeth(psn, packet.SyndromeACKUnlimited) }

func (r *sendRig) aeth(psn uint32, syn packet.Syndrome) {
	var p packet.Packet
	p.BTH = packet.BTHFields{Opcode: packet.RCAcknowledge, PKey: 0xFFFF, DestQP: rigQPN, PSN: psn}
	p.AETH = packet.AETHFields{Syndrome: syn}
	r.recv(p)
}

func (r *sendRig) readResp(op packet.Opcode, psn uint32, payload []byte) {
	var p packet.Packet
	p.BTH = packet.BTHFields{Opcode: op, PKey: 0xFFFF, DestQP: rigQPN, PSN: psn}
	p.AETH = packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited}
	p.Payload = payload
	r.recv(p)
}

func (r *sendRig) atomicAck(psn uint32, orig uint64) {
	var p packet.Packet
	p.BTH = packet.BTHFields{Opcode: packet.RCAtomicAcknowledge, PKey: 0xFFFF, DestQP: rigQPN, PSN: psn}
	p.AETH = packet.AETHFields{Syndrome: packet.SyndromeACKUnlimited}
	p.AtomicAck = orig
	r.recv(p)
}

func (r *sendRig) poll() []WC {
	var out []WC
	wc := make([]WC, 16)
	for {
		n := r.cq.Poll(wc)
		if n == 0 {
			return out
		}
		out = append(out, wc[:n]...)
	}
}

func ops(ps []sent) []packet.Opcode {
	o := make([]packet.Opcode, len(ps))
	for i := range ps {
		o[i] = ps[i].BTH.Opcode
	}
	return o
}

func psns(ps []sent) []uint32 {
	o := make([]uint32, len(ps))
	for i := range ps {
		o[i] = ps[i].BTH.PSN
	}
	return o
}

func wcIDs(wcs []WC) []uint64 {
	o := make([]uint64, len(wcs))
	for i := range wcs {
		o[i] = wcs[i].ID
	}
	return o
}

func seqPSNs(from uint32, n int) []uint32 {
	o := make([]uint32, n)
	for i := range o {
		o[i] = psnAdd(from, uint32(i))
	}
	return o
}

// expectOps builds the opcode sequence a message of n packets must have.
func expectOps(n int, first, middle, last, only packet.Opcode) []packet.Opcode {
	if n == 1 {
		return []packet.Opcode{only}
	}
	o := []packet.Opcode{first}
	for i := 0; i < n-2; i++ {
		o = append(o, middle)
	}
	return append(o, last)
}

func TestSegmentation(t *testing.T) {
	type opset struct {
		wr                        WROpcode
		first, middle, last, only packet.Opcode
	}
	rc := []opset{
		{WRSend, packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLast, packet.RCSendOnly},
		{WRSendImm, packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLastImm, packet.RCSendOnlyImm},
		{WRSendInv, packet.RCSendFirst, packet.RCSendMiddle, packet.RCSendLastInv, packet.RCSendOnlyInv},
		{WRWrite, packet.RCWriteFirst, packet.RCWriteMiddle, packet.RCWriteLast, packet.RCWriteOnly},
		{WRWriteImm, packet.RCWriteFirst, packet.RCWriteMiddle, packet.RCWriteLastImm, packet.RCWriteOnlyImm},
	}
	uc := []opset{
		{WRSend, packet.UCSendFirst, packet.UCSendMiddle, packet.UCSendLast, packet.UCSendOnly},
		{WRSendImm, packet.UCSendFirst, packet.UCSendMiddle, packet.UCSendLastImm, packet.UCSendOnlyImm},
		{WRWrite, packet.UCWriteFirst, packet.UCWriteMiddle, packet.UCWriteLast, packet.UCWriteOnly},
		{WRWriteImm, packet.UCWriteFirst, packet.UCWriteMiddle, packet.UCWriteLastImm, packet.UCWriteOnlyImm},
	}
	for _, typ := range []Type{RC, UC} {
		set := rc
		if typ == UC {
			set = uc
		}
		for _, mtu := range []MTU{256, 1024, 4096} {
			m := int(mtu)
			for _, length := range []int{0, 1, m - 1, m, m + 1, 2 * m, 3*m + 5} {
				for _, os := range set {
					name := fmt.Sprintf("%s/%d/%s/%d", typ, mtu, os.wr, length)
					t.Run(name, func(t *testing.T) {
						r := newSendRig(t, typ, mtu)
						data := r.buf(7, length+16, AccessLocalWrite)
						r.post(SendWR{ID: 1, Opcode: os.wr, Flags: SendSignaled | SendSolicited,
							SGL: []SGE{{Addr: 16, Length: uint32(length), LKey: 7}}, Imm: 0xA1B2C3D4,
							InvRKey: 0x5151, RemoteAddr: 0x10000, RKey: 0x77})
						ps := r.tx()
						n := max((length+m-1)/m, 1)
						require.Equal(t, expectOps(n, os.first, os.middle, os.last, os.only), ops(ps))
						require.Equal(t, seqPSNs(rigPSN, n), psns(ps))
						var got []byte
						for i, p := range ps {
							last := i == n-1
							if !last {
								assert.Len(t, p.Payload, m, "FIRST/MIDDLE carry exactly the MTU")
							} else {
								assert.LessOrEqual(t, len(p.Payload), m)
							}
							got = append(got, p.Payload...)
							assert.Equal(t, uint32(rigDestQP), p.BTH.DestQP)
							assert.Equal(t, uint16(0xFFFF), p.BTH.PKey)
							assert.Equal(t, uint8(0), p.BTH.TVer)
							assert.False(t, p.BTH.MigReq)
							assert.Equal(t, typ == RC && last, p.BTH.AckReq, "AckReq on packet %d", i)
							wantSE := last && (os.wr == WRSend || os.wr == WRSendImm || os.wr == WRSendInv || os.wr == WRWriteImm)
							assert.Equal(t, wantSE, p.BTH.SE, "SE on packet %d", i)
							info := p.Info()
							if info.Is(packet.HdrRETH) {
								assert.Equal(t, packet.RETHFields{VA: 0x10000, RKey: 0x77, Length: uint32(length)}, p.RETH)
							}
							if info.Is(packet.HdrImmDt) {
								assert.Equal(t, uint32(0xA1B2C3D4), p.Imm)
							}
							if info.Is(packet.HdrIETH) {
								assert.Equal(t, uint32(0x5151), p.IETH)
							}
							assert.Equal(t, uint16(0xC123), p.SrcPort)
							assert.Equal(t, &r.q.attr.AV, p.AV)
						}
						assert.True(t, bytes.Equal(data[16:16+length], got), "payload is the SGL's bytes")
						if typ == UC {
							wcs := r.poll()
							require.Len(t, wcs, 1, "UC completes when the last packet is out")
							assert.Equal(t, WCSuccess, wcs[0].Status)
							assert.Equal(t, uint32(length), wcs[0].ByteLen)
						} else {
							assert.Empty(t, r.poll(), "RC waits for the ACK")
							r.ack(psnAdd(rigPSN, uint32(n-1)))
							wcs := r.poll()
							require.Len(t, wcs, 1)
							assert.Equal(t, WC{ID: 1, Status: WCSuccess, Opcode: wcOpcode(os.wr), ByteLen: uint32(length),
								QPN: rigQPN, Flags: map[bool]WCFlags{true: WCWithImm}[os.wr == WRSendImm || os.wr == WRWriteImm]}, wcs[0])
						}
					})
				}
			}
		}
	}
}

// TestAckReqPattern checks rxe's AckReq rule inside a long RC message (every
// 66th packet, as noack_pkts++ > 64) and the 128-PSN unacknowledged window.
func TestAckReqPattern(t *testing.T) {
	r := newSendRig(t, RC, 256)
	const npkts = 200
	r.buf(1, npkts*256, 0)
	r.post(SendWR{ID: 9, Opcode: WRWrite, SGL: []SGE{{Length: npkts * 256, LKey: 1}}, RKey: 2})
	ps := r.tx()
	require.Len(t, ps, maxUnackedPSNs+1, "requester stops %d PSNs past the oldest unacked", maxUnackedPSNs)
	r.ack(psnAdd(rigPSN, 65))
	ps = append(ps, r.tx()...)
	r.ack(psnAdd(rigPSN, 131))
	ps = append(ps, r.tx()...)
	require.Len(t, ps, npkts)
	var asked []int
	for i, p := range ps {
		if p.BTH.AckReq {
			asked = append(asked, i)
		}
	}
	assert.Equal(t, []int{65, 131, 197, 199}, asked)
	r.ack(psnAdd(rigPSN, npkts-1))
	wcs := r.poll()
	assert.Empty(t, wcs, "unsignaled WQE retires silently")
	assert.Equal(t, 0, r.q.sq.len())
}

func TestGatherAndAlias(t *testing.T) {
	r := newSendRig(t, RC, 256)
	a := r.buf(1, 300, 0)
	b := r.buf(2, 300, 0)
	c := r.buf(3, 300, 0)
	// Single SGE: payload aliases registered memory.
	r.post(SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{{Addr: 10, Length: 200, LKey: 1}}})
	var o Outgoing
	require.True(t, r.q.Transmit(r.now, &o))
	require.Len(t, o.Pkt.Payload, 200)
	assert.Same(t, &a[10], &o.Pkt.Payload[0], "single-SGE payload is not copied")

	// Several SGEs, packets spanning SGE boundaries, a zero-length SGE.
	r.post(SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{{Addr: 0, Length: 100, LKey: 1}, {Addr: 5, Length: 0, LKey: 2},
		{Addr: 50, Length: 250, LKey: 2}, {Addr: 299, Length: 1, LKey: 3}}})
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCSendFirst, packet.RCSendLast}, ops(ps))
	want := append(append(append([]byte(nil), a[:100]...), b[50:300]...), c[299])
	assert.Equal(t, want, append(ps[0].Payload, ps[1].Payload...))
}

func TestInlineCopiedAtPost(t *testing.T) {
	r := newSendRig(t, RC, 256)
	data := []byte("hello, inline world")
	sgl := []SGE{{Addr: 0, Length: 999, LKey: 404}} // ignored with SendInline
	wr := SendWR{ID: 1, Opcode: WRSend, Flags: SendInline, Inline: data, SGL: sgl}
	require.NoError(t, r.q.PostSend(&wr))
	copy(data, "XXXXX") // caller reuses its buffer
	ps := r.tx()
	require.Len(t, ps, 1)
	assert.Equal(t, []byte("hello, inline world"), ps[0].Payload)
}

func TestUDSend(t *testing.T) {
	r := newSendRig(t, UD, 0, func(c *Config, a *Attr) { c.MaxMTU = 1024 })
	r.buf(1, 2048, 0)
	ah := &AddressVector{DGID: netip.MustParseAddr("10.0.0.9"), HopLimit: 3}
	r.post(SendWR{ID: 1, Opcode: WRSendImm, Flags: SendSignaled | SendSolicited, Imm: 7,
		SGL: []SGE{{Length: 1000, LKey: 1}}, AH: ah, RemoteQPN: 0x333, RemoteQKey: 0x4444})
	ah.HopLimit = 99 // the WQE keeps its own copy
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}, AH: ah,
		RemoteQPN: 0x333, RemoteQKey: 0x80000000})
	r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 1025, LKey: 1}}, AH: ah,
		RemoteQPN: 0x333, RemoteQKey: 1})
	ps := r.tx()
	require.Len(t, ps, 2, "a UD send longer than the MTU is not sent (C10-93.1.1)")
	assert.Equal(t, packet.UDSendOnlyImm, ps[0].BTH.Opcode)
	assert.Equal(t, packet.DETHFields{QKey: 0x4444, SrcQP: rigQPN}, ps[0].DETH)
	assert.Equal(t, uint32(0x333), ps[0].BTH.DestQP)
	assert.True(t, ps[0].BTH.SE)
	assert.False(t, ps[0].BTH.AckReq)
	assert.Equal(t, uint8(3), ps[0].AV.HopLimit)
	assert.Equal(t, uint32(7), ps[0].Imm)
	assert.Equal(t, packet.UDSendOnly, ps[1].BTH.Opcode)
	assert.Equal(t, uint32(rigQKey), ps[1].DETH.QKey, "QKey with the high bit set means the QP's own")
	assert.Equal(t, uint32(rigPSN+1), ps[1].BTH.PSN)
	wcs := r.poll()
	require.Len(t, wcs, 3)
	assert.Equal(t, []uint64{1, 2, 3}, wcIDs(wcs))
	for _, wc := range wcs {
		assert.Equal(t, WCSuccess, wc.Status)
	}
	assert.Equal(t, uint32(1025), wcs[2].ByteLen)
}

func TestGSIQKey(t *testing.T) {
	r := newSendRig(t, UD, 0, func(c *Config, a *Attr) { c.QPN = 1 })
	r.post(SendWR{ID: 1, Opcode: WRSend, AH: &AddressVector{}, RemoteQPN: 1, RemoteQKey: 5})
	ps := r.tx()
	require.Len(t, ps, 1)
	assert.Equal(t, packet.DETHFields{QKey: 0x80010000, SrcQP: 1}, ps[0].DETH)
}

func TestReadAndAtomicRequests(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 4096, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, SGL: []SGE{{Length: 1000, LKey: 1}}, RemoteAddr: 0xAB00, RKey: 0x99})
	r.post(SendWR{ID: 2, Opcode: WRRead, RemoteAddr: 0xAB00, RKey: 0x99}) // zero length
	r.post(SendWR{ID: 3, Opcode: WRCmpSwap, SGL: []SGE{{Length: 8, LKey: 1}}, RemoteAddr: 0x1008, RKey: 5,
		CompareAdd: 0x1111, Swap: 0x2222})
	r.post(SendWR{ID: 4, Opcode: WRFetchAdd, SGL: []SGE{{Length: 8, LKey: 1}}, RemoteAddr: 0x1010, RKey: 5,
		CompareAdd: 0x3333, Swap: 0x4444})
	r.post(SendWR{ID: 5, Opcode: WRSend, SGL: []SGE{{Length: 4, LKey: 1}}})
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCReadRequest, packet.RCReadRequest, packet.RCCompareSwap,
		packet.RCFetchAdd, packet.RCSendOnly}, ops(ps))
	// READ of 1000 bytes at MTU 256 takes PSNs 100..103; a zero-length READ one.
	assert.Equal(t, []uint32{100, 104, 105, 106, 107}, psns(ps))
	assert.Equal(t, packet.RETHFields{VA: 0xAB00, RKey: 0x99, Length: 1000}, ps[0].RETH)
	assert.Equal(t, packet.RETHFields{VA: 0xAB00, RKey: 0x99, Length: 0}, ps[1].RETH)
	assert.Equal(t, packet.AtomicETHFields{VA: 0x1008, RKey: 5, SwapAdd: 0x2222, Compare: 0x1111}, ps[2].AtomicETH)
	assert.Equal(t, packet.AtomicETHFields{VA: 0x1010, RKey: 5, SwapAdd: 0x3333}, ps[3].AtomicETH)
	for _, p := range ps[:4] {
		assert.True(t, p.BTH.AckReq)
		assert.Empty(t, p.Payload)
	}
}

func TestPSNWrap(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.SQPSN = 0xFFFFFE })
	r.buf(1, 4096, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 1024, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 10, LKey: 1}}})
	ps := r.tx()
	assert.Equal(t, []uint32{0xFFFFFE, 0xFFFFFF, 0, 1, 2}, psns(ps))
	r.ack(0xFFFFFF) // partial
	assert.Empty(t, r.poll())
	r.ack(1)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	r.ack(2)
	assert.Equal(t, []uint64{2}, wcIDs(r.poll()))
	assert.Equal(t, Never, r.q.Deadline(), "nothing unacknowledged, no timer")
}
