package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// The replay tests put a softroce device in the place of one of the two
// kernel rxe hosts of a capture: the device gets that host's address, MAC,
// QPN and PSNs, its work requests are rebuilt from the host's requests in
// the capture, and its memory from what the peer read and wrote. Then the
// capture is walked in order: the peer's frames go into HandleFrame, and
// each time the capture shows the host sending, the device must send the
// same frame: byte for byte from the IP header on, except for the IPv4 ID
// (rxe's is a per-destination counter) and the IP checksum and ICRC that
// cover it. Both ends of every RC and UC QP pair in the captures are
// replayed, so softroce is checked as requester and as responder against
// the kernel's own packets, ACKs, MSNs, read responses and atomic ACKs.
// (loss.pcap is not replayed: the messages of its requester cannot be
// rebuilt from a capture that lacks the lost packets.)

// capPkt is one RoCE frame of a capture.
type capPkt struct {
	no       int
	t        qp.Time
	data     []byte
	src, dst netip.Addr
	sport    uint16
	ttl, tos uint8
	mac      [6]byte
	pkt      packet.Packet
}

func loadCapture(t *testing.T, name string) []*capPkt {
	r, err := pcapio.Open(filepath.Join("..", "testdata", "pcaps", "rxe", name))
	require.NoError(t, err)
	defer r.Close()
	var out []*capPkt
	var t0 int64
	for no := 1; ; no++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data := append([]byte(nil), rec.Data...)
		var f packet.Frame
		if packet.ParseFrame(data, &f) != nil {
			continue
		}
		c := &capPkt{no: no, data: data}
		if t0 == 0 {
			t0 = rec.Time.UnixNano()
		}
		c.t = qp.Time(rec.Time.UnixNano() - t0)
		a := f.Addressing()
		c.src, c.dst, c.sport, c.ttl, c.tos = a.Src.Unmap(), a.Dst.Unmap(), a.SrcPort, a.HopLimit, a.TrafficClass
		copy(c.mac[:], data[6:12])
		require.NoError(t, c.pkt.Decode(f.Transport), "frame %d", no)
		out = append(out, c)
	}
	return out
}

func isResponse(p *packet.Packet) bool {
	switch p.Info().Kind {
	case packet.KindAck, packet.KindAtomicAck, packet.KindReadResponse:
		return true
	}
	return false
}

// capMsg is a request message rebuilt from its packets.
type capMsg struct {
	first, last *capPkt
	kind        packet.Kind
	payload     []byte
	npkts       int
}

func messages(pkts []*capPkt) []*capMsg {
	var out []*capMsg
	var cur *capMsg
	for _, c := range pkts {
		info := c.pkt.Info()
		if info.Pos == packet.PosFirst || info.Pos == packet.PosOnly {
			cur = &capMsg{first: c, kind: info.Kind}
		}
		if cur == nil {
			continue
		}
		cur.payload = append(cur.payload, c.pkt.Payload...)
		cur.npkts++
		if info.Pos == packet.PosLast || info.Pos == packet.PosOnly {
			cur.last = c
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

// region is remote-accessible memory of the replayed host, as the peer's
// RETHs and AtomicETHs address it.
type region struct {
	rkey     uint32
	lo, hi   uint64
	init     []byte // initial contents
	expected []byte // contents after every request
	mr       *MR
}

// relocateMR gives a registered region the address and key the capture
// uses, so that the peer's captured requests address it.
func relocateMR(d *Device, m *MR, va uint64, key uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mrs[m.index].mr = nil
	m.index = key >> 8
	for int(m.index) >= len(d.mrs) {
		d.mrs = append(d.mrs, mrSlot{lastKey: -1})
	}
	d.mrs[m.index].mr = m
	m.va, m.lkey, m.rkey = va, key, key
}

// sameWire compares a frame the device built with the captured one, from
// the IP header on, except the IPv4 ID, header checksum and ICRC.
func sameWire(t *testing.T, ours, theirs []byte, what string) bool {
	var fo, ft packet.Frame
	if !assert.NoError(t, packet.ParseFrame(ours, &fo), what) || !assert.True(t, fo.ICRCOK(), "%s: ICRC", what) {
		return false
	}
	require.NoError(t, packet.ParseFrame(theirs, &ft))
	io, it := append([]byte(nil), fo.IP...), append([]byte(nil), ft.IP...)
	if fo.IsIPv4() && ft.IsIPv4() {
		for _, b := range [][]byte{io, it} {
			b[4], b[5], b[10], b[11] = 0, 0, 0, 0
		}
	}
	ok := assert.Equal(t, fmt.Sprintf("% x", it), fmt.Sprintf("% x", io), "%s: IP header", what)
	ok = assert.Equal(t, fmt.Sprintf("% x", ft.UDP), fmt.Sprintf("% x", fo.UDP), "%s: UDP header", what) && ok
	n := len(ft.Transport) - packet.ICRCLen
	if n > 64 && len(fo.Transport)-packet.ICRCLen == n {
		// Show a mismatch in the headers readably; payloads compare whole.
		ok = assert.Equal(t, fmt.Sprintf("% x", ft.Transport[:64]), fmt.Sprintf("% x", fo.Transport[:64]), "%s: transport headers", what) && ok
	}
	ok = assert.Equal(t, ft.Transport[:n], fo.Transport[:max(0, len(fo.Transport)-packet.ICRCLen)], "%s: transport", what) && ok
	return ok
}

type replayEnd struct {
	host, peer       netip.Addr
	hostQPN, peerQPN uint32
	typ              qp.Type
	pkts             []*capPkt // the QP pair's frames, capture order
}

// qpPairs finds the RC and UC QP pairs of a capture: frames between two
// hosts with one UDP source port (rxe's port is symmetric in the QPNs).
func qpPairs(pkts []*capPkt) []replayEnd {
	type key struct {
		a, b  netip.Addr
		sport uint16
	}
	groups := map[key][]*capPkt{}
	var order []key
	for _, c := range pkts {
		if c.pkt.BTH.Opcode.Transport() != packet.TransportRC && c.pkt.BTH.Opcode.Transport() != packet.TransportUC {
			continue
		}
		k := key{c.src, c.dst, c.sport}
		if c.dst.Less(c.src) {
			k.a, k.b = c.dst, c.src
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	var ends []replayEnd
	for _, k := range order {
		g := groups[k]
		qpn := map[netip.Addr]uint32{}
		for _, c := range g {
			qpn[c.dst] = c.pkt.BTH.DestQP
		}
		typ := qp.RC
		if g[0].pkt.BTH.Opcode.Transport() == packet.TransportUC {
			typ = qp.UC
		}
		for _, h := range []netip.Addr{k.a, k.b} {
			p := k.b
			if h == k.b {
				p = k.a
			}
			hq, ok1 := qpn[h]
			pq, ok2 := qpn[p]
			if ok1 && ok2 {
				ends = append(ends, replayEnd{host: h, peer: p, hostQPN: hq, peerQPN: pq, typ: typ, pkts: g})
			}
		}
	}
	return ends
}

func TestReplayRxeCaptures(t *testing.T) {
	files := []string{"rc_pingpong.pcap", "rc_pingpong_ipv6.pcap", "uc_pingpong.pcap", "write.pcap",
		"read.pcap", "atomic.pcap", "send.pcap", "veth_local_write.pcap"}
	ends := 0
	for _, name := range files {
		pkts := loadCapture(t, name)
		for _, e := range qpPairs(pkts) {
			ends++
			t.Run(fmt.Sprintf("%s/%s_qp%d", name, e.host, e.hostQPN), func(t *testing.T) { replay(t, e) })
		}
	}
	assert.GreaterOrEqual(t, ends, 16)
}

func replay(t *testing.T, e replayEnd) {
	var fromHost, fromPeer []*capPkt
	for _, c := range e.pkts {
		if c.src == e.host {
			fromHost = append(fromHost, c)
		} else {
			fromPeer = append(fromPeer, c)
		}
	}
	reqs := func(ps []*capPkt) []*capPkt {
		var out []*capPkt
		for _, c := range ps {
			if !isResponse(&c.pkt) {
				out = append(out, c)
			}
		}
		return out
	}
	hostReqs, peerReqs := reqs(fromHost), reqs(fromPeer)
	hostMsgs, peerMsgs := messages(hostReqs), messages(peerReqs)
	if e.hostQPN < firstQPN {
		t.Skipf("host QPN %d is below softroce's first QPN", e.hostQPN)
	}

	// Path MTU: the payload of FIRST and MIDDLE packets.
	mtu := qp.MTU(1024)
	for _, c := range e.pkts {
		if p := c.pkt.Info().Pos; p == packet.PosFirst || p == packet.PosMiddle {
			mtu = qp.MTU(len(c.pkt.Payload))
			break
		}
	}

	cfg := Config{Name: "rxe0", MAC: fromHost[0].mac, MTU: 1500, Seed: 1}
	if e.host.Is4() {
		cfg.IPv4 = e.host
	} else {
		cfg.IPv6 = e.host
	}
	d, err := New(cfg)
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	const depth = 512
	scq, err := d.CreateCQ(depth)
	require.NoError(t, err)
	rcq, err := d.CreateCQ(depth)
	require.NoError(t, err)
	var x *QP
	for {
		x, err = d.CreateQP(pd, QPInit{Type: e.typ, SendCQ: scq, RecvCQ: rcq,
			Cap: QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		if x.QPN() >= e.hostQPN {
			break
		}
	}
	require.Equal(t, e.hostQPN, x.QPN())

	// Connect as the host was.
	first := fromHost[0]
	sgid := d.GIDIndex(e.host)
	require.GreaterOrEqual(t, sgid, 0)
	init := qp.Attr{State: qp.Init, Port: 1, AccessFlags: rwAll &^ qp.AccessLocalWrite}
	require.NoError(t, x.Modify(&init, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	rtr := qp.Attr{State: qp.RTR, PathMTU: mtu, DestQPN: e.peerQPN, MaxDestRdAtomic: 16, MinRNRTimer: 12,
		AV: qp.AddressVector{DGID: e.peer, SGIDIndex: uint8(sgid), HopLimit: first.ttl, TrafficClass: first.tos}}
	if len(peerReqs) > 0 {
		rtr.RQPSN = peerReqs[0].pkt.BTH.PSN
	}
	rtrMask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	rts := qp.Attr{State: qp.RTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	if len(hostReqs) > 0 {
		rts.SQPSN = hostReqs[0].pkt.BTH.PSN
	}
	rtsMask := qp.AttrState | qp.AttrSQPSN
	if e.typ == qp.RC {
		rtrMask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		rtsMask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	require.NoError(t, x.Modify(&rtr, rtrMask))
	require.NoError(t, x.Modify(&rts, rtsMask))
	require.Equal(t, first.sport, x.SrcPort(), "rxe's source port for the QP pair")

	// The peer's requests: receives for its SENDs, memory for the rest.
	regions := map[uint32]*region{}
	regionOf := func(rkey uint32, va uint64, n uint64) {
		r := regions[rkey]
		if r == nil {
			r = &region{rkey: rkey, lo: va, hi: va + n}
			regions[rkey] = r
		}
		r.lo, r.hi = min(r.lo, va), max(r.hi, va+n)
	}
	var recvBufs [][]byte
	for _, m := range peerMsgs {
		p := &m.first.pkt
		switch m.kind {
		case packet.KindSend:
			recvBufs = append(recvBufs, make([]byte, max(len(m.payload), 1)))
		case packet.KindWrite, packet.KindReadRequest:
			regionOf(p.RETH.RKey, p.RETH.VA, uint64(p.RETH.Length))
		case packet.KindCompareSwap, packet.KindFetchAdd:
			regionOf(p.AtomicETH.RKey, p.AtomicETH.VA, 8)
		}
		if m.kind == packet.KindWrite && m.last.pkt.Info().Is(packet.HdrImmDt) {
			recvBufs = append(recvBufs, make([]byte, 1))
		}
	}
	for _, r := range regions {
		r.init = make([]byte, r.hi-r.lo)
	}
	// Initial contents: what the host's read responses and atomic ACKs say
	// the memory held.
	respTo := func(m *capMsg, psn uint32) bool {
		d := (psn - m.first.pkt.BTH.PSN) & 0xFFFFFF
		return d < 1<<23 && int(d) < max(1, int(m.first.pkt.RETH.Length+uint32(mtu)-1)/int(mtu))
	}
	seenAtomic := map[uint64]bool{}
	for _, m := range peerMsgs {
		p := &m.first.pkt
		switch m.kind {
		case packet.KindReadRequest:
			r := regions[p.RETH.RKey]
			for _, c := range fromHost {
				if c.pkt.Info().Kind == packet.KindReadResponse && respTo(m, c.pkt.BTH.PSN) {
					off := p.RETH.VA - r.lo + uint64((c.pkt.BTH.PSN-p.BTH.PSN)&0xFFFFFF)*uint64(mtu)
					copy(r.init[off:], c.pkt.Payload)
				}
			}
		case packet.KindCompareSwap, packet.KindFetchAdd:
			r := regions[p.AtomicETH.RKey]
			if seenAtomic[p.AtomicETH.VA] {
				continue
			}
			seenAtomic[p.AtomicETH.VA] = true
			for _, c := range fromHost {
				if c.pkt.Info().Kind == packet.KindAtomicAck && c.pkt.BTH.PSN == p.BTH.PSN {
					binary.LittleEndian.PutUint64(r.init[p.AtomicETH.VA-r.lo:], c.pkt.AtomicAck)
					break
				}
			}
		}
	}
	for _, r := range regions {
		buf := append([]byte(nil), r.init...)
		r.mr, err = d.RegMR(pd, buf, rwAll)
		require.NoError(t, err)
		relocateMR(d, r.mr, r.lo, r.rkey)
		r.expected = append([]byte(nil), r.init...)
	}
	for i, b := range recvBufs {
		m, err := d.RegMR(pd, b, qp.AccessLocalWrite)
		require.NoError(t, err)
		require.NoError(t, x.PostRecv(&qp.RecvWR{ID: uint64(1000 + i), SGL: []qp.SGE{{Addr: m.Addr(), Length: uint32(len(b)), LKey: m.LKey()}}}))
	}

	// The host's own requests become work requests.
	type posted struct {
		msg   *capMsg
		local []byte
	}
	var sent []posted
	wrs := map[*capPkt]qp.SendWR{} // by the message's first frame
	for i, m := range hostMsgs {
		p := &m.first.pkt
		last := &m.last.pkt
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
			local = make([]byte, p.RETH.Length)
		case packet.KindCompareSwap, packet.KindFetchAdd:
			wr.Opcode = qp.WRFetchAdd
			wr.CompareAdd = p.AtomicETH.SwapAdd
			if m.kind == packet.KindCompareSwap {
				wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRCmpSwap, p.AtomicETH.Compare, p.AtomicETH.SwapAdd
			}
			wr.RemoteAddr, wr.RKey = p.AtomicETH.VA, p.AtomicETH.RKey
			local = make([]byte, 8)
		default:
			t.Fatalf("frame %d: unexpected request kind %s", m.first.no, m.kind)
		}
		if len(local) > 0 {
			lm, err := d.RegMR(pd, local, qp.AccessLocalWrite)
			require.NoError(t, err)
			wr.SGL = []qp.SGE{{Addr: lm.Addr(), Length: uint32(len(local)), LKey: lm.LKey()}}
		}
		sent = append(sent, posted{m, local})
		wrs[m.first] = wr
	}

	// Walk the capture. A host message is posted when the capture shows its
	// first packet, as the application posted it. After each frame from the
	// peer and each post, the device's output is drained at once (as if the
	// link had no delay), so responses come packet by packet, as from rxe's
	// responder. Requests and responses are compared as two streams, each
	// in order: how they interleave depends on the hosts' timing.
	one := make([]link.Frame, 1)
	var reqQ, respQ [][]byte
	drain := func(now qp.Time) {
		for {
			k, _ := d.Output(now, one)
			if k == 0 {
				return
			}
			f := append([]byte(nil), one[0].Data...)
			var fr packet.Frame
			var p packet.Packet
			require.NoError(t, packet.ParseFrame(f, &fr))
			require.NoError(t, p.Decode(fr.Transport))
			if isResponse(&p) {
				respQ = append(respQ, f)
			} else {
				reqQ = append(reqQ, f)
			}
		}
	}
	for _, c := range e.pkts {
		d.Tick(c.t)
		drain(c.t)
		if c.src == e.peer {
			before := d.Counters()
			d.HandleFrame(c.t, link.Frame{Data: c.data})
			after := d.Counters()
			require.Equal(t, before.RcvdPkts+1, after.RcvdPkts, "frame %d delivered", c.no)
			drain(c.t)
			continue
		}
		if wr, ok := wrs[c]; ok {
			require.NoError(t, x.PostSend(&wr), "message at frame %d", c.no)
			drain(c.t)
		}
		q := &reqQ
		if isResponse(&c.pkt) {
			q = &respQ
		}
		require.NotEmpty(t, *q, "frame %d (%s PSN %d): the device has it to send", c.no, c.pkt.BTH.Opcode, c.pkt.BTH.PSN)
		ours := (*q)[0]
		*q = (*q)[1:]
		if !sameWire(t, ours, c.data, fmt.Sprintf("frame %d %s", c.no, c.pkt.BTH.Opcode)) {
			t.FailNow()
		}
	}
	last := e.pkts[len(e.pkts)-1].t
	drain(last)
	assert.Empty(t, reqQ, "no more requests than the host sent")
	assert.Empty(t, respQ, "no more responses than the host sent")

	// Completions and memory.
	wcs := make([]qp.WC, depth)
	n := scq.Poll(wcs)
	require.Equal(t, len(sent), n, "send completions")
	for i, wc := range wcs[:n] {
		require.Equal(t, qp.WCSuccess, wc.Status, "wr %d: %s", i, wc.Status)
		assert.Equal(t, uint64(i), wc.ID)
		s := sent[i]
		switch s.msg.kind {
		case packet.KindReadRequest:
			var want []byte
			for _, c := range fromPeer {
				if c.pkt.Info().Kind == packet.KindReadResponse && respTo(s.msg, c.pkt.BTH.PSN) {
					want = append(want, c.pkt.Payload...)
				}
			}
			assert.Equal(t, want, s.local, "read data of wr %d", i)
		case packet.KindCompareSwap, packet.KindFetchAdd:
			for _, c := range fromPeer {
				if c.pkt.Info().Kind == packet.KindAtomicAck && c.pkt.BTH.PSN == s.msg.first.pkt.BTH.PSN {
					assert.Equal(t, c.pkt.AtomicAck, binary.LittleEndian.Uint64(s.local), "atomic original of wr %d", i)
				}
			}
		}
	}
	var recvs []qp.WC
	for {
		k := rcq.Poll(wcs)
		if k == 0 {
			break
		}
		recvs = append(recvs, wcs[:k]...)
	}
	require.Len(t, recvs, len(recvBufs), "receive completions")
	ri := 0
	for _, m := range peerMsgs {
		p := &m.first.pkt
		switch m.kind {
		case packet.KindSend:
			wc := recvs[ri]
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, uint32(len(m.payload)), wc.ByteLen)
			assert.Equal(t, m.payload, recvBufs[ri][:len(m.payload)], "SEND at frame %d", m.first.no)
			ri++
		case packet.KindWrite:
			r := regions[p.RETH.RKey]
			copy(r.expected[p.RETH.VA-r.lo:], m.payload)
			if m.last.pkt.Info().Is(packet.HdrImmDt) {
				ri++
			}
		case packet.KindCompareSwap, packet.KindFetchAdd:
			r := regions[p.AtomicETH.RKey]
			w := r.expected[p.AtomicETH.VA-r.lo:]
			v := binary.LittleEndian.Uint64(w)
			if m.kind == packet.KindFetchAdd {
				binary.LittleEndian.PutUint64(w, v+p.AtomicETH.SwapAdd)
			} else if v == p.AtomicETH.Compare {
				binary.LittleEndian.PutUint64(w, p.AtomicETH.SwapAdd)
			}
		}
	}
	keys := make([]uint32, 0, len(regions))
	for k := range regions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		r := regions[k]
		assert.Equal(t, r.expected, r.mr.Bytes(), "memory of rkey %#x after the peer's requests", k)
	}
}

// TestReplayRxeUDCaptures replays each host of the UD captures: the
// datagrams the device sends (DETH, source port, PSNs, immediate data) must
// be rxe's, and the peer's must land in receive buffers behind the 40-byte
// GRH area.
func TestReplayRxeUDCaptures(t *testing.T) {
	ends := 0
	for _, name := range []string{"ud_pingpong.pcap", "udaddy.pcap"} {
		var ud []*capPkt
		for _, c := range loadCapture(t, name) {
			if c.pkt.Info().Is(packet.HdrDETH) && c.pkt.BTH.DestQP != gsiQPN && c.pkt.DETH.SrcQP != gsiQPN {
				ud = append(ud, c)
			}
		}
		hosts := map[netip.Addr]uint32{}
		for _, c := range ud {
			hosts[c.src] = c.pkt.DETH.SrcQP
		}
		require.Len(t, hosts, 2, name)
		for h, qpn := range hosts {
			ends++
			t.Run(fmt.Sprintf("%s/%s_qp%d", name, h, qpn), func(t *testing.T) { replayUD(t, h, qpn, ud) })
		}
	}
	assert.Equal(t, 4, ends)
}

func replayUD(t *testing.T, host netip.Addr, qpn uint32, pkts []*capPkt) {
	var mine, theirs []*capPkt
	for _, c := range pkts {
		if c.src == host {
			mine = append(mine, c)
		} else if c.pkt.BTH.DestQP == qpn {
			theirs = append(theirs, c)
		}
	}
	require.NotEmpty(t, mine)
	require.NotEmpty(t, theirs)
	d, err := New(Config{Name: "rxe0", MAC: mine[0].mac, IPv4: host, MTU: 1500, Seed: 1})
	require.NoError(t, err)
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(256)
	var x *QP
	for {
		x, err = d.CreateQP(pd, QPInit{Type: qp.UD, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		if x.QPN() >= qpn {
			break
		}
	}
	require.Equal(t, qpn, x.QPN())
	require.NoError(t, x.Modify(&qp.Attr{State: qp.Init, Port: 1, QKey: theirs[0].pkt.DETH.QKey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
	require.NoError(t, x.Modify(&qp.Attr{State: qp.RTR}, qp.AttrState))
	require.NoError(t, x.Modify(&qp.Attr{State: qp.RTS, SQPSN: mine[0].pkt.BTH.PSN}, qp.AttrState|qp.AttrSQPSN))
	require.Equal(t, mine[0].sport, x.SrcPort())

	recvBufs := make([][]byte, len(theirs))
	for i, c := range theirs {
		recvBufs[i] = make([]byte, 40+len(c.pkt.Payload))
		m, err := d.RegMR(pd, recvBufs[i], qp.AccessLocalWrite)
		require.NoError(t, err)
		require.NoError(t, x.PostRecv(&qp.RecvWR{ID: uint64(1000 + i), SGL: []qp.SGE{{Addr: m.Addr(), Length: uint32(len(recvBufs[i])), LKey: m.LKey()}}}))
	}
	one := make([]link.Frame, 1)
	ri := 0
	for _, c := range pkts {
		if c.src != host {
			if c.pkt.BTH.DestQP != qpn {
				continue
			}
			d.HandleFrame(c.t, link.Frame{Data: c.data})
			ri++
			continue
		}
		ah, err := d.CreateAH(pd, qp.AddressVector{DGID: c.dst, SGIDIndex: 1, HopLimit: c.ttl, TrafficClass: c.tos})
		require.NoError(t, err)
		buf := append([]byte(nil), c.pkt.Payload...)
		wr := qp.SendWR{ID: uint64(c.no), Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah.AV(),
			RemoteQPN: c.pkt.BTH.DestQP, RemoteQKey: c.pkt.DETH.QKey}
		if c.pkt.Info().Is(packet.HdrImmDt) {
			wr.Opcode, wr.Imm = qp.WRSendImm, c.pkt.Imm
		}
		if c.pkt.BTH.SE {
			wr.Flags |= qp.SendSolicited
		}
		if len(buf) > 0 {
			m, err := d.RegMR(pd, buf, 0)
			require.NoError(t, err)
			wr.SGL = []qp.SGE{{Addr: m.Addr(), Length: uint32(len(buf)), LKey: m.LKey()}}
		}
		require.NoError(t, x.PostSend(&wr))
		k, _ := d.Output(c.t, one)
		require.Equal(t, 1, k, "frame %d", c.no)
		if !sameWire(t, one[0].Data, c.data, fmt.Sprintf("frame %d %s", c.no, c.pkt.BTH.Opcode)) {
			t.FailNow()
		}
	}
	wcs := make([]qp.WC, 512)
	n := cq.Poll(wcs)
	require.Equal(t, len(mine)+len(theirs), n)
	got := 0
	for _, wc := range wcs[:n] {
		require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
		if wc.Opcode&qp.WCRecv == 0 {
			continue
		}
		i := int(wc.ID - 1000)
		c := theirs[i]
		assert.Equal(t, uint32(40+len(c.pkt.Payload)), wc.ByteLen)
		assert.Equal(t, c.pkt.DETH.SrcQP, wc.SrcQP)
		assert.Equal(t, c.pkt.Payload, recvBufs[i][40:], "datagram %d", c.no)
		var fr packet.Frame
		require.NoError(t, packet.ParseFrame(c.data, &fr))
		assert.Equal(t, []byte(fr.IP), recvBufs[i][20:40], "GRH area holds the IPv4 header")
		if c.pkt.Info().Is(packet.HdrImmDt) {
			assert.Equal(t, c.pkt.Imm, wc.Imm)
		}
		got++
	}
	assert.Equal(t, len(theirs), got)
	assert.Equal(t, len(theirs), ri)
}
