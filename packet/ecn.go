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

// IPECN returns the ECN codepoint of an IPv4 or IPv6 header (Not-ECT for
// anything shorter than one).
func IPECN(ip []byte) uint8 {
	switch {
	case len(ip) >= IPv4Len && ip[0]>>4 == 4:
		return ip[1] & 3
	case len(ip) >= IPv6Len && ip[0]>>4 == 6:
		return ip[1] >> 4 & 3
	}
	return ECNNotECT
}

// FrameECN returns the ECN codepoint of an Ethernet frame carrying IPv4 or
// IPv6, and false for any other frame.
func FrameECN(f []byte) (uint8, bool) {
	if len(f) < EthernetLen+IPv4Len {
		return 0, false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case EtherTypeIPv4:
		return IPECN(f[EthernetLen:]), true
	case EtherTypeIPv6:
		if len(f) >= EthernetLen+IPv6Len {
			return IPECN(f[EthernetLen:]), true
		}
	}
	return 0, false
}

// MarkCE sets Congestion Experienced on an ECN-capable (ECT(0), ECT(1))
// IPv4 or IPv6 frame, as a switch's egress queue does, and reports whether
// it did. IPv4's header checksum is recomputed, as a receiving IP stack
// checks it; the ICRC masks the TOS byte and the checksum, so the RoCE
// packet stays valid.
func MarkCE(f []byte) bool {
	ecn, ok := FrameECN(f)
	if !ok || ecn == ECNNotECT || ecn == ECNCE {
		return false
	}
	ip := f[EthernetLen:]
	if binary.BigEndian.Uint16(f[12:]) == EtherTypeIPv6 {
		ip[1] |= ECNCE << 4
		return true
	}
	ip[1] |= ECNCE
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], IPv4HeaderChecksum(ip[:IPv4Len]))
	return true
}
