package qp_test

// Golden test against kernel rxe: replay the request packets of real rxe
// captures into a responder QP configured like the captured one and compare
// what it sends with what rxe answered.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// capFrame is one RoCE frame of a capture.
type capFrame struct {
	n    int // frame number among RoCE frames, from 1
	t    qp.Time
	addr packet.Addressing
	ip   []byte
	pkt  packet.Packet
}

func readCapture(t *testing.T, name string) []*capFrame {
	fh, err := os.Open(name)
	require.NoError(t, err)
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	require.NoError(t, err)
	var out []*capFrame
	var t0 int64
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data = append([]byte(nil), data...)
		var f packet.Frame
		if packet.ParseFrame(data, &f) != nil {
			continue
		}
		require.True(t, f.ICRCOK(), "%s: ICRC of RoCE frame %d", name, len(out)+1)
		c := &capFrame{n: len(out) + 1, addr: f.Addressing(), ip: f.IP}
		require.NoError(t, c.pkt.Decode(f.Transport))
		ts := ci.Timestamp.UnixNano()
		if len(out) == 0 {
			t0 = ts
		}
		c.t = qp.Time(ts - t0)
		out = append(out, c)
	}
	return out
}

func isRequest(p *packet.Packet) bool {
	switch p.Info().Kind {
	case packet.KindSend, packet.KindWrite, packet.KindReadRequest, packet.KindCompareSwap, packet.KindFetchAdd:
		return true
	}
	return false
}

func isResponse(p *packet.Packet) bool {
	switch p.Info().Kind {
	case packet.KindAck, packet.KindAtomicAck, packet.KindReadResponse:
		return true
	}
	return false
}

type endpointID struct {
	ip  netip.Addr
	qpn uint32
}

// rcFlow is one responder QP of a capture: the requests addressed to it and
// the responses it sent.
type rcFlow struct {
	resp      endpointID
	reqIP     netip.Addr
	reqQPN    uint32
	requests  []*capFrame
	responses []*capFrame
	mtu       qp.MTU
}

func psnIn(p, lo, hi uint32) bool {
	return int32((p-lo)<<8) >= 0 && int32((hi-p)<<8) >= 0
}

// findFlows groups a capture's RC traffic by responder endpoint.
func findFlows(t *testing.T, frames []*capFrame) []*rcFlow {
	byResp := map[endpointID]*rcFlow{}
	var order []*rcFlow
	for _, c := range frames {
		if c.pkt.Info().Transport != packet.TransportRC || !isRequest(&c.pkt) {
			continue
		}
		id := endpointID{c.addr.Dst, c.pkt.BTH.DestQP}
		fl := byResp[id]
		if fl == nil {
			fl = &rcFlow{resp: id, reqIP: c.addr.Src}
			byResp[id] = fl
			order = append(order, fl)
		}
		fl.requests = append(fl.requests, c)
	}
	for _, fl := range order {
		// The PSN window the requests span; responses from the responder's
		// IP within it (and up to a little past, for NAKs) are its output.
		lo, hi := fl.requests[0].pkt.BTH.PSN, fl.requests[0].pkt.BTH.PSN
		first := fl.requests[0].t
		for _, c := range fl.requests {
			p := c.pkt.BTH.PSN
			end := p
			if c.pkt.Info().Kind == packet.KindReadRequest {
				end = psnAdd(p, max(1, (c.pkt.RETH.Length+1023)/1024)-1)
			}
			if int32((p-lo)<<8) < 0 {
				lo = p
			}
			if int32((end-hi)<<8) > 0 {
				hi = end
			}
		}
		qpns := map[uint32]bool{}
		for _, c := range frames {
			if c.pkt.Info().Transport == packet.TransportRC && isResponse(&c.pkt) && c.addr.Src == fl.resp.ip &&
				c.addr.Dst == fl.reqIP && c.t >= first && psnIn(c.pkt.BTH.PSN, lo, psnAdd(hi, 1)) {
				fl.responses = append(fl.responses, c)
				qpns[c.pkt.BTH.DestQP] = true
			}
		}
		require.Len(t, qpns, 1, "flow to %v: responses go to one requester QP", fl.resp)
		for q := range qpns {
			fl.reqQPN = q
		}
		// Path MTU: the payload of FIRST and MIDDLE packets.
		for _, c := range append(append([]*capFrame(nil), fl.requests...), fl.responses...) {
			switch c.pkt.Info().Pos {
			case packet.PosFirst, packet.PosMiddle:
				fl.mtu = max(fl.mtu, qp.MTU(len(c.pkt.Payload)))
			}
		}
		if fl.mtu == 0 {
			fl.mtu = 1024 // a 1500-byte netdev's active MTU, as in every capture
		}
		require.True(t, fl.mtu.Valid(), "flow %v: MTU %d", fl.resp, fl.mtu)
	}
	return order
}

// goldenRegion is one memory region a capture's requests name (by rkey),
// covering every VA range they use; filled marks bytes whose initial value
// the capture gives (atomic originals).
type goldenRegion struct {
	rkey   uint32
	va     uint64
	buf    []byte
	filled []bool
}

// respMsg is one message the capture's requester sent: its first PSN,
// packet count and target.
type respMsg struct {
	kind  packet.Kind
	psn   uint32
	npkt  uint32
	va    uint64
	rkey  uint32
	len   uint32
	first *capFrame
}

// messages reconstructs the distinct request messages of a flow in PSN
// order (first transmission of each), from FIRST/ONLY packets.
func messages(fl *rcFlow) []*respMsg {
	seen := map[uint32]bool{}
	var ms []*respMsg
	var cur *respMsg
	for _, c := range fl.requests {
		p := &c.pkt
		info := p.Info()
		if info.Pos != packet.PosFirst && info.Pos != packet.PosOnly {
			if cur != nil && cur.kind == packet.KindSend && psnIn(p.BTH.PSN, cur.psn, psnAdd(cur.psn, 1<<20)) {
				cur.npkt = max(cur.npkt, (p.BTH.PSN-cur.psn)&0xFFFFFF+1)
			}
			continue
		}
		if seen[p.BTH.PSN] {
			cur = nil
			for _, m := range ms {
				if m.psn == p.BTH.PSN {
					cur = m
				}
			}
			continue
		}
		seen[p.BTH.PSN] = true
		m := &respMsg{kind: info.Kind, psn: p.BTH.PSN, npkt: 1, first: c}
		switch {
		case info.Is(packet.HdrRETH):
			m.va, m.rkey, m.len = p.RETH.VA, p.RETH.RKey, p.RETH.Length
			m.npkt = max(1, (m.len+uint32(fl.mtu)-1)/uint32(fl.mtu))
		case info.Is(packet.HdrAtomicETH):
			m.va, m.rkey, m.len = p.AtomicETH.VA, p.AtomicETH.RKey, 8
		}
		ms = append(ms, m)
		cur = m
	}
	// A READ resumed mid-message is a READ REQUEST whose PSN lies inside an
	// earlier one; it is a retry, not a message.
	var out []*respMsg
	for _, m := range ms {
		dup := false
		for _, o := range out {
			if o.kind == packet.KindReadRequest && m.kind == packet.KindReadRequest && m.psn != o.psn &&
				psnIn(m.psn, o.psn, psnAdd(o.psn, o.npkt-1)) {
				dup = true
			}
		}
		if !dup {
			out = append(out, m)
		}
	}
	return out
}

// goldenResult is what one replay produced.
type goldenResult struct {
	ours     []*packet.Packet
	recvWCs  []qp.WC
	regions  map[uint32]*goldenRegion
	recvBufs [][]byte
}

// replay configures a responder like the captured one and feeds it the
// captured requests in capture order, with capture times on the fake clock.
func replay(t *testing.T, fl *rcFlow) *goldenResult {
	ms := messages(fl)
	// Regions: every rkey's VA range.
	regions := map[uint32]*goldenRegion{}
	for _, m := range ms {
		if m.kind == packet.KindSend {
			continue
		}
		r := regions[m.rkey]
		end := m.va + uint64(m.len)
		if r == nil {
			r = &goldenRegion{rkey: m.rkey, va: m.va}
			regions[m.rkey] = r
		}
		if m.va < r.va {
			grow := r.va - m.va
			r.buf = append(make([]byte, grow), r.buf...)
			r.va = m.va
		}
		if n := end - r.va; uint64(len(r.buf)) < n {
			r.buf = append(r.buf, make([]byte, n-uint64(len(r.buf)))...)
		}
	}
	for _, r := range regions {
		require.Less(t, len(r.buf), 64<<20, "region %#x", r.rkey)
		r.filled = make([]bool, len(r.buf))
	}
	// Fill the regions with what rxe's READ responses and atomic ACKs
	// returned: responses are matched to READs by PSN. The application may
	// change a buffer between READs (rping does), so each READ's bytes go
	// into memory just before its first request is replayed.
	le := binary.LittleEndian
	type fillAt struct {
		off  uint64
		data []byte
	}
	readFill := map[*capFrame][]fillAt{}
	for _, c := range fl.responses {
		p := &c.pkt
		for _, m := range ms {
			if !psnIn(p.BTH.PSN, m.psn, psnAdd(m.psn, m.npkt-1)) {
				continue
			}
			r := regions[m.rkey]
			switch {
			case m.kind == packet.KindReadRequest && p.Info().Kind == packet.KindReadResponse:
				off := m.va - r.va + uint64((p.BTH.PSN-m.psn)&0xFFFFFF)*uint64(fl.mtu)
				readFill[m.first] = append(readFill[m.first], fillAt{off, p.Payload})
			case (m.kind == packet.KindFetchAdd || m.kind == packet.KindCompareSwap) && p.Info().Kind == packet.KindAtomicAck:
				off := m.va - r.va
				if !r.filled[off] { // the first atomic to a word saw its initial value
					le.PutUint64(r.buf[off:], p.AtomicAck)
					for i := 0; i < 8; i++ {
						r.filled[off+uint64(i)] = true
					}
				}
			}
		}
	}

	mem := newFakeMem()
	for _, r := range regions {
		mem.Register(r.rkey, r.va, r.buf, allRemote)
	}
	// Receives for SENDs: one per SEND message, each as large as 16 MTUs
	// (perftest's SENDs are 4 KiB at most).
	nsend := 0
	for _, m := range ms {
		if m.kind == packet.KindSend {
			nsend++
		}
	}
	bufLen := 16 * uint64(fl.mtu)
	local := make([]byte, uint64(nsend+1)*bufLen)
	mem.Register(localKey, localVA, local, qp.AccessLocalWrite)
	sendCQ, recvCQ := qp.NewCQ(1<<12), qp.NewCQ(1<<12)
	q, err := qp.New(qp.Config{QPN: fl.resp.qpn, Type: qp.RC, SendCQ: sendCQ, RecvCQ: recvCQ, MaxSendWR: 64,
		MaxRecvWR: nsend + 1, MaxSendSGE: 1, MaxRecvSGE: 1, Memory: mem, MaxMTU: 4096, SrcPort: 0xC000})
	require.NoError(t, err)
	rqPSN := fl.requests[0].pkt.BTH.PSN
	for _, c := range fl.requests {
		if int32((c.pkt.BTH.PSN-rqPSN)<<8) < 0 {
			rqPSN = c.pkt.BTH.PSN
		}
	}
	l := defaultLink()
	l.MTU = fl.mtu
	l.MaxDestRdAtomic = 16
	peer := &endpoint{addr: fl.reqIP, qp: nil}
	require.NoError(t, modify(q, &qp.Attr{State: qp.Init, Port: 1, AccessFlags: allRemote},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	require.NoError(t, modify(q, &qp.Attr{State: qp.RTR, AV: peer.av(), PathMTU: l.MTU, DestQPN: fl.reqQPN, RQPSN: rqPSN,
		MaxDestRdAtomic: l.MaxDestRdAtomic, MinRNRTimer: 12},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	require.NoError(t, modify(q, &qp.Attr{State: qp.RTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
	res := &goldenResult{regions: regions}
	for i := 0; i < nsend; i++ {
		require.NoError(t, q.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: localVA + uint64(i)*bufLen, Length: uint32(bufLen), LKey: localKey}}}))
		res.recvBufs = append(res.recvBufs, local[uint64(i)*bufLen:uint64(i+1)*bufLen])
	}

	drain := func(now qp.Time) {
		for k := 0; k < 1<<16; k++ {
			var out qp.Outgoing
			if !q.Transmit(now, &out) {
				return
			}
			// Through real bytes, as on the wire.
			a := packet.Addressing{Src: fl.resp.ip, Dst: fl.reqIP, SrcPort: out.SrcPort, HopLimit: 64, DF: true}
			b := packet.AppendIPPacket(nil, &a, &out.Pkt)
			var f packet.Frame
			require.NoError(t, packet.ParseIP(b, &f))
			var p packet.Packet
			require.NoError(t, p.Decode(f.Transport))
			res.ours = append(res.ours, &p)
		}
		t.Fatalf("responder transmits without end")
	}
	for _, c := range fl.requests {
		if q.Deadline() <= c.t {
			q.Tick(c.t)
		}
		for _, f := range readFill[c] {
			r := regions[c.pkt.RETH.RKey]
			copy(r.buf[f.off:], f.data)
		}
		in := qp.Incoming{Pkt: c.pkt, Src: c.addr.Src, Dst: c.addr.Dst, IPHeader: c.ip}
		q.Receive(c.t, &in)
		drain(c.t)
	}
	var wc [64]qp.WC
	for {
		n := recvCQ.Poll(wc[:])
		res.recvWCs = append(res.recvWCs, wc[:n]...)
		if n == 0 {
			break
		}
	}
	require.Zero(t, sendCQ.Len(), "responder-only QP completed sends")
	require.Equal(t, qp.RTS, q.State())
	return res
}

func describe(p *packet.Packet) string {
	s := fmt.Sprintf("%s psn=%#x", p.BTH.Opcode, p.BTH.PSN)
	if p.Info().Is(packet.HdrAETH) {
		s += fmt.Sprintf(" %v msn=%d", p.AETH.Syndrome, p.AETH.MSN)
	}
	if p.Info().Is(packet.HdrAtomicAckETH) {
		s += fmt.Sprintf(" orig=%#x", p.AtomicAck)
	}
	if len(p.Payload) > 0 {
		s += fmt.Sprintf(" len=%d", len(p.Payload))
	}
	return s
}

// samePacket compares two transport packets byte for byte, ICRC aside:
// every BTH field (opcode, SE, MigReq, pad, version, P_Key, FECN/BECN,
// reserved bits, destination QP, AckReq, PSN), every extension header
// (AETH syndrome and MSN, RETH, AtomicETH, atomic original value, ImmDt)
// and the payload. The ICRC is left out because it covers the IP header,
// whose ID, TTL and checksum are the runtime's, not the engine's; it follows
// from the rest.
func samePacket(ours, theirs *packet.Packet) bool {
	return bytes.Equal(ours.AppendTo(nil), theirs.AppendTo(nil))
}

// TestGoldenRxe replays the request side of each RC flow of the captures
// into a responder QP configured like rxe's, and compares what it sends
// with what rxe sent, byte for byte except the ICRC (see samePacket).
// Comparison rules:
//
//   - every capture but loss: rxe's responses, in capture order, equal
//     ours exactly. The responder is deterministic given the order of its
//     input, and each request is replayed and the responder drained before
//     the next, as rxe's responder task finishes one request (a whole READ
//     reply included) before it looks at the next packet. Interleaving of
//     requests and responses on the wire is timing and is not compared.
//   - loss: netem dropped 3% of each guest's egress, the responder's
//     included, before the capture point, so rxe's captured responses are a
//     subsequence of ours (the requests it did receive are exactly the
//     captured ones: the requester's losses happened before capture too).
//     Every captured response must appear in ours, in order; ours may have
//     extras, but at most 10% (+5) of the captured count.
//   - ACK coalescing: our responder may answer several AckReq packets that
//     arrive before it transmits with one ACK (rxe sends one per AckReq).
//     Draining after every request keeps that from showing here; the
//     scenario tests only rely on ACKs being cumulative.
//
// The memory effects are checked too: SENDs land in the receive buffers,
// one completion per message, and the last WRITE to each range holds.
func TestGoldenRxe(t *testing.T) {
	for _, name := range []string{"write", "read", "atomic", "send", "loss", "rc_pingpong", "rc_pingpong_ipv6", "rping", "send_rdmacm", "veth_local_write"} {
		t.Run(name, func(t *testing.T) {
			frames := readCapture(t, filepath.Join("..", "testdata", "pcaps", "rxe", name+".pcap"))
			flows := findFlows(t, frames)
			require.NotEmpty(t, flows)
			for _, fl := range flows {
				t.Run(fmt.Sprintf("%v/qp%#x", fl.resp.ip, fl.resp.qpn), func(t *testing.T) {
					require.NotEmpty(t, fl.responses, "rxe answered")
					res := replay(t, fl)
					theirs := make([]*packet.Packet, len(fl.responses))
					for i, c := range fl.responses {
						theirs[i] = &c.pkt
					}
					t.Logf("%d requests replayed; rxe sent %d responses, we %d", len(fl.requests), len(theirs), len(res.ours))
					if name != "loss" {
						compareExact(t, res.ours, theirs)
					} else {
						compareSubsequence(t, res.ours, theirs)
					}
					checkGoldenEffects(t, fl, res)
				})
			}
		})
	}
}

func listing(ps []*packet.Packet, from, n int) string {
	var b strings.Builder
	for i := max(0, from); i < min(len(ps), from+n); i++ {
		fmt.Fprintf(&b, "  %4d %s\n", i, describe(ps[i]))
	}
	return b.String()
}

func compareExact(t *testing.T, ours, theirs []*packet.Packet) {
	t.Helper()
	for i := 0; i < min(len(ours), len(theirs)); i++ {
		if !samePacket(ours[i], theirs[i]) {
			t.Fatalf("response %d differs:\n ours:   %s\n theirs: %s\nours around it:\n%stheirs around it:\n%s",
				i, describe(ours[i]), describe(theirs[i]), listing(ours, i-3, 8), listing(theirs, i-3, 8))
		}
	}
	require.Equal(t, len(theirs), len(ours), "number of responses; ours after the common part:\n%s",
		listing(ours, len(theirs), 10))
}

func compareSubsequence(t *testing.T, ours, theirs []*packet.Packet) {
	t.Helper()
	j := 0
	for i := 0; i < len(ours) && j < len(theirs); i++ {
		if samePacket(ours[i], theirs[j]) {
			j++
		}
	}
	if j < len(theirs) {
		// Locate the divergence for the message: the last match and what
		// follows on both sides.
		k, last := 0, 0
		for i := 0; i < len(ours) && k < j; i++ {
			if samePacket(ours[i], theirs[k]) {
				k++
				last = i
			}
		}
		t.Fatalf("rxe's response %d (%s) is not in ours after our %d:\nours from there:\n%stheirs from there:\n%s",
			j, describe(theirs[j]), last, listing(ours, last-2, 12), listing(theirs, j-2, 12))
	}
	extra := len(ours) - len(theirs)
	require.LessOrEqual(t, extra, len(theirs)/10+5, "we sent %d responses rxe's capture lacks", extra)
}

// checkGoldenEffects checks the memory effects the capture implies: every
// SEND message landed in a receive buffer, in order, and WRITE targets hold
// the written bytes.
func checkGoldenEffects(t *testing.T, fl *rcFlow, res *goldenResult) {
	t.Helper()
	// Reassemble each message's bytes from the captured requests by PSN.
	byPSN := map[uint32][]byte{}
	for _, c := range fl.requests {
		if len(c.pkt.Payload) > 0 {
			byPSN[c.pkt.BTH.PSN] = c.pkt.Payload
		}
	}
	ms := messages(fl)
	sends := 0
	writes := map[uint32][]byte{}
	for _, m := range ms {
		var data []byte
		for k := uint32(0); k < m.npkt; k++ {
			data = append(data, byPSN[psnAdd(m.psn, k)]...)
		}
		switch m.kind {
		case packet.KindSend:
			require.Less(t, sends, len(res.recvWCs), "receive completions")
			wc := res.recvWCs[sends]
			require.Equal(t, qp.WCSuccess, wc.Status)
			require.Equal(t, uint64(sends), wc.ID)
			require.Equal(t, uint32(len(data)), wc.ByteLen)
			require.Equal(t, data, res.recvBufs[sends][:len(data)], "SEND message %d bytes", sends)
			sends++
		case packet.KindWrite:
			require.Equal(t, int(m.len), len(data), "WRITE at psn %#x reassembled", m.psn)
			writes[m.psn] = data
		}
	}
	require.Len(t, res.recvWCs, sends, "one receive completion per SEND message")
	// The last WRITE to each address range wins; check the final image.
	type w struct {
		psn uint32
		m   *respMsg
	}
	var ws []w
	for _, m := range ms {
		if m.kind == packet.KindWrite {
			ws = append(ws, w{m.psn, m})
		}
	}
	sort.SliceStable(ws, func(i, j int) bool { return int32((ws[i].psn-ws[j].psn)<<8) < 0 })
	for _, x := range ws {
		r := res.regions[x.m.rkey]
		want := writes[x.psn]
		got := r.buf[x.m.va-r.va : x.m.va-r.va+uint64(x.m.len)]
		// Only the last write to a range is checkable; perftest reuses one
		// buffer, so compare the latest.
		last := true
		for _, y := range ws {
			if int32((y.psn-x.psn)<<8) > 0 && y.m.rkey == x.m.rkey && y.m.va < x.m.va+uint64(x.m.len) && x.m.va < y.m.va+uint64(y.m.len) {
				last = false
			}
		}
		if last {
			require.Equal(t, want, got, "WRITE at psn %#x landed", x.psn)
		}
	}
}
