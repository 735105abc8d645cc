package replay

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/qp"
)

// The conformance replay of every rxe capture, both ends of every QP pair,
// is rxe's TestReplayRxeCaptures; the tests here check the replay itself:
// flows, out-of-band records, loss, differences and rewriting.

const rxeDir = "../testdata/pcaps/rxe"

func load(t *testing.T, name string) *Capture {
	t.Helper()
	c, err := Load(filepath.Join(rxeDir, name))
	require.NoError(t, err)
	return c
}

// alter writes a copy of an rxe capture with fn applied to each frame's
// bytes (nil drops the frame), the ICRC of RoCE frames recomputed, and
// returns its path.
func alter(t *testing.T, name string, fn func(no int, data []byte) []byte) string {
	t.Helper()
	r, err := pcapio.Open(filepath.Join(rxeDir, name))
	require.NoError(t, err)
	defer r.Close()
	path := filepath.Join(t.TempDir(), "altered-"+name)
	w, err := pcapio.Create(path)
	require.NoError(t, err)
	for no := 1; ; no++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		data := fn(no, append([]byte(nil), rec.Data...))
		if data == nil {
			continue
		}
		fixIPv4Checksum(data)
		var f packet.Frame
		if packet.ParseFrame(data, &f) == nil {
			packet.SetICRC(f.IPUDP(), f.Transport)
		}
		require.NoError(t, w.WritePacket(rec.Time, data, ""))
	}
	require.NoError(t, w.Close())
	return path
}

// fixIPv4Checksum recomputes the header checksum of an IPv4 packet in an
// Ethernet frame.
func fixIPv4Checksum(d []byte) {
	if len(d) < 34 || d[12] != 0x08 || d[13] != 0 {
		return
	}
	ip := d[14 : 14+int(d[14]&0xf)*4]
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i+1 < len(ip); i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	ip[10], ip[11] = byte(^sum>>8), byte(^sum)
}

// transportAt returns the transport bytes (BTH on) of an Ethernet frame.
func transportAt(t *testing.T, data []byte) []byte {
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(data, &f))
	return f.Transport
}

func TestFlows(t *testing.T) {
	a, b := netip.MustParseAddr("10.77.0.3"), netip.MustParseAddr("10.77.0.2")
	tests := []struct {
		file  string
		flows []Flow // Frames holds only the count's worth of nils
		n     []int
		lossy bool
	}{
		{"rc_pingpong.pcap", []Flow{{Type: qp.RC, A: Side{a, 0x12}, B: Side{b, 0x11}}}, []int{50}, false},
		{"write.pcap", []Flow{{Type: qp.RC, A: Side{a, 0x11}, B: Side{b, 0x11}}, {Type: qp.RC, A: Side{b, 0x12}, B: Side{a, 0x12}}}, []int{50, 40}, false},
		{"send.pcap", []Flow{{Type: qp.RC, A: Side{a, 0x11}, B: Side{b, 0x11}}, {Type: qp.RC, A: Side{a, 0x12}, B: Side{b, 0x12}},
			{Type: qp.UD, A: Side{a, 0x13}, B: Side{b, 0x13}}}, []int{50, 40, 10}, false},
		{"udaddy.pcap", []Flow{{Type: qp.UD, A: Side{a, 0x12}, B: Side{b, 0x11}}}, []int{20}, false},
		// The two directions have different UDP source ports (the
		// responder is not rxe): the only streams between the hosts pair.
		{"hosttap_respond.pcap", []Flow{{Type: qp.RC, A: Side{netip.MustParseAddr("10.77.1.2"), 0x11},
			B: Side{netip.MustParseAddr("10.77.1.10"), 0x123}}}, []int{12}, false},
		{"loss.pcap", []Flow{{Type: qp.RC, A: Side{a, 0x11}, B: Side{b, 0x11}}, {Type: qp.RC, A: Side{a, 0x12}, B: Side{b, 0x12}}}, []int{1054, 1501}, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			flows := load(t, tt.file).Flows()
			require.Len(t, flows, len(tt.flows))
			for i, f := range flows {
				assert.Equal(t, tt.flows[i].Type, f.Type)
				assert.Equal(t, tt.flows[i].A, f.A)
				assert.Equal(t, tt.flows[i].B, f.B)
				assert.Len(t, f.Frames, tt.n[i])
				if f.Type != qp.UD {
					assert.Equal(t, tt.lossy, f.Lossy())
				}
			}
		})
	}
	// udaddy's connection management datagrams (QP1) are no flow.
	for _, fr := range load(t, "udaddy.pcap").Flows()[0].Frames {
		assert.NotEqual(t, uint32(gsiQPN), fr.Pkt.BTH.DestQP)
	}
	// The responder answers the first request: in write.pcap's second flow
	// 10.77.0.2 is the requester.
	assert.Equal(t, Side{a, 0x12}, load(t, "write.pcap").Flows()[1].Responder())
}

func TestOOBRecords(t *testing.T) {
	o, ok := ParseOOBRecord([]byte("0000:000012:54b838:00000000000000000000ffff0a4d0003\x00"))
	require.True(t, ok)
	assert.Equal(t, OOBRecord{QPN: 0x12, PSN: 0x54b838, GID: netip.MustParseAddr("10.77.0.3")}, o)
	for _, bad := range []string{"", "0000:000012:54b838:00000000000000000000ffff0a4d000", "0000-000012:54b838:00000000000000000000ffff0a4d0003",
		"0000:00001g:54b838:00000000000000000000ffff0a4d0003", "0000:000012:54b838:00000000000000000000ffff0a4d00zz"} {
		_, ok := ParseOOBRecord([]byte(bad))
		assert.False(t, ok, "%q", bad)
	}

	// ibv_rc_pingpong: both records, agreeing with the RoCE frames.
	c := load(t, "rc_pingpong.pcap")
	require.Len(t, c.OOB, 2)
	assert.Equal(t, 17, c.OOB[0].No)
	assert.Equal(t, netip.MustParseAddr("10.77.0.2"), c.OOB[1].From)
	assert.Equal(t, uint32(0x23e6c7), c.OOB[1].PSN)
	recs, err := c.CheckOOB(c.Flows()[0])
	require.NoError(t, err)
	assert.Len(t, recs, 2)

	// The IPv6 pingpong trades its link-local GIDs over IPv4.
	c = load(t, "rc_pingpong_ipv6.pcap")
	recs, err = c.CheckOOB(c.Flows()[0])
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.True(t, recs[0].GID.Is6() && recs[0].From.Is4())

	// perftest: the key record names the buffer the peer's RETHs address.
	c = load(t, "write.pcap")
	recs, err = c.CheckOOB(c.Flows()[0])
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	var server OOBRecord
	for _, r := range recs {
		if r.From == netip.MustParseAddr("10.77.0.2") {
			server = r
		}
	}
	assert.True(t, server.Perftest)
	assert.Equal(t, uint32(0x2fb), server.RKey)
	assert.Equal(t, uint64(0x558ccf40b000), server.VA)

	// A record that disagrees with the frames is reported.
	c = load(t, "rc_pingpong.pcap")
	c.OOB[0].PSN++
	_, err = c.CheckOOB(c.Flows()[0])
	assert.ErrorContains(t, err, "first request")
	c = load(t, "write.pcap")
	for i := range c.OOB {
		c.OOB[i].RKey ^= 1
	}
	_, err = c.CheckOOB(c.Flows()[0])
	assert.ErrorContains(t, err, "addresses rkey")
}

// TestReplayLossResponder replays the responder of both QP pairs of
// loss.pcap, where the network dropped requests and responses: the
// captured requests, retransmissions included, are fed in order and
// softroce's ACKs, NAKs and read responses must be rxe's, byte for byte.
//
// The capture was taken on the requester's side (10.77.0.3) with loss on
// both directions, so it holds what reached the requester: requests lost on
// the way out are missing (the responder never saw them either), and so are
// the responses lost on the way back. softroce sends those too; the replay
// reports them as Uncaptured, and this test checks that each was indeed
// lost, not a response rxe did not send:
//   - the write flow's one missing ACK (PSN 10236962, MSN 9) is followed by
//     rxe's ACK for the next message with MSN 10: the responder completed
//     message 9, and rxe acknowledges every AckReq packet it completes
//     (there is no ACK coalescing in rxe's responder);
//   - every missing read response is requested again by the requester
//     later, with a read request whose PSN range holds it: the requester
//     never got it.
//
// Beyond those, rxe and softroce behave alike under loss: the seven NAKs
// (PSN sequence error) come at the same packets with the same PSN and MSN
// (one NAK per gap, none for the packets after it until the retransmission
// arrives), duplicate reads are answered again from the requested PSN and
// duplicate writes are acknowledged with the current MSN.
func TestReplayLossResponder(t *testing.T) {
	c := load(t, "loss.pcap")
	flows := c.Flows()
	require.Len(t, flows, 2)
	tests := []struct {
		flow, matched, naks, uncaptured int
	}{
		{0, 26, 7, 1},
		{1, 1406, 0, 43},
	}
	for _, tt := range tests {
		f := flows[tt.flow]
		resp := f.Responder()
		require.Equal(t, netip.MustParseAddr("10.77.0.2"), resp.Addr)
		var naks, responses int
		for _, fr := range f.Frames {
			if fr.Src == resp.Addr && isResponse(&fr.Pkt) {
				responses++
				if fr.Pkt.Info().Is(packet.HdrAETH) && fr.Pkt.AETH.Syndrome.IsNAK() {
					naks++
				}
			}
		}
		r, err := Run(f, resp.Addr, Options{Strict: true, ResponderOnly: true})
		require.NoError(t, err)
		require.NoError(t, r.Err())
		assert.Equal(t, responses, r.Matched, "every captured response reproduced")
		assert.Equal(t, tt.matched, r.Matched)
		assert.Equal(t, tt.naks, naks)
		assert.Zero(t, r.Skipped, "the responder sent no requests")
		require.Len(t, r.Uncaptured, tt.uncaptured)
		checkLost(t, f, resp.Addr, r.Uncaptured)
	}
}

// checkLost checks that the responses softroce sent and the capture lacks
// were lost in the network, not responses rxe did not send: an ACK is
// followed by an ACK with a higher MSN (the responder completed the
// message, and rxe's responder acknowledges every AckReq packet it
// completes, without coalescing); a read response is either a hole in a run
// of consecutive PSNs of the responder's (rxe sends a read response's
// packets in order, so it built the missing one), or the requester asked
// for it again later.
func checkLost(t *testing.T, f *Flow, resp netip.Addr, lost []Uncaptured) {
	index := map[*Frame]int{}
	for i, fr := range f.Frames {
		index[fr] = i
	}
	psns := map[*Frame]map[uint32]bool{} // by Before
	for _, u := range lost {
		if psns[u.Before] == nil {
			psns[u.Before] = map[uint32]bool{}
		}
		psns[u.Before][packet.BTH(transportAt(t, u.Ours)).PSN()] = true
	}
	mtu := pathMTU(f.Frames)
	for _, u := range lost {
		var p packet.Packet
		require.NoError(t, p.Decode(transportAt(t, u.Ours)))
		end := len(f.Frames)
		if u.Before != nil {
			end = index[u.Before]
		}
		prev := -1 // the host's last captured response before
		for i := end - 1; i >= 0; i-- {
			if fr := f.Frames[i]; fr.Src == resp && isResponse(&fr.Pkt) {
				prev = i
				break
			}
		}
		switch p.Info().Kind {
		case packet.KindAck:
			require.False(t, p.AETH.Syndrome.IsNAK(), "a NAK is never lost in this capture")
			found := false
			for _, fr := range f.Frames[end:] {
				if fr.Src == resp && fr.Pkt.Info().Kind == packet.KindAck && fr.Pkt.AETH.MSN > p.AETH.MSN {
					found = true
					break
				}
			}
			assert.True(t, found, "ACK %d MSN %d: a later ACK covers it", p.BTH.PSN, p.AETH.MSN)
		case packet.KindReadResponse:
			hole := prev >= 0 && u.Before != nil
			if hole {
				for q := (f.Frames[prev].Pkt.BTH.PSN + 1) & 0xFFFFFF; q != u.Before.Pkt.BTH.PSN; q = (q + 1) & 0xFFFFFF {
					if !psns[u.Before][q] {
						hole = false
						break
					}
				}
			}
			again := false
			for _, fr := range f.Frames[prev+1:] {
				if fr.Src != resp && fr.Pkt.Info().Kind == packet.KindReadRequest && readResponds(&message{first: fr}, p.BTH.PSN, mtu) {
					again = true
					break
				}
			}
			assert.True(t, hole || again, "read response %d: neither a hole in a run nor requested again", p.BTH.PSN)
		default:
			t.Errorf("uncaptured %s", Describe(&p))
		}
	}
}

// TestReplayLossRequester: the requester of loss.pcap cannot be rebuilt
// (its messages have packets the capture lacks), and the replay says so
// rather than pass.
func TestReplayLossRequester(t *testing.T) {
	f := load(t, "loss.pcap").Flows()[0]
	r, err := Run(f, f.A.Addr, Options{})
	require.NoError(t, err)
	assert.False(t, r.OK())
	require.NotNil(t, r.Diff)
}

// TestReplayAltered replays captures altered on purpose: each alteration
// must be reported at the right frame, with what differs.
func TestReplayAltered(t *testing.T) {
	host := netip.MustParseAddr("10.77.0.2")
	tests := []struct {
		name   string
		file   string
		frame  int // frame altered; the difference is reported there
		diffAt int // or there, when not 0
		fn     func(tr []byte, data []byte) []byte
		strict bool
		want   []string
	}{
		{"ACK MSN", "rc_pingpong.pcap", 39, 0, func(tr, d []byte) []byte { tr[packet.BTHLen+3]++; return d }, false,
			[]string{"MSN: captured 3, softroce 2"}},
		{"ACK syndrome", "rc_pingpong.pcap", 39, 0, func(tr, d []byte) []byte { tr[packet.BTHLen] = byte(packet.MakeNAK(0)); return d }, false,
			[]string{"AETH syndrome: captured NAK"}},
		// Frame numbers after the dropped frame shift by one: the host's
		// next ACK, frame 49, becomes 48 and shows the dropped one.
		{"host ACK dropped", "rc_pingpong.pcap", 39, 48, func(tr, d []byte) []byte { return nil }, false,
			[]string{"PSN: captured 5552195, softroce 5552191", "MSN: captured 3, softroce 2"}},
		{"read response PSN", "read.pcap", 0, 0, nil, false, []string{"PSN: captured"}},
		{"TTL, strict only", "rc_pingpong.pcap", 40, 0, func(tr, d []byte) []byte { d[14+8]--; return d }, true,
			[]string{"IP header: byte 8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame, fn := tt.frame, tt.fn
			if fn == nil {
				// The host's second response of the kind: its contents
				// follow from the first and the peer's requests.
				kind := packet.KindReadResponse
				fn = func(tr, d []byte) []byte { tr[11]++; return d } // PSN
				n := 0
				for _, fr := range load(t, tt.file).Frames {
					if fr.Src == host && fr.Pkt.Info().Kind == kind {
						if n++; n == 2 {
							frame = fr.No
						}
					}
				}
			}
			path := alter(t, tt.file, func(no int, d []byte) []byte {
				if no == frame {
					var f packet.Frame
					require.NoError(t, packet.ParseFrame(d, &f))
					return fn(f.Transport, d)
				}
				return d
			})
			c, err := Load(path)
			require.NoError(t, err)
			f := c.Flows()[0]
			if tt.diffAt != 0 {
				frame = tt.diffAt
			}
			if tt.strict {
				r, err := Run(f, host, Options{})
				require.NoError(t, err)
				require.NoError(t, r.Err(), "fields alone do not see it")
			}
			r, err := Run(f, host, Options{Strict: tt.strict})
			require.NoError(t, err)
			require.NotNil(t, r.Diff)
			require.NotNil(t, r.Diff.Captured)
			assert.Equal(t, frame, r.Diff.Captured.No)
			msg := r.Err().Error()
			for _, w := range tt.want {
				assert.Contains(t, msg, w)
			}
			assert.Contains(t, msg, "captured: #")
			assert.Contains(t, msg, "softroce: 10.77.0.2 -> 10.77.0.3")
		})
	}

	// A frame of the peer that is missing leaves softroce with nothing to
	// answer where rxe answered.
	c := load(t, "rc_pingpong.pcap")
	f := c.Flows()[0]
	var firstPeer int
	for _, fr := range f.Frames {
		if fr.Src != host {
			firstPeer = fr.No
			break
		}
	}
	path := alter(t, "rc_pingpong.pcap", func(no int, d []byte) []byte {
		if no == firstPeer {
			return nil
		}
		return d
	})
	c, err := Load(path)
	require.NoError(t, err)
	r, err := Run(c.Flows()[0], host, Options{})
	require.NoError(t, err)
	require.NotNil(t, r.Diff)
	assert.True(t, strings.Contains(r.Err().Error(), "nothing to send") || strings.Contains(r.Err().Error(), "differs"), r.Err().Error())
}

// TestCompareFields: the field comparison names every field that differs.
// (Payload differences of the host's own messages cannot be provoked by
// altering a capture: the replay rebuilds those messages from it.)
func TestCompareFields(t *testing.T) {
	c := load(t, "read.pcap")
	var resp *Frame
	for _, fr := range c.Frames {
		if fr.Pkt.BTH.Opcode == packet.RCReadResponseFirst {
			resp = fr
			break
		}
	}
	require.NotNil(t, resp)
	ours := resp.Pkt
	assert.Empty(t, compareFields(&ours, &resp.Pkt))
	ours.Payload = append([]byte(nil), resp.Pkt.Payload...)
	ours.Payload[7] ^= 1
	ours.AETH.MSN++
	ours.BTH.AckReq = !ours.BTH.AckReq
	d := compareFields(&ours, &resp.Pkt)
	require.Len(t, d, 3)
	assert.Contains(t, d[0], "AckReq")
	assert.Contains(t, d[1], "MSN")
	assert.Equal(t, "payload: byte 7: captured "+hex8(resp.Pkt.Payload[7])+", softroce "+hex8(ours.Payload[7]), d[2])
	ours = resp.Pkt
	ours.BTH.Opcode = packet.RCReadResponseMid
	assert.Equal(t, []string{"opcode: captured RC_RDMA_READ_RESPONSE_FIRST, softroce RC_RDMA_READ_RESPONSE_MIDDLE"}, compareFields(&ours, &resp.Pkt))
}

func hex8(b byte) string { return fmt.Sprintf("%#02x", b) }

// TestRunErrors: a host that is not in the flow, or whose QPN softroce
// cannot create, is an error, not a difference.
func TestRunErrors(t *testing.T) {
	f := load(t, "rc_pingpong.pcap").Flows()[0]
	_, err := Run(f, netip.MustParseAddr("10.9.9.9"), Options{})
	assert.ErrorContains(t, err, "not an end of flow")
	g := *f
	g.A.QPN = 5 // below softroce's first QPN
	_, err = Run(&g, g.A.Addr, Options{})
	assert.ErrorContains(t, err, "cannot be created")
}

func TestRewrite(t *testing.T) {
	for _, file := range []string{"rc_pingpong.pcap", "rc_pingpong_ipv6.pcap"} {
		c := load(t, file)
		for _, v6 := range []bool{false, true} {
			rw := Rewrite{Src: netip.MustParseAddr("127.0.99.1"), Dst: netip.MustParseAddr("127.0.99.2"), SrcPort: 4792,
				SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, ZeroIPID: true}
			if v6 {
				rw.Src, rw.Dst, rw.ZeroIPID = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), false
			}
			for _, fr := range c.Frames {
				out, err := rw.Apply(nil, fr)
				require.NoError(t, err)
				var f, orig packet.Frame
				require.NoError(t, packet.ParseFrame(out, &f))
				require.NoError(t, packet.ParseFrame(fr.Data, &orig))
				assert.True(t, f.ICRCOK(), "%s frame %d: ICRC recomputed", file, fr.No)
				a := f.Addressing()
				assert.Equal(t, rw.Src, a.Src.Unmap())
				assert.Equal(t, rw.Dst, a.Dst.Unmap())
				assert.Equal(t, uint16(4792), a.SrcPort)
				assert.Equal(t, fr.TTL, a.HopLimit)
				if !v6 {
					assert.Zero(t, a.IPID)
					assert.True(t, a.DF)
				}
				assert.Equal(t, rw.SrcMAC[:], f.Eth[6:12])
				n := len(orig.Transport) - packet.ICRCLen
				assert.Equal(t, orig.Transport[:n], f.Transport[:len(f.Transport)-packet.ICRCLen], "frame %d: transport kept", fr.No)
			}
		}
	}
	_, err := (&Rewrite{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("::1")}).Apply(nil, load(t, "rc_pingpong.pcap").Frames[0])
	assert.Error(t, err)
}
