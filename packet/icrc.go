package packet

import (
	"encoding/binary"
	"hash/crc32"
	"time"
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
//
// It returns 0 when ipudp is neither 28 nor 48 bytes long or transport is
// shorter than a BTH; CheckICRC treats those as failures.
func ComputeICRC(ipudp, transport []byte) uint32 {
	if !icrcInputOK(ipudp, transport) {
		return 0
	}
	var scratch [IPv6Len + UDPLen + BTHLen]byte
	n := copy(scratch[:], ipudp)
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
	crc := crcUpdateSmall(icrcSeed, scratch[:n+BTHLen])
	return UpdateCRC32(crc, transport[BTHLen:])
}

// UpdateCRC32 is crc32.Update(crc, crc32.IEEETable, p). hash/crc32 folds
// whole 16-byte blocks of 64 bytes or more with carry-less multiplies, and
// takes the rest, and anything shorter, through slicing-by-8 tables of its
// own: 8 KiB that the headers' CRC (crcUpdateSmall) already keeps a copy of
// in this package. Two copies of one table compete for the first-level
// data cache on every packet (10% of its misses in the simulator's scale
// scenario), so the bytes outside the blocks go through this package's.
// Where carry-less multiplies are slow (crcBodySlicing), all of it does;
// where they are 256 bits wide (crcFoldWide), inputs of crcFoldMin bytes
// or more fold their 128-byte blocks in this package, twice as fast.
func UpdateCRC32(crc uint32, p []byte) uint32 {
	if len(p) < 64 || crcBodySlicing {
		return crcUpdateSmall(crc, p)
	}
	if len(p) >= crcFoldMin && crcFoldWide {
		// The 128-byte blocks fold into 16 bytes with the same CRC from
		// state 0; the states here are inverted (crc32.Update's).
		var x [16]byte
		k := len(p) &^ 127
		foldAVX2(^crc, p[:k], &x)
		crc, p = crcUpdateSmall(^uint32(0), x[:]), p[k:]
		if len(p) < 64 {
			return crcUpdateSmall(crc, p)
		}
	}
	k := len(p) &^ 15
	return crcUpdateSmall(crc32.Update(crc, crc32.IEEETable, p[:k]), p[k:])
}

// crcFoldMin is the shortest input UpdateCRC32 gives foldAVX2 (which
// takes two 128-byte blocks at least).
const crcFoldMin = 256

// crcBodySlicing makes UpdateCRC32 (and so ComputeICRC's payload) go
// through slicing-by-8 rather than hash/crc32's: on a CPU whose carry-less multiply is slow
// (QEMU's TCG emulates PCLMULQDQ in a helper, and there slicing-by-8, table
// lookups the kernel's crc32_le also uses, is faster: softroce's WRITE
// bandwidth in a TCG guest rose from 12.8 to 14.1-14.5 MB/s with it). It is
// decided once, by timing both on the same 16 KiB; the CRC is the same
// either way, only its speed differs.
var crcBodySlicing = func() bool {
	buf := make([]byte, 16<<10)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	best := func(f func()) time.Duration {
		d := time.Duration(1 << 62)
		for range 5 {
			t0 := time.Now()
			f()
			d = min(d, time.Since(t0))
		}
		return d
	}
	var sink uint32
	lib := best(func() { sink ^= crc32.Update(0, crc32.IEEETable, buf) })
	own := best(func() { sink ^= crcUpdateSmall(0, buf) })
	_ = sink
	return own*5 < lib*4 // slicing-by-8 at least 1.25 times as fast
}()

// crcUpdateSmall is crc32.Update(crc, crc32.IEEETable, p), slicing by 8.
// ComputeICRC uses it for its on-stack scratch copy of the masked headers:
// handing that to crc32.Update, which dispatches through a function value,
// would make it escape and cost an allocation per packet.
func crcUpdateSmall(crc uint32, p []byte) uint32 {
	t := &crcSlicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xFF] ^ t[6][crc>>8&0xFF] ^ t[7][crc&0xFF]
		p = p[8:]
	}
	if len(p) >= 4 {
		// Four at once: an ACK's AETH, most of a short frame's tail.
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][crc>>24] ^ t[1][crc>>16&0xFF] ^ t[2][crc>>8&0xFF] ^ t[3][crc&0xFF]
		p = p[4:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// crcSlicing8 holds the slicing-by-8 tables of the IEEE polynomial: entry
// [k][i] is the CRC of byte i followed by k zero bytes.
var crcSlicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// SetICRC computes the ICRC of pkt (BTH through ICRC slot) and stores it in
// the last four bytes, least significant byte first, as rxe and RNICs do.
func SetICRC(ipudp, pkt []byte) {
	n := len(pkt) - ICRCLen
	if n < 0 {
		return
	}
	binary.LittleEndian.PutUint32(pkt[n:], ComputeICRC(ipudp, pkt[:n]))
}

// CheckICRC reports whether the ICRC at the end of pkt is right. It is false
// for inputs ComputeICRC cannot handle.
func CheckICRC(ipudp, pkt []byte) bool {
	n := len(pkt) - ICRCLen
	if n < BTHLen || !icrcInputOK(ipudp, pkt[:n]) {
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

// icrcInputOK reports whether ComputeICRC can work on the inputs: an IPv4
// (no options) or IPv6 header plus UDP, and at least a BTH.
func icrcInputOK(ipudp, transport []byte) bool {
	return (len(ipudp) == IPv4Len+UDPLen || len(ipudp) == IPv6Len+UDPLen) && len(transport) >= BTHLen
}
