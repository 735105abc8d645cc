package packet_test

import (
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// icrcMasked reports whether bit (byte i, mask m) of the IP/UDP/transport
// span is one the ICRC masks (IBTA annex A17, rxe_icrc.c): IPv4 TOS, TTL,
// header checksum; IPv6 traffic class, flow label, hop limit; the UDP
// checksum; BTH byte 4 (FECN, BECN, reserved).
func icrcMasked(ipv4 bool, i int, m byte) bool {
	ipLen := packet.IPv6Len
	if ipv4 {
		ipLen = packet.IPv4Len
	}
	switch {
	case i < ipLen && ipv4:
		return i == 1 || i == 8 || i == 10 || i == 11
	case i < ipLen:
		return i == 0 && m&0x0F != 0 || i == 1 || i == 2 || i == 3 || i == 7
	case i < ipLen+packet.UDPLen:
		return i-ipLen == 6 || i-ipLen == 7
	}
	return i-ipLen-packet.UDPLen == 4
}

// TestICRCBitFlips flips, one at a time, every bit the ICRC covers in RoCE
// frames of the captures (IPv4 and IPv6): IP and UDP headers, BTH, extension
// headers, payload, pad and the ICRC itself. Every unmasked flip must make
// CheckICRC fail; every masked flip must leave it passing. A flip of the
// masked IPv4 fields must still be caught, by the IPv4 header checksum.
func TestICRCBitFlips(t *testing.T) {
	for _, name := range captureFiles(t) {
		t.Run(filepath.Base(name), func(t *testing.T) {
			perOpcode := map[packet.Opcode]int{}
			tested := 0
			for _, fr := range roceFrames(t, name) {
				var f packet.Frame
				require.NoError(t, packet.ParseFrame(fr, &f))
				op := packet.BTH(f.Transport).Opcode()
				if perOpcode[op] >= 2 {
					continue
				}
				perOpcode[op]++
				tested++
				ipStart := len(f.Eth)
				span := fr[ipStart : ipStart+len(f.IP)+len(f.UDP)+len(f.Transport)]
				require.True(t, f.ICRCOK())
				for i := range span {
					for m := byte(1); m != 0; m <<= 1 {
						span[i] ^= m
						ok := f.ICRCOK()
						var g packet.Frame
						perr := packet.ParseFrame(fr, &g)
						span[i] ^= m
						if icrcMasked(f.IsIPv4(), i, m) {
							require.True(t, ok, "%s: masked flip at byte %d mask %#x broke the ICRC", op, i, m)
							if f.IsIPv4() && i < packet.IPv4Len {
								require.ErrorIs(t, perr, packet.ErrIPChecksum, "byte %d mask %#x", i, m)
							}
						} else {
							require.False(t, ok, "%s: flip at byte %d mask %#x not caught by the ICRC", op, i, m)
						}
					}
				}
				require.True(t, f.ICRCOK(), "frame restored")
			}
			require.NotZero(t, tested)
		})
	}
}

// TestICRCMaskedFieldsIPv6 checks the IPv6 masks directly on a built packet:
// the version nibble is covered, the traffic class and flow label are not.
func TestICRCMaskedFieldsIPv6(t *testing.T) {
	p := packet.Packet{BTH: packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 3}, Payload: []byte{1, 2, 3, 4, 5}}
	ip := packet.AppendIPPacket(nil, &testAddr6, &p)
	var f packet.Frame
	require.NoError(t, packet.ParseIP(ip, &f))
	require.True(t, f.ICRCOK())
	a := testAddr6
	a.TrafficClass, a.FlowLabel, a.HopLimit = 0xFF, 0xFFFFF, 0xFF
	other := packet.AppendIPPacket(nil, &a, &p)
	require.Equal(t, ip[len(ip)-4:], other[len(other)-4:], "TC, flow label and hop limit are masked")
	other[0] ^= 0x10 // version 6 -> 7
	require.False(t, packet.CheckICRC(other[:48], other[48:]))
}
