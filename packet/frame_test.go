package packet_test

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testFrame(a *packet.Addressing) []byte {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 17, AckReq: true, PSN: 5},
		Payload: []byte("payload")}
	return packet.AppendFrame(nil, &testEth, a, &p)
}

// setIPv4Checksum recomputes the IPv4 header checksum of a frame after a test
// edited the header, so that the edit is what ParseFrame rejects.
func setIPv4Checksum(fr []byte) {
	ip := fr[packet.EthernetLen : packet.EthernetLen+packet.IPv4Len]
	ip[10], ip[11] = 0, 0
	var s uint32
	for i := 0; i < len(ip); i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(s))
}

func TestParseFrameErrors(t *testing.T) {
	const e = packet.EthernetLen
	v4 := func(edit func(b []byte) []byte) []byte { return edit(testFrame(&testAddr4)) }
	v6 := func(edit func(b []byte) []byte) []byte { return edit(testFrame(&testAddr6)) }
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, packet.ErrTruncated},
		{"short ethernet", make([]byte, 13), packet.ErrTruncated},
		{"ARP", v4(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), packet.ErrNotIP},
		{"VLAN cut", v4(func(b []byte) []byte { b[12], b[13] = 0x81, 0x00; return b[:16] }), packet.ErrTruncated},
		{"VLAN ARP", v4(func(b []byte) []byte {
			return append(append(append([]byte{}, b[:12]...), 0x81, 0x00, 0, 5, 0x08, 0x06), b[14:]...)
		}), packet.ErrNotIP},
		{"no IP", v4(func(b []byte) []byte { return b[:e] }), packet.ErrTruncated},
		{"IPv4 cut", v4(func(b []byte) []byte { return b[:e+19] }), packet.ErrTruncated},
		{"IPv6 cut", v6(func(b []byte) []byte { return b[:e+39] }), packet.ErrTruncated},
		{"version 5", v4(func(b []byte) []byte { b[e] = 0x55; return b }), packet.ErrNotIP},
		{"IPv4 options", v4(func(b []byte) []byte { b[e] = 0x46; return b }), packet.ErrIPOptions},
		{"IPv4 IHL 4", v4(func(b []byte) []byte { b[e] = 0x44; return b }), packet.ErrIPOptions},
		{"IPv4 TCP", v4(func(b []byte) []byte { b[e+9] = 6; setIPv4Checksum(b); return b }), packet.ErrNotUDP},
		{"IPv6 TCP", v6(func(b []byte) []byte { b[e+6] = 6; return b }), packet.ErrNotUDP},
		{"IPv6 hop-by-hop", v6(func(b []byte) []byte { b[e+6] = 0; return b }), packet.ErrNotUDP},
		{"IPv4 more fragments", v4(func(b []byte) []byte { b[e+6] |= 0x20; setIPv4Checksum(b); return b }), packet.ErrFragmented},
		{"IPv4 fragment offset", v4(func(b []byte) []byte { b[e+7] = 1; setIPv4Checksum(b); return b }), packet.ErrFragmented},
		{"IPv4 total too long", v4(func(b []byte) []byte { b[e+3]++; setIPv4Checksum(b); return b }), packet.ErrBadLength},
		{"IPv4 total too short", v4(func(b []byte) []byte { b[e+2], b[e+3] = 0, 27; setIPv4Checksum(b); return b }), packet.ErrBadLength},
		{"IPv6 payload too long", v6(func(b []byte) []byte { b[e+5]++; return b }), packet.ErrBadLength},
		{"IPv6 jumbo", v6(func(b []byte) []byte { b[e+4], b[e+5] = 0, 0; return b }), packet.ErrBadLength},
		{"UDP length", v4(func(b []byte) []byte { b[e+20+5]--; return b }), packet.ErrBadLength},
		{"UDP port", v4(func(b []byte) []byte { b[e+20+3]++; return b }), packet.ErrNotRoCE},
		{"IPv4 checksum", v4(func(b []byte) []byte { b[e+10] ^= 1; return b }), packet.ErrIPChecksum},
		{"IPv4 TTL", v4(func(b []byte) []byte { b[e+8]--; return b }), packet.ErrIPChecksum},
		{"UDP checksum v4", v4(func(b []byte) []byte { b[e+20+7] = 1; return b }), packet.ErrUDPChecksum},
		{"UDP checksum v6", v6(func(b []byte) []byte { b[e+40+7] = 1; return b }), packet.ErrUDPChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f packet.Frame
			assert.ErrorIs(t, packet.ParseFrame(tt.b, &f), tt.err)
		})
	}
}

func TestParseFrameAccepts(t *testing.T) {
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		fr := testFrame(&a)
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		require.True(t, f.ICRCOK())
		require.Equal(t, fr[:packet.EthernetLen], f.Eth)

		// Ethernet padding past the IP length is ignored.
		padded := append(append([]byte(nil), fr...), 0, 0, 0, 0, 0, 0)
		require.NoError(t, packet.ParseFrame(padded, &f))
		require.Equal(t, fr[len(fr)-4:], f.Transport[len(f.Transport)-4:])
		require.True(t, f.ICRCOK())

		// An 802.1Q tag is skipped.
		tagged := append(append(append([]byte{}, fr[:12]...), 0x81, 0x00, 0x20, 0x05), fr[12:]...)
		require.NoError(t, packet.ParseFrame(tagged, &f))
		require.Len(t, f.Eth, packet.EthernetLen+4)
		require.True(t, f.ICRCOK())
		require.Equal(t, a, withPort(f.Addressing()))
	}
}

func withPort(a packet.Addressing) packet.Addressing {
	if a.DstPort == packet.UDPPort {
		a.DstPort = 0
	}
	return a
}

// TestParseFrameUDPChecksum checks that a correct non-zero UDP checksum is
// accepted, over IPv4 and IPv6, including the 0xFFFF form of a zero sum.
func TestParseFrameUDPChecksum(t *testing.T) {
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		fr := testFrame(&a)
		ipLen := a.HeaderLen() - packet.UDPLen
		ip := fr[packet.EthernetLen : packet.EthernetLen+ipLen]
		udp := fr[packet.EthernetLen+ipLen:]
		var s uint32
		add := func(b []byte) {
			for i := 0; i+1 < len(b); i += 2 {
				s += uint32(binary.BigEndian.Uint16(b[i:]))
			}
			if len(b)%2 == 1 {
				s += uint32(b[len(b)-1]) << 8
			}
		}
		if a.IsIPv4() {
			add(ip[12:20])
		} else {
			add(ip[8:40])
		}
		s += 17 + uint32(len(udp))
		add(udp)
		for s>>16 != 0 {
			s = s&0xFFFF + s>>16
		}
		binary.BigEndian.PutUint16(udp[6:], ^uint16(s))
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(fr, &f))
		require.True(t, f.ICRCOK(), "UDP checksum is masked")
		udp[len(udp)-1] ^= 0x80 // ICRC byte: covered by the UDP checksum
		require.ErrorIs(t, packet.ParseFrame(fr, &f), packet.ErrUDPChecksum)
	}
}

// TestICRCSeed checks the seed against rxe's constant: ~0xdebb20e3 is the
// CRC state after eight 0xFF bytes (reference §1.3).
func TestICRCSeed(t *testing.T) {
	require.Equal(t, uint32(0xdebb20e3), ^crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}))
}

// TestICRCFromScratch recomputes the ICRC the way the spec words it (CRC-32
// over 0xFF*8, the masked headers and the rest of the packet) and compares.
func TestICRCFromScratch(t *testing.T) {
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		fr := testFrame(&a)
		ipudp := append([]byte(nil), fr[packet.EthernetLen:packet.EthernetLen+a.HeaderLen()]...)
		tr := append([]byte(nil), fr[packet.EthernetLen+a.HeaderLen():len(fr)-4]...)
		if a.IsIPv4() {
			ipudp[1], ipudp[8], ipudp[10], ipudp[11] = 0xFF, 0xFF, 0xFF, 0xFF
		} else {
			ipudp[0] |= 0x0F
			ipudp[1], ipudp[2], ipudp[3], ipudp[7] = 0xFF, 0xFF, 0xFF, 0xFF
		}
		ipudp[len(ipudp)-2], ipudp[len(ipudp)-1] = 0xFF, 0xFF
		tr[4] = 0xFF
		msg := append(append([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, ipudp...), tr...)
		want := crc32.ChecksumIEEE(msg)
		got := packet.ComputeICRC(fr[packet.EthernetLen:packet.EthernetLen+a.HeaderLen()], fr[packet.EthernetLen+a.HeaderLen():len(fr)-4])
		require.Equal(t, want, got)
		require.Equal(t, want, binary.LittleEndian.Uint32(fr[len(fr)-4:]), "stored least significant byte first")
		require.Equal(t, want, bswap32(packet.StoredICRC(fr)))
	}
}

func TestICRCBadInput(t *testing.T) {
	tr := make([]byte, packet.BTHLen+packet.ICRCLen)
	for _, n := range []int{0, 7, 8, 20, 27, 29, 40, 47, 49, 100} {
		h := make([]byte, n)
		assert.Zero(t, packet.ComputeICRC(h, tr[:packet.BTHLen]), "ipudp len %d", n)
		assert.False(t, packet.CheckICRC(h, tr), "ipudp len %d", n)
		packet.SetICRC(h, tr) // must not panic
	}
	h := make([]byte, 28)
	assert.Zero(t, packet.ComputeICRC(h, tr[:11]))
	assert.False(t, packet.CheckICRC(h, tr[:15]))
	assert.False(t, packet.CheckICRC(h, nil))
	packet.SetICRC(h, tr[:3]) // must not panic
	assert.Zero(t, packet.StoredICRC(tr[:3]))
}

// TestAddressingMixedFamilies checks a mismatched Addressing does not panic.
func TestAddressingMixedFamilies(t *testing.T) {
	a := packet.Addressing{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd00::2")}
	b := a.AppendIPUDP(nil, 0)
	require.Len(t, b, packet.IPv4Len+packet.UDPLen)
	require.Equal(t, []byte{0, 0, 0, 0}, b[16:20])
	var zero packet.Addressing
	require.Len(t, zero.AppendIPUDP(nil, 0), packet.IPv6Len+packet.UDPLen)
}

// TestICRCAllLengths checks ComputeICRC against hash/crc32 over a plain
// masked copy, over IPv4 (40-byte masked prefix: five 8-byte strides) and
// IPv6 (60 bytes: seven strides and a 4-byte tail), for transports of every
// length up to 200 bytes past the BTH (payloads short of hash/crc32's
// carry-less folding, and whole blocks with every remainder).
func TestICRCAllLengths(t *testing.T) {
	for _, a := range []packet.Addressing{testAddr4, testAddr6} {
		ipudp := a.AppendIPUDP(nil, 0)
		for n := packet.BTHLen; n < packet.BTHLen+200; n++ {
			tr := make([]byte, n)
			for i := range tr {
				tr[i] = byte(i*31 + n)
			}
			m := append([]byte(nil), ipudp...)
			if a.IsIPv4() {
				m[1], m[8], m[10], m[11] = 0xFF, 0xFF, 0xFF, 0xFF
			} else {
				m[0] |= 0x0F
				m[1], m[2], m[3], m[7] = 0xFF, 0xFF, 0xFF, 0xFF
			}
			m[len(m)-2], m[len(m)-1] = 0xFF, 0xFF
			mt := append([]byte(nil), tr...)
			mt[4] = 0xFF
			msg := append(append(append([]byte(nil), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF), m...), mt...)
			require.Equal(t, crc32.ChecksumIEEE(msg), packet.ComputeICRC(ipudp, tr), "v4=%v len %d", a.IsIPv4(), n)
		}
	}
}

// UpdateCRC32 is crc32.Update with the IEEE table, from any state, for
// every length around the 16-byte blocks and the 64 bytes where hash/crc32
// starts folding, at every alignment of a block.
func TestUpdateCRC32(t *testing.T) {
	buf := make([]byte, 320)
	for i := range buf {
		buf[i] = byte(i*131 + i>>3)
	}
	for _, crc := range []uint32{0, 0xdebb20e3, 0xffffffff} {
		for off := range 16 {
			for n := 0; off+n <= len(buf); n++ {
				p := buf[off : off+n]
				require.Equal(t, crc32.Update(crc, crc32.IEEETable, p), packet.UpdateCRC32(crc, p), "crc %#x, %d bytes at +%d", crc, n, off)
			}
		}
	}
}
