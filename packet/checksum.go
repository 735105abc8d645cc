package packet

// Internet checksums (RFC 1071). The ICRC masks the IPv4 header checksum and
// the UDP checksum, so they must be checked on their own: the Linux IP and UDP
// layers drop a datagram whose IPv4 header checksum or non-zero UDP checksum
// is wrong before rxe sees it, and a stack reading raw frames must do the same.

// onesSum adds b, as big-endian 16-bit words (an odd last byte padded with a
// zero), to the unfolded one's-complement sum s. It sums 32-bit words: since
// 2^16 = 1 modulo 0xFFFF, folding at the end gives the same result.
func onesSum(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		s += uint64(be.Uint32(b)) + uint64(be.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(be.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold reduces an unfolded sum to 16 bits.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// ipv4HeaderOK reports whether an IPv4 header's checksum verifies.
func ipv4HeaderOK(ip []byte) bool { return fold(onesSum(0, ip)) == 0xFFFF }

// udpPseudoSum returns the unfolded sum of the UDP pseudo-header.
func udpPseudoSum(ip []byte, udpLen int) uint64 {
	var s uint64
	if len(ip) == IPv4Len {
		s = onesSum(0, ip[12:20])
	} else {
		s = onesSum(0, ip[8:40])
	}
	return s + 17 + uint64(udpLen)
}

// setUDPChecksum computes the UDP checksum of a datagram (udp is the UDP
// header and payload) and stores it.
func setUDPChecksum(ip, udp []byte) {
	udp[6], udp[7] = 0, 0
	c := ^fold(onesSum(udpPseudoSum(ip, len(udp)), udp))
	if c == 0 {
		c = 0xFFFF // zero would mean "no checksum"
	}
	be.PutUint16(udp[6:], c)
}

// udpChecksumOK reports whether the UDP checksum of a datagram (udp is the
// UDP header and payload) verifies. A zero checksum means "none": IPv4 allows
// it, and so do RoCE v2 receivers over IPv6 (rxe sends zero and its tunnel
// socket sets no_check6_rx).
func udpChecksumOK(ip, udp []byte) bool {
	if udp[6] == 0 && udp[7] == 0 {
		return true
	}
	return fold(onesSum(udpPseudoSum(ip, len(udp)), udp)) == 0xFFFF
}

// IPv4HeaderChecksum is the Internet checksum of an IPv4 header whose
// checksum field is zero: the value to store in bytes 10-11.
func IPv4HeaderChecksum(h []byte) uint16 { return ^fold(onesSum(0, h)) }
