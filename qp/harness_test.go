package qp_test

// The acceptance harness: two QPs, each with its own CQs and fake memory,
// joined by a scripted wire on a fake clock. Every packet goes through real
// bytes (packet.AppendIPPacket, packet.ParseIP, packet.CheckICRC via
// Frame.ICRCOK, packet.Decode), so the wire format is exercised end to end;
// a packet whose ICRC fails is dropped, as rxe drops it. Tests script the
// wire with rules (drop, duplicate, hold for reordering, corrupt a byte of
// the Nth packet matching a predicate) or a free-form fault hook, and the
// run loop advances the fake clock to the earliest QP deadline whenever the
// wire is idle, with step and time bounds so that no test can hang.

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Fake memory

// endpoint is one side of the wire: a QP, its CQs, its memory and the
// completions polled so far.
type endpoint struct {
	name   string
	addr   netip.Addr
	qp     *qp.QP
	sendCQ *qp.CQ
	recvCQ *qp.CQ
	mem    *fakeMem
	local  []byte // lkey localKey at localVA
	remote []byte // rkey remoteKey at remoteVA
	ro     []byte // rkey roKey at roVA (remote read only)
	events []qp.Event

	sendWCs  []qp.WC
	recvWCs  []qp.WC
	sendWCAt []qp.Time // when each send completion was polled
}

// peerAV returns the address vector that reaches ep.
func (ep *endpoint) av() qp.AddressVector {
	return qp.AddressVector{DGID: ep.addr, HopLimit: 64}
}

func (ep *endpoint) poll(now qp.Time) {
	var wc [64]qp.WC
	for {
		n := ep.sendCQ.Poll(wc[:])
		ep.sendWCs = append(ep.sendWCs, wc[:n]...)
		for k := 0; k < n; k++ {
			ep.sendWCAt = append(ep.sendWCAt, now)
		}
		if n < len(wc) {
			break
		}
	}
	for {
		n := ep.recvCQ.Poll(wc[:])
		ep.recvWCs = append(ep.recvWCs, wc[:n]...)
		if n < len(wc) {
			break
		}
	}
}

// ---------------------------------------------------------------------------
// The wire

// Frame is one packet put on the wire: its bytes (IP header onwards), who
// sent it, when, and its decoded transport headers.
type Frame struct {
	Seq  int // transmit order, from 0
	From int // sender: 0 (A) or 1 (B)
	Time qp.Time
	Data []byte        // IP packet bytes as sent
	Pkt  packet.Packet // decoded from Data (payload aliases Data)

	Fate      string  // "", "dropped", "corrupted", ...: what the script did
	Delivered int     // times delivered to the peer's Receive
	DeliverAt qp.Time // time of the last delivery
}

func (f *Frame) Op() packet.Opcode { return f.Pkt.BTH.Opcode }
func (f *Frame) PSN() uint32       { return f.Pkt.BTH.PSN }

func (f *Frame) String() string {
	p := &f.Pkt
	s := fmt.Sprintf("#%d t=%d %s->%s %s psn=%#x", f.Seq, f.Time, "AB"[f.From:f.From+1], "BA"[f.From:f.From+1],
		p.BTH.Opcode, p.BTH.PSN)
	info := p.Info()
	if p.BTH.AckReq {
		s += " A"
	}
	if info.Is(packet.HdrRETH) {
		s += fmt.Sprintf(" reth{va=%#x rkey=%#x len=%d}", p.RETH.VA, p.RETH.RKey, p.RETH.Length)
	}
	if info.Is(packet.HdrAETH) {
		s += fmt.Sprintf(" aeth{%v msn=%d}", p.AETH.Syndrome, p.AETH.MSN)
	}
	if len(p.Payload) > 0 {
		s += fmt.Sprintf(" len=%d", len(p.Payload))
	}
	if f.Fate != "" {
		s += " [" + f.Fate + "]"
	}
	return s
}

// Pred selects frames.
type Pred func(f *Frame) bool

// Op matches any of the opcodes.
func Op(ops ...packet.Opcode) Pred {
	return func(f *Frame) bool {
		for _, o := range ops {
			if f.Op() == o {
				return true
			}
		}
		return false
	}
}

// FromA and FromB match the direction.
func FromA() Pred { return func(f *Frame) bool { return f.From == 0 } }
func FromB() Pred { return func(f *Frame) bool { return f.From == 1 } }

// PSNIs matches a PSN.
func PSNIs(psn uint32) Pred { return func(f *Frame) bool { return f.PSN() == psn } }

// Kind matches an operation kind.
func Kind(k packet.Kind) Pred { return func(f *Frame) bool { return f.Pkt.Info().Kind == k } }

// NAK matches ACKs carrying a NAK or RNR NAK syndrome.
func NAK() Pred {
	return func(f *Frame) bool {
		return f.Pkt.Info().Is(packet.HdrAETH) && !f.Pkt.AETH.Syndrome.IsACK()
	}
}

// RNR matches RNR NAKs.
func RNR() Pred {
	return func(f *Frame) bool {
		return f.Pkt.Info().Is(packet.HdrAETH) && f.Pkt.AETH.Syndrome.IsRNR()
	}
}

// All matches when every predicate matches.
func All(ps ...Pred) Pred {
	return func(f *Frame) bool {
		for _, p := range ps {
			if !p(f) {
				return false
			}
		}
		return true
	}
}

// Action is what the wire does with a frame.
type Action uint8

// Wire actions.
const (
	Deliver Action = iota
	Drop
	Duplicate // deliver twice
	Hold      // deliver after Arg more frames in the same direction (reorder)
	Corrupt   // flip a byte Arg bytes into the transport part (BTH onwards)
)

// Rule applies Act to the Nth frame matching Match (Nth 0: every match).
type Rule struct {
	Match Pred
	Nth   int
	Act   Action
	Arg   int
	seen  int
	Fired int
}

type held struct {
	f     *Frame
	after int
}

type delivery struct {
	f    *Frame
	data []byte
}

// Harness joins endpoints A and B.
type Harness struct {
	t   testing.TB
	Now qp.Time
	A   *endpoint
	B   *endpoint
	eps [2]*endpoint

	// Latency is the time one delivery takes on the fake clock.
	Latency qp.Time
	// Burst bounds the packets each QP transmits, and the wire delivers,
	// per step, so that requests, responses and ACKs interleave.
	Burst int
	// MaxSteps and MaxTime bound a Run.
	MaxSteps int
	MaxTime  qp.Time

	Rules []*Rule
	// Fault, when set, decides the fate of frames no rule claimed.
	Fault func(f *Frame) (Action, int)
	// OnSend is called for every frame when it is transmitted.
	OnSend func(f *Frame)
	// OnDeliver is called after a frame has been handed to Receive.
	OnDeliver func(f *Frame)

	Frames []*Frame // everything transmitted, in order
	// Deliveries lists the frames handed to Receive, in order (a frame
	// delivered twice appears twice), for dumps.
	Deliveries []*Frame

	queue []delivery
	held  []held
	timed []timedAction

	// Wire-level drops.
	ICRCDrops  int
	ParseDrops int
	QPNDrops   int

	// Errors records violations the harness itself detects (Pending and
	// Transmit disagreeing, decoding our own output failing, ...).
	Errors []string
	steps  int
}

type timedAction struct {
	at qp.Time
	fn func()
}

// ep is the configuration of one endpoint's QP.
type epConfig struct {
	Type       qp.Type
	QPN        uint32
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	CQDepth    int
	SRQ        *qp.SRQ
	// RemoteAccess is the access of the endpoint's remote region.
	RemoteAccess qp.Access
	// IPv6 puts both endpoints on IPv6 addresses (fd00::1, fd00::2).
	IPv6 bool
}

// newEndpoint creates an endpoint and its QP in RESET.
func newEndpoint(t testing.TB, name string, addr string, c epConfig) *endpoint {
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 1024
	}
	if c.MaxRecvWR == 0 {
		c.MaxRecvWR = 1024
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 4
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 4
	}
	if c.CQDepth == 0 {
		c.CQDepth = defaultCQN
	}
	if c.RemoteAccess == 0 {
		c.RemoteAccess = allRemote
	}
	ep := &endpoint{
		name:   name,
		addr:   netip.MustParseAddr(addr),
		sendCQ: qp.NewCQ(c.CQDepth),
		recvCQ: qp.NewCQ(c.CQDepth),
		mem:    newFakeMem(),
		local:  make([]byte, bufSize),
		remote: make([]byte, bufSize),
		ro:     make([]byte, bufSize),
	}
	ep.mem.Register(localKey, localVA, ep.local, qp.AccessLocalWrite)
	ep.mem.Register(remoteKey, remoteVA, ep.remote, c.RemoteAccess)
	ep.mem.Register(roKey, roVA, ep.ro, qp.AccessRemoteRead)
	q, err := qp.New(qp.Config{
		QPN:        c.QPN,
		Type:       c.Type,
		SendCQ:     ep.sendCQ,
		RecvCQ:     ep.recvCQ,
		SRQ:        c.SRQ,
		MaxSendWR:  c.MaxSendWR,
		MaxRecvWR:  c.MaxRecvWR,
		MaxSendSGE: c.MaxSendSGE,
		MaxRecvSGE: c.MaxRecvSGE,
		MaxInline:  512,
		Memory:     ep.mem,
		MaxMTU:     4096,
		SrcPort:    0xC000 | uint16(c.QPN&0x3FFF),
		Events:     func(e qp.Event) { ep.events = append(ep.events, e) },
	})
	require.NoError(t, err)
	ep.qp = q
	return ep
}

// newHarness returns a harness with endpoints A (10.0.0.1, QPN 0x11) and B
// (10.0.0.2, QPN 0x22), QPs in RESET.
func newHarness(t testing.TB, a, b epConfig) *Harness {
	if a.QPN == 0 {
		a.QPN = 0x11
	}
	if b.QPN == 0 {
		b.QPN = 0x22
	}
	h := &Harness{
		t:        t,
		Latency:  1000,
		Burst:    4,
		MaxSteps: 200_000,
		MaxTime:  600 * 1_000_000_000,
	}
	h.A = newEndpoint(t, "A", "10.0.0.1", a)
	h.B = newEndpoint(t, "B", "10.0.0.2", b)
	if a.IPv6 || b.IPv6 {
		h.A.addr, h.B.addr = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	h.eps = [2]*endpoint{h.A, h.B}
	return h
}

// link holds the attributes two connected QPs use.
type link struct {
	MTU             qp.MTU
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MinRNRTimer     uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	APSN, BPSN      uint32 // initial send PSNs of A and B
	AAccess         qp.Access
	BAccess         qp.Access
	QKey            uint32
}

// defaultLink is the "typical" attribute set: MTU 1024, timeout 14, retry 7,
// rnr_retry 7, max_rd_atomic 16.
func defaultLink() link {
	return link{
		MTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1,
		MaxRdAtomic: 16, MaxDestRdAtomic: 16, APSN: 0x1000, BPSN: 0x8000,
		AAccess: allRemote, BAccess: allRemote, QKey: 0x11111111,
	}
}

// modify is the one place the tests call QP.Modify.
func modify(q *qp.QP, a *qp.Attr, m qp.AttrMask) error { return q.Modify(a, m) }

// bringUp moves one QP RESET -> INIT -> RTR -> RTS.
func bringUp(t testing.TB, q *qp.QP, peer *endpoint, l link, access qp.Access, sqPSN, rqPSN uint32) {
	t.Helper()
	typ := q.Type()
	a := qp.Attr{State: qp.Init, PKeyIndex: 0, Port: 1, AccessFlags: access, QKey: l.QKey}
	m := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if typ == qp.UD {
		m |= qp.AttrQKey
	} else {
		m |= qp.AttrAccessFlags
	}
	require.NoError(t, modify(q, &a, m), "qp %d to INIT", q.QPN())

	a = qp.Attr{State: qp.RTR}
	m = qp.AttrState
	if typ != qp.UD {
		a.AV = peer.av()
		a.PathMTU = l.MTU
		a.DestQPN = peer.qp.QPN()
		a.RQPSN = rqPSN
		m |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
		if typ == qp.RC {
			a.MaxDestRdAtomic = l.MaxDestRdAtomic
			a.MinRNRTimer = l.MinRNRTimer
			m |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		}
	}
	require.NoError(t, modify(q, &a, m), "qp %d to RTR", q.QPN())

	a = qp.Attr{State: qp.RTS, SQPSN: sqPSN}
	m = qp.AttrState | qp.AttrSQPSN
	if typ == qp.RC {
		a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = l.Timeout, l.RetryCnt, l.RNRRetry, l.MaxRdAtomic
		m |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	require.NoError(t, modify(q, &a, m), "qp %d to RTS", q.QPN())
	require.Equal(t, qp.RTS, q.State())
}

// connect brings both QPs of h to RTS with link l.
func (h *Harness) connect(l link) {
	h.t.Helper()
	bringUp(h.t, h.A.qp, h.B, l, l.AAccess, l.APSN, l.BPSN)
	bringUp(h.t, h.B.qp, h.A, l, l.BAccess, l.BPSN, l.APSN)
}

// pair returns a harness with two connected QPs of type typ.
func pair(t testing.TB, typ qp.Type, l link) *Harness {
	h := newHarness(t, epConfig{Type: typ}, epConfig{Type: typ})
	h.connect(l)
	return h
}

// ---------------------------------------------------------------------------
// Work-request helpers

// fill writes a deterministic pattern, different per seed, into b.
func fill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 12345
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

func (ep *endpoint) postSend(t testing.TB, wr qp.SendWR) {
	t.Helper()
	if wr.Flags&qp.SendSignaled == 0 {
		wr.Flags |= qp.SendSignaled
	}
	require.NoError(t, ep.qp.PostSend(&wr), "%s post send %d %v", ep.name, wr.ID, wr.Opcode)
}

func (ep *endpoint) postRecv(t testing.TB, id uint64, off uint64, n uint32) {
	t.Helper()
	wr := qp.RecvWR{ID: id, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}}}
	require.NoError(t, ep.qp.PostRecv(&wr), "%s post recv %d", ep.name, id)
}

// sendWR builds a SEND of n bytes from ep.local[off:].
func sendWR(id uint64, off uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}}}
}

// writeWR builds an RDMA WRITE of n bytes from local[off:] to the peer's
// remote[roff:].
func writeWR(id uint64, off, roff uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey}
}

// readWR builds an RDMA READ of n bytes from the peer's remote[roff:] into
// local[off:].
func readWR(id uint64, off, roff uint64, n uint32) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: qp.WRRead, SGL: []qp.SGE{{Addr: localVA + off, Length: n, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey}
}

// atomicWR builds a FETCH_ADD or CMP_SWAP on the peer's remote[roff:],
// returning the original value into local[off:].
func atomicWR(id uint64, op qp.WROpcode, off, roff uint64, cmpAdd, swap uint64) qp.SendWR {
	return qp.SendWR{ID: id, Opcode: op, SGL: []qp.SGE{{Addr: localVA + off, Length: 8, LKey: localKey}},
		RemoteAddr: remoteVA + roff, RKey: remoteKey, CompareAdd: cmpAdd, Swap: swap}
}

// requireWCs checks completions: IDs in order, and every status.
func requireWCs(t testing.TB, ws []qp.WC, ids []uint64, status qp.WCStatus) {
	t.Helper()
	got := make([]uint64, len(ws))
	for i, w := range ws {
		got[i] = w.ID
	}
	require.Equal(t, ids, got, "completion IDs in posting order: %s", wcsString(ws))
	for _, w := range ws {
		require.Equal(t, status, w.Status, "completion %d status: %s", w.ID, wcsString(ws))
	}
}

func seq(from, n uint64) []uint64 {
	r := make([]uint64, n)
	for i := range r {
		r[i] = from + uint64(i)
	}
	return r
}

// TestHarnessRules checks the harness itself: the Nth-match rules act on
// exactly the frames they name, a held frame is delivered after the frames
// it waited for, a corrupted frame fails its ICRC, and a duplicated one is
// delivered twice.
func TestHarnessRules(t *testing.T) {
	h := pair(t, qp.RC, defaultLink())
	h.Burst = 32
	drop := h.Drop(All(FromA(), Op(packet.RCSendMiddle)), 2)
	dup := h.Dup(All(FromA(), Op(packet.RCSendFirst)), 1)
	hold := h.Reorder(All(FromA(), Op(packet.RCSendLast)), 1, 2)
	bad := h.CorruptAt(All(FromA(), Op(packet.RCSendOnly)), 1, 30)
	h.B.postRecv(t, 100, 0, 8192)
	h.B.postRecv(t, 101, 8192, 8192)
	h.B.postRecv(t, 102, 16384, 8192)
	h.A.postSend(t, sendWR(1, 0, multiSize))
	h.A.postSend(t, sendWR(2, 0, 500))
	h.A.postSend(t, sendWR(3, 0, 500))
	h.MustRun(h.sendsDone(h.A, 3))
	for _, r := range []*Rule{drop, dup, hold, bad} {
		require.Equal(t, 1, r.Fired)
	}
	fs := h.Select(FromA())
	require.Equal(t, "duplicated", fs[0].Fate)
	require.Equal(t, 2, fs[0].Delivered)
	require.Equal(t, packet.RCSendMiddle, fs[2].Op())
	require.Equal(t, "dropped", fs[2].Fate)
	require.Zero(t, fs[2].Delivered)
	require.Equal(t, "held", fs[3].Fate)
	require.Equal(t, "corrupted", fs[4].Fate)
	require.Zero(t, fs[4].Delivered, "a corrupted frame never reaches Receive")
	require.Equal(t, 1, h.ICRCDrops)
	require.Greater(t, fs[3].DeliverAt, fs[5].DeliverAt, "the held LAST arrived after the frames sent behind it")
	require.Equal(t, fs[0].Data, packet.AppendIPPacket(nil, &packet.Addressing{Src: h.A.addr, Dst: h.B.addr,
		SrcPort: h.A.qp.Config().SrcPort, HopLimit: 64, DF: true, IPID: 0}, &fs[0].Pkt), "frames are the real encoding")
}
