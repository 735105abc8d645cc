package packet_test

import (
	"math/rand"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// cmMAD is a CM MAD found in a capture, with the frame it came in.
type cmMAD struct {
	frame   int
	addr    packet.Addressing
	mad     packet.MAD
	payload []byte // the UD SEND payload
}

// captureCMMADs returns the CM MADs of a kernel capture.
func captureCMMADs(t testing.TB, name string) []cmMAD {
	t.Helper()
	var out []cmMAD
	for i, fr := range roceFrames(t, filepath.Join(captureDir, name)) {
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		if p.BTH.Opcode != packet.UDSendOnly || p.BTH.DestQP != packet.GSIQPN {
			continue
		}
		m, err := packet.ParseCMMAD(p.Payload)
		require.NoError(t, err, "frame %d", i)
		out = append(out, cmMAD{frame: i, addr: f.Addressing(), mad: m, payload: p.Payload})
	}
	return out
}

// TestCMKernelCaptures decodes every CM MAD kernel rxe sent in the rdma_cm
// captures, re-encodes each message into a fresh MAD and gets the bytes
// back, and checks the decoded values against what the kernel is known to
// send (reference/rdma-cm.md §1) and against the frames around them.
func TestCMKernelCaptures(t *testing.T) {
	seen := map[packet.CMAttr]int{}
	for _, name := range []string{"rping.pcap", "send_rdmacm.pcap", "udaddy.pcap"} {
		t.Run(name, func(t *testing.T) {
			mads := captureCMMADs(t, name)
			require.NotEmpty(t, mads)
			for _, c := range mads {
				h := c.mad.Header()
				require.Len(t, c.payload, packet.MADLen, "frame %d: no bytes after the MAD", c.frame)
				require.Equal(t, uint8(packet.MADMethodSend), h.Method)
				require.Zero(t, h.Status)
				require.Zero(t, h.AttrMod, "ECE is off on rxe")
				msg, err := packet.DecodeCM(c.mad)
				require.NoError(t, err, "frame %d", c.frame)
				require.Equal(t, h.AttrID, msg.Attr())
				out := packet.NewCMMAD(msg.Attr(), h.TID)
				require.NoError(t, msg.Encode(out.Data()))
				require.Equal(t, []byte(c.mad), []byte(out), "frame %d %v re-encode", c.frame, msg.Attr())
				seen[msg.Attr()]++
				checkKernelCM(t, c, msg)
			}
		})
	}
	for _, a := range []packet.CMAttr{packet.CMAttrREQ, packet.CMAttrREP, packet.CMAttrRTU, packet.CMAttrDREQ, packet.CMAttrDREP, packet.CMAttrSIDRREQ, packet.CMAttrSIDRREP} {
		require.NotZero(t, seen[a], "no %v in the captures", a)
	}
}

// checkKernelCM checks what kernel rxe puts in each message on RoCE.
func checkKernelCM(t *testing.T, c cmMAD, msg packet.CMMessage) {
	t.Helper()
	gid := func(a netip.Addr) [16]byte { return a.As16() }
	switch m := msg.(type) {
	case *packet.CMReq:
		ps, port, ok := packet.IPServiceID(m.ServiceID)
		require.True(t, ok, "service ID %#x", m.ServiceID)
		require.Equal(t, uint16(packet.PortSpaceTCP), ps)
		require.Equal(t, uint8(packet.CMTransportRC), m.TransportType)
		require.Equal(t, uint16(0xFFFF), m.PKey)
		require.Equal(t, uint16(0xFFFF), m.Primary.LocalLID)
		require.Equal(t, uint16(0xFFFF), m.Primary.RemoteLID)
		require.Equal(t, gid(c.addr.Src), m.Primary.LocalGID)
		require.Equal(t, gid(c.addr.Dst), m.Primary.RemoteGID)
		require.Equal(t, uint8(64), m.Primary.HopLimit)
		require.Equal(t, uint8(19), m.Primary.LocalACKTimeout)
		require.Equal(t, uint8(20), m.LocalCMResponseTimeout)
		require.Equal(t, uint8(20), m.RemoteCMResponseTimeout)
		require.Equal(t, uint8(15), m.MaxCMRetries)
		require.Equal(t, packet.CMPath{}, m.Alternate)
		var h packet.CMAHeader
		require.NoError(t, h.Decode(m.PrivateData))
		require.Equal(t, c.addr.Src, h.Src)
		require.Equal(t, c.addr.Dst, h.Dst)
		// rdma_cm's flow label hashes the two rdma_cm ports.
		require.Equal(t, (uint32(h.SrcPort)*31+uint32(port))&0xFFFFF, m.Primary.FlowLabel)
		var back [packet.CMAHeaderLen]byte
		require.NoError(t, h.Encode(back[:]))
		require.Equal(t, m.PrivateData[:packet.CMAHeaderLen], back[:])
	case *packet.CMRep:
		require.Equal(t, uint8(15), m.TargetACKDelay, "rxe's local_ca_ack_delay")
		require.NotZero(t, m.LocalQPN)
	case *packet.CMDreq:
		require.NotZero(t, m.RemoteQPN)
	case *packet.CMSidrReq:
		ps, _, ok := packet.IPServiceID(m.ServiceID)
		require.True(t, ok)
		require.Equal(t, uint16(packet.PortSpaceUDP), ps)
		var h packet.CMAHeader
		require.NoError(t, h.Decode(m.PrivateData))
		require.Equal(t, c.addr.Src, h.Src)
	case *packet.CMSidrRep:
		// udaddy's client asked once before the server listened: the
		// kernel answered "unsupported" with no QP, then accepted the
		// retry.
		switch m.Status {
		case packet.SIDRAccept:
			require.Equal(t, uint32(0x01234567), m.QKey, "RDMA_UDP_QKEY")
			require.NotZero(t, m.QPN)
		case packet.SIDRUnsupported:
			require.Zero(t, m.QPN)
			require.Zero(t, m.QKey)
		default:
			require.Failf(t, "SIDR_REP status", "%d", m.Status)
		}
		_, _, ok := packet.IPServiceID(m.ServiceID)
		require.True(t, ok)
	}
}

// TestCMConversation checks that the messages of one connection in a
// capture refer to each other as the protocol says: the REP answers the
// REQ's comm ID and the RTU both; the DREP answers the DREQ; the REQ and REP
// PSNs and QPNs are what the data packets then use.
func TestCMConversation(t *testing.T) {
	mads := captureCMMADs(t, "rping.pcap")
	var req packet.CMReq
	var rep packet.CMRep
	var rtu packet.CMRtu
	var dreq packet.CMDreq
	var drep packet.CMDrep
	for _, c := range mads {
		switch c.mad.AttrID() {
		case packet.CMAttrREQ:
			require.NoError(t, req.Decode(c.mad.Data()))
		case packet.CMAttrREP:
			require.NoError(t, rep.Decode(c.mad.Data()))
		case packet.CMAttrRTU:
			require.NoError(t, rtu.Decode(c.mad.Data()))
		case packet.CMAttrDREQ:
			require.NoError(t, dreq.Decode(c.mad.Data()))
		case packet.CMAttrDREP:
			require.NoError(t, drep.Decode(c.mad.Data()))
		}
	}
	require.Equal(t, req.LocalCommID, rep.RemoteCommID)
	require.Equal(t, [2]uint32{req.LocalCommID, rep.LocalCommID}, [2]uint32{rtu.LocalCommID, rtu.RemoteCommID})
	require.Equal(t, [2]uint32{dreq.LocalCommID, dreq.RemoteCommID}, [2]uint32{drep.RemoteCommID, drep.LocalCommID})
	require.Equal(t, rep.LocalQPN, dreq.RemoteQPN, "the active side disconnects")
	// The first data packet each way: the active side sends to the REP's
	// QPN starting at the REP's PSN (a starting PSN is what its sender
	// expects to receive).
	var fromActive, fromPassive bool
	for _, fr := range roceFrames(t, filepath.Join(captureDir, "rping.pcap")) {
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		switch {
		case !fromActive && p.BTH.DestQP == rep.LocalQPN:
			require.Equal(t, rep.StartingPSN, p.BTH.PSN)
			fromActive = true
		case !fromPassive && p.BTH.DestQP == req.LocalQPN && p.BTH.Opcode != packet.RCAcknowledge:
			require.Equal(t, req.StartingPSN, p.BTH.PSN)
			fromPassive = true
		}
	}
	require.True(t, fromActive && fromPassive)
}

// randomCM returns a message of attribute a with random fields within their
// widths, and private data of random length.
func randomCM(rng *rand.Rand, a packet.CMAttr) packet.CMMessage {
	u := func(bits int) uint32 { return uint32(rng.Int63()) & (1<<bits - 1) }
	u64 := func() uint64 { return rng.Uint64() }
	b := func() bool { return rng.Intn(2) == 1 }
	pd := func(max int) []byte {
		p := make([]byte, rng.Intn(max+1))
		rng.Read(p)
		return p
	}
	path := func() packet.CMPath {
		p := packet.CMPath{LocalLID: uint16(u(16)), RemoteLID: uint16(u(16)), FlowLabel: u(20),
			PacketRate: uint8(u(6)), TrafficClass: uint8(u(8)), HopLimit: uint8(u(8)), SL: uint8(u(4)),
			SubnetLocal: b(), LocalACKTimeout: uint8(u(5))}
		rng.Read(p.LocalGID[:])
		rng.Read(p.RemoteGID[:])
		return p
	}
	switch a {
	case packet.CMAttrREQ:
		return &packet.CMReq{LocalCommID: u(32), VendorID: u(24), ServiceID: u64(), LocalCAGUID: u64(),
			LocalQKey: u(32), LocalQPN: u(24), ResponderResources: uint8(u(8)), LocalEECN: u(24),
			InitiatorDepth: uint8(u(8)), RemoteEECN: u(24), RemoteCMResponseTimeout: uint8(u(5)),
			TransportType: uint8(u(2)), E2EFlowControl: b(), StartingPSN: u(24),
			LocalCMResponseTimeout: uint8(u(5)), RetryCount: uint8(u(3)), PKey: uint16(u(16)),
			PathMTU: uint8(u(4)), RDCExists: b(), RNRRetryCount: uint8(u(3)), MaxCMRetries: uint8(u(4)),
			SRQ: b(), ExtTransportType: uint8(u(3)), Primary: path(), Alternate: path(),
			PrivateData: pd(packet.CMReqPrivateLen)}
	case packet.CMAttrREP:
		return &packet.CMRep{LocalCommID: u(32), RemoteCommID: u(32), LocalQKey: u(32), LocalQPN: u(24),
			VendorID: u(24), LocalEECN: u(24), StartingPSN: u(24), ResponderResources: uint8(u(8)),
			InitiatorDepth: uint8(u(8)), TargetACKDelay: uint8(u(5)), FailoverAccepted: uint8(u(2)),
			E2EFlowControl: b(), RNRRetryCount: uint8(u(3)), SRQ: b(), LocalCAGUID: u64(),
			PrivateData: pd(packet.CMRepPrivateLen)}
	case packet.CMAttrRTU:
		return &packet.CMRtu{LocalCommID: u(32), RemoteCommID: u(32), PrivateData: pd(packet.CMRtuPrivateLen)}
	case packet.CMAttrREJ:
		return &packet.CMRej{LocalCommID: u(32), RemoteCommID: u(32), MsgRejected: uint8(u(2)),
			RejectInfoLen: uint8(u(7)), Reason: packet.CMRejReason(u(16)), ARI: pd(packet.CMRejARILen),
			PrivateData: pd(packet.CMRejPrivateLen)}
	case packet.CMAttrMRA:
		return &packet.CMMra{LocalCommID: u(32), RemoteCommID: u(32), MsgMRAed: uint8(u(2)),
			ServiceTimeout: uint8(u(5)), PrivateData: pd(packet.CMMraPrivateLen)}
	case packet.CMAttrDREQ:
		return &packet.CMDreq{LocalCommID: u(32), RemoteCommID: u(32), RemoteQPN: u(24), PrivateData: pd(packet.CMDreqPrivateLen)}
	case packet.CMAttrDREP:
		return &packet.CMDrep{LocalCommID: u(32), RemoteCommID: u(32), PrivateData: pd(packet.CMDrepPrivateLen)}
	case packet.CMAttrSIDRREQ:
		return &packet.CMSidrReq{RequestID: u(32), PKey: uint16(u(16)), ServiceID: u64(), PrivateData: pd(packet.CMSidrReqPrivateLen)}
	case packet.CMAttrSIDRREP:
		return &packet.CMSidrRep{RequestID: u(32), Status: uint8(u(8)), InfoLen: uint8(u(8)), VendorID: u(24),
			QPN: u(24), ServiceID: u64(), QKey: u(32), Info: pd(packet.CMSidrRepInfoLen),
			PrivateData: pd(packet.CMSidrRepPrivateLen)}
	}
	panic(a)
}

var cmCodecAttrs = []packet.CMAttr{packet.CMAttrREQ, packet.CMAttrMRA, packet.CMAttrREJ, packet.CMAttrREP,
	packet.CMAttrRTU, packet.CMAttrDREQ, packet.CMAttrDREP, packet.CMAttrSIDRREQ, packet.CMAttrSIDRREP}

// padded returns p zero-padded to n bytes, as a decoded field shows it.
func padded(p []byte, n int) []byte { return append(append([]byte{}, p...), make([]byte, n-len(p))...) }

// normalize pads the variable-length fields of a random message to their
// wire size, as Decode returns them.
func normalize(m packet.CMMessage) {
	switch m := m.(type) {
	case *packet.CMReq:
		m.PrivateData = padded(m.PrivateData, packet.CMReqPrivateLen)
	case *packet.CMRep:
		m.PrivateData = padded(m.PrivateData, packet.CMRepPrivateLen)
	case *packet.CMRtu:
		m.PrivateData = padded(m.PrivateData, packet.CMRtuPrivateLen)
	case *packet.CMRej:
		m.ARI, m.PrivateData = padded(m.ARI, packet.CMRejARILen), padded(m.PrivateData, packet.CMRejPrivateLen)
	case *packet.CMMra:
		m.PrivateData = padded(m.PrivateData, packet.CMMraPrivateLen)
	case *packet.CMDreq:
		m.PrivateData = padded(m.PrivateData, packet.CMDreqPrivateLen)
	case *packet.CMDrep:
		m.PrivateData = padded(m.PrivateData, packet.CMDrepPrivateLen)
	case *packet.CMSidrReq:
		m.PrivateData = padded(m.PrivateData, packet.CMSidrReqPrivateLen)
	case *packet.CMSidrRep:
		m.Info, m.PrivateData = padded(m.Info, packet.CMSidrRepInfoLen), padded(m.PrivateData, packet.CMSidrRepPrivateLen)
	}
}

// TestCMRoundTrip encodes random messages of every attribute, decodes
// them, and gets the same fields; encoding over a dirty buffer leaves no
// trace of it.
func TestCMRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for _, a := range cmCodecAttrs {
		t.Run(a.String(), func(t *testing.T) {
			for i := 0; i < 200; i++ {
				m := randomCM(rng, a)
				clean := make([]byte, packet.CMDataLen)
				require.NoError(t, m.Encode(clean))
				dirty := make([]byte, packet.CMDataLen)
				rng.Read(dirty)
				require.NoError(t, m.Encode(dirty))
				require.Equal(t, clean, dirty, "reserved bytes and padding are written")
				got, err := packet.NewCMMessage(a)
				require.NoError(t, err)
				require.NoError(t, got.Decode(clean))
				normalize(m)
				require.Equal(t, m, got)
			}
		})
	}
}

// TestCMErrors checks the codecs refuse what does not fit.
func TestCMErrors(t *testing.T) {
	short := make([]byte, packet.CMDataLen-1)
	for _, a := range cmCodecAttrs {
		m, err := packet.NewCMMessage(a)
		require.NoError(t, err)
		require.ErrorIs(t, m.Decode(short), packet.ErrCMShort, "%v", a)
		require.ErrorIs(t, m.Encode(short), packet.ErrCMShort, "%v", a)
	}
	long := &packet.CMReq{PrivateData: make([]byte, packet.CMReqPrivateLen+1)}
	require.ErrorIs(t, long.Encode(make([]byte, packet.CMDataLen)), packet.ErrCMPrivateData)
	_, err := packet.NewCMMessage(packet.CMAttrLAP)
	require.ErrorIs(t, err, packet.ErrCMAttr)

	mad := packet.NewCMMAD(packet.CMAttrREQ, 1)
	for _, c := range []struct {
		name string
		edit func(m []byte) []byte
		want error
	}{
		{"short", func(m []byte) []byte { return m[:packet.MADLen-1] }, packet.ErrMADShort},
		{"base version", func(m []byte) []byte { m[0] = 2; return m }, packet.ErrMADVersion},
		{"class", func(m []byte) []byte { m[1] = 0x81; return m }, packet.ErrNotCM},
		{"class version", func(m []byte) []byte { m[2] = 1; return m }, packet.ErrCMVersion},
	} {
		b := c.edit(append([]byte(nil), mad...))
		_, err := packet.ParseCMMAD(b)
		require.ErrorIs(t, err, c.want, c.name)
	}
	m, err := packet.ParseCMMAD(append(append([]byte(nil), mad...), 1, 2, 3))
	require.NoError(t, err, "bytes after the MAD are ignored")
	require.Len(t, m, packet.MADLen)
}

// TestCMAHeader checks the rdma_cm header for both families and its
// refusals.
func TestCMAHeader(t *testing.T) {
	for _, h := range []packet.CMAHeader{
		{SrcPort: 0xB26E, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
		{SrcPort: 7, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")},
	} {
		b := make([]byte, packet.CMAHeaderLen)
		require.NoError(t, h.Encode(b))
		var got packet.CMAHeader
		require.NoError(t, got.Decode(b))
		require.Equal(t, h, got)
	}
	// The worked example of reference/rdma-cm.md §1.4.
	b := make([]byte, packet.CMAHeaderLen)
	h := packet.CMAHeader{SrcPort: 45678, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	require.NoError(t, h.Encode(b))
	want := make([]byte, packet.CMAHeaderLen)
	copy(want, []byte{0x00, 0x40, 0xB2, 0x6E})
	copy(want[16:], []byte{10, 0, 0, 1})
	copy(want[32:], []byte{10, 0, 0, 2})
	require.Equal(t, want, b)
	require.Equal(t, uint64(0x0000000001061C06), packet.ServiceID(packet.PortSpaceTCP, 7174))

	var got packet.CMAHeader
	require.ErrorIs(t, got.Decode(b[:35]), packet.ErrCMAHeader)
	bad := append([]byte(nil), b...)
	bad[0] = 1
	require.ErrorIs(t, got.Decode(bad), packet.ErrCMAHeader)
	bad = append([]byte(nil), b...)
	bad[1] = 0x50
	require.ErrorIs(t, got.Decode(bad), packet.ErrCMAHeader)
	mixed := packet.CMAHeader{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd00::2")}
	require.ErrorIs(t, mixed.Encode(b), packet.ErrCMAHeader)
}

// TestCMDecodeNoAlloc checks the engine's decoders allocate nothing.
func TestCMDecodeNoAlloc(t *testing.T) {
	data := make([]byte, packet.CMDataLen)
	var req packet.CMReq
	var rep packet.CMRep
	allocs := testing.AllocsPerRun(100, func() {
		_ = req.Decode(data)
		_ = rep.Decode(data)
		_ = req.Encode(data)
	})
	require.Zero(t, allocs)
}

// BenchmarkCMReqDecodeEncode is a REQ's trip through the codec, what the
// connection manager does per connection.
func BenchmarkCMReqDecodeEncode(b *testing.B) {
	mads := captureCMMADs(b, "rping.pcap")
	in := mads[0].mad
	out := packet.NewCMMAD(packet.CMAttrREQ, 0)
	var req packet.CMReq
	b.ReportAllocs()
	b.SetBytes(packet.MADLen)
	for i := 0; i < b.N; i++ {
		if _, err := packet.ParseCMMAD(in); err != nil {
			b.Fatal(err)
		}
		_ = req.Decode(in.Data())
		_ = req.Encode(out.Data())
	}
}
