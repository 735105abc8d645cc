package packet

import (
	"encoding/binary"
	"hash/crc32"
)

// icrcSeed is the CRC-32 state after eight 0xFF bytes, the masked LRH that
// RoCE v2 pretends precedes the IP header (rxe seeds its CRC with the same
// value, ~0xdebb20e3).
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ComputeICRC returns the invariant CRC of a RoCE v2 packet. ipudp is the IP
// header (20-byte IPv4 without options, or 40-byte IPv6) followed by the 8-byte
// UDP header; transport is BTH through pad, without the ICRC. The variant
// fields are masked to ones as IBTA annex A17 requires: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; and BTH byte 4 (FECN, BECN, reserved).
func ComputeICRC(ipudp, transport []byte) uint32 {
	var scratch [40 + 8 + BTHLen]byte
	n := copy(scratch[:], ipudp)
	if n != len(ipudp) || len(transport) < BTHLen {
		return 0
	}
	ip := scratch[:n-8]
	if len(ip) == 20 {
		ip[1] = 0xff                // TOS
		ip[8] = 0xff                // TTL
		ip[10], ip[11] = 0xff, 0xff // header checksum
	} else {
		ip[0] |= 0x0f                          // traffic class, high nibble
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff // traffic class low nibble + flow label
		ip[7] = 0xff                           // hop limit
	}
	udp := scratch[n-8 : n]
	udp[6], udp[7] = 0xff, 0xff
	copy(scratch[n:], transport[:BTHLen])
	scratch[n+4] = 0xff
	crc := crc32.Update(icrcSeed, crc32.IEEETable, scratch[:n+BTHLen])
	return crc32.Update(crc, crc32.IEEETable, transport[BTHLen:])
}

// SetICRC computes the ICRC of pkt (BTH through ICRC slot) and stores it in
// the last four bytes, least significant byte first, as rxe and RNICs do.
func SetICRC(ipudp, pkt []byte) {
	n := len(pkt) - ICRCLen
	binary.LittleEndian.PutUint32(pkt[n:], ComputeICRC(ipudp, pkt[:n]))
}

// CheckICRC reports whether the ICRC at the end of pkt is right.
func CheckICRC(ipudp, pkt []byte) bool {
	n := len(pkt) - ICRCLen
	if n < BTHLen {
		return false
	}
	return binary.LittleEndian.Uint32(pkt[n:]) == ComputeICRC(ipudp, pkt[:n])
}

// StoredICRC returns the ICRC carried at the end of pkt, in the order tshark
// shows it (the wire bytes read big-endian).
func StoredICRC(pkt []byte) uint32 {
	if len(pkt) < ICRCLen {
		return 0
	}
	return binary.BigEndian.Uint32(pkt[len(pkt)-ICRCLen:])
}
