package packet_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

func TestMarkCE(t *testing.T) {
	p := packet.Packet{Payload: []byte("congested")}
	p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: 7}
	tests := []struct {
		name   string
		src    string
		tc     uint8
		marked bool
		want   uint8
	}{
		{"IPv4 ECT(0)", "10.0.0.1", 0x02, true, packet.ECNCE},
		{"IPv4 ECT(1), DSCP 26", "10.0.0.1", 26<<2 | 1, true, packet.ECNCE},
		{"IPv4 Not-ECT", "10.0.0.1", 0x00, false, packet.ECNNotECT},
		{"IPv4 already CE", "10.0.0.1", 0x6B, false, packet.ECNCE},
		{"IPv6 ECT(0)", "fd00::1", 0x6A, true, packet.ECNCE},
		{"IPv6 Not-ECT", "fd00::1", 0x68, false, packet.ECNNotECT},
	}
	for _, tt := range tests {
		src := netip.MustParseAddr(tt.src)
		dst := netip.MustParseAddr("10.0.0.2")
		if src.Is6() {
			dst = netip.MustParseAddr("fd00::2")
		}
		a := packet.Addressing{Src: src, Dst: dst, SrcPort: 0xC000, DstPort: packet.UDPPort,
			TrafficClass: tt.tc, HopLimit: 64, DF: true, IPID: 0x1234}
		f := packet.AppendFrame(nil, &packet.Ethernet{}, &a, &p)
		assert.Equal(t, tt.marked, packet.MarkCE(f), tt.name)
		ecn, ok := packet.FrameECN(f)
		require.True(t, ok)
		assert.Equal(t, tt.want, ecn, tt.name)
		// The header checksum is right (ParseFrame checks it), and the ICRC
		// still holds: it masks the TOS byte.
		var fr packet.Frame
		require.NoError(t, packet.ParseFrame(f, &fr), tt.name)
		assert.True(t, fr.ICRCOK(), tt.name)
		// The rest of the header is untouched: only TOS, checksum changed.
		ref := packet.AppendFrame(nil, &packet.Ethernet{}, &a, &p)
		diff := 0
		for i := range f {
			if f[i] != ref[i] {
				diff++
			}
		}
		assert.LessOrEqual(t, diff, 3, tt.name)
	}
	assert.False(t, packet.MarkCE([]byte{1, 2, 3}))
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	assert.False(t, packet.MarkCE(arp))
}
