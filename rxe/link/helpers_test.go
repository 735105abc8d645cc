package link

import (
	"encoding/binary"
	"hash/crc32"
	"net"
	"net/netip"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/require"
)

// roceFrame builds an RC SEND_ONLY frame from src to dst with a payload of
// n bytes whose first 4 bytes carry seq, and a correct ICRC.
func roceFrame(t testing.TB, dmac, smac [6]byte, src, dst netip.Addr, n int, seq uint32) []byte {
	t.Helper()
	pay := make([]byte, n)
	for i := range pay {
		pay[i] = byte(i*7 + int(seq))
	}
	if n >= 4 {
		binary.BigEndian.PutUint32(pay, seq)
	}
	p := packet.Packet{Payload: pay}
	p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: seq & 0xFFFFFF, AckReq: true}
	a := packet.Addressing{Src: src, Dst: dst, SrcPort: 0xC001, HopLimit: 64, DF: true}
	f := packet.AppendFrame(nil, &packet.Ethernet{Dst: dmac, Src: smac}, &a, &p)
	var pf packet.Frame
	require.NoError(t, packet.ParseFrame(f, &pf))
	require.True(t, pf.ICRCOK())
	return f
}

var (
	ip4a = netip.MustParseAddr("10.0.0.1")
	ip4b = netip.MustParseAddr("10.0.0.2")
	ip4c = netip.MustParseAddr("10.0.0.3")
)

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func netIfIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

func udpAddr(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	require.NoError(t, err)
	return a
}
