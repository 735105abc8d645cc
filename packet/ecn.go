package packet

import "encoding/binary"

// ECN codepoints (RFC 3168): the low two bits of IPv4's TOS byte and of
// IPv6's traffic class.
const (
	ECNNotECT = 0
	ECNECT1   = 1
	ECNECT0   = 2
	ECNCE     = 3
)

// FrameECN returns the ECN codepoint of an Ethernet frame carrying IPv4 or
// IPv6, and false for any other frame.
func FrameECN(f []byte) (uint8, bool) {
	const eth = EthernetLen
	if len(f) < eth+IPv4Len {
		return 0, false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		return f[eth+1] & 3, true
	case 0x86DD:
		if len(f) >= eth+IPv6Len {
			return f[eth+1] >> 4 & 3, true
		}
	}
	return 0, false
}

// MarkCE sets Congestion Experienced on an ECN-capable (ECT(0), ECT(1))
// IPv4 or IPv6 frame, as a switch's egress queue does, and reports whether
// it did. IPv4's header checksum is updated incrementally (RFC 1624), as a
// receiving IP stack checks it; the ICRC masks the TOS byte and the
// checksum, so the RoCE packet stays valid.
func MarkCE(f []byte) bool {
	ecn, ok := FrameECN(f)
	if !ok || ecn == ECNNotECT || ecn == ECNCE {
		return false
	}
	ip := f[EthernetLen:]
	if binary.BigEndian.Uint16(f[12:]) == 0x86DD {
		ip[1] |= ECNCE << 4
		return true
	}
	old := binary.BigEndian.Uint16(ip[0:2])
	ip[1] |= ECNCE
	sum := ^binary.BigEndian.Uint16(ip[10:12])
	// HC' = ~(~HC + ~m + m') with one's-complement addition.
	s := uint32(sum) + uint32(^old) + uint32(binary.BigEndian.Uint16(ip[0:2]))
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(ip[10:12], ^uint16(s))
	return true
}
