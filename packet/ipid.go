package packet

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"sync/atomic"
)

// The IPv4 ID and the ICRC: the one place this story is told.
//
// RoCE v2's ICRC covers the IPv4 header with only TTL, TOS and the header
// checksum masked, so it covers the 16-bit identification and the flags.
// Two things follow for a RoCE stack in user space.
//
// Sending through a kernel UDP socket, the stack does not write the IP
// header: the kernel does. An unconnected socket with path-MTU discovery on
// sends DF and IPv4 ID 0, so the device computes the ICRC for exactly that
// header (rxe.Device with link.FixedSourcePort). With UDP GSO the link hands
// the kernel a run of equal-sized packets as one send, and the kernel
// numbers the segments' IDs 0, 1, 2, ...: segment k's ICRC, computed for
// ID 0, must be corrected for ID k. CRC-32 is affine over GF(2): flipping a
// set of header bits changes the CRC by the XOR of a fixed column per bit,
// moved to the end of the packet by multiplying by x^(8*distance) modulo
// the polynomial (zlib's crc32_combine technique), so the correction is a
// few hundred bit operations, not a new CRC over the packet
// (IPv4IDCorrections).
//
// Receiving through a UDP socket, the stack does not see the IP header: the
// link rebuilds it with ID 0 and DF, and the sender's real ID (kernel rxe
// sends non-zero ones) is unknown. The ICRC can still be checked: the
// rebuilt header differs from the sender's only in the 16 ID bits and the
// DF bit, so
//
//	stored ICRC = ICRC(ID=0, DF) XOR sum of x_j * column_j
//
// for the 17 unknown bits x_j, and Gaussian elimination over the 17
// columns finds whether some x explains the difference. The columns are
// linearly independent (they span fewer than 32 bits, and CRC-32 detects
// every burst that short), so x is unique when it exists: it is the
// sender's ID and DF (RecoverIPv4ID), and the rebuilt header can be made the
// sender's (SetIPv4ID) so that captures show it. What is verified is 32 - 17
// = 15 bits of the ICRC: a corrupted packet passes with probability 2^-15
// instead of 2^-32, and the device counts such packets (icrc_id_unknown).
// MF and the reserved flag are not among the unknowns: a sender computes
// the ICRC before any fragmentation (MF clear) and the reserved bit is zero;
// counting them would only weaken the check. IPv6 has no ID: its ICRC is
// always checked exactly.

// MaxIPv4IDCorrection bounds the IDs IPv4IDCorrections corrects for: UDP
// GSO sends at most 64 segments at once (UDP_MAX_SEGMENTS until Linux 6.9).
const MaxIPv4IDCorrection = 64

// ipIDBits are the IPv4 header bits (as byte offset and mask) that a socket
// hides: the identification and DF.
var ipIDBits = func() (bits [17]struct {
	off  int
	mask byte
}) {
	for i := 0; i < 16; i++ {
		bits[i].off = 4 + i/8
		bits[i].mask = 0x80 >> (i % 8)
	}
	bits[16].off, bits[16].mask = 6, 0x40
	return bits
}()

// idColumnBase[j] is the raw CRC change of flipping bit j with the IPv4 header
// ending at byte 8, i.e. with the bytes from 8 on not yet processed.
var idColumnBase = func() (cols [17]uint32) {
	zero := make([]byte, 8)
	z := crc32.ChecksumIEEE(zero)
	for j, b := range ipIDBits {
		e := make([]byte, 8)
		e[b.off] = b.mask
		cols[j] = crc32.ChecksumIEEE(e) ^ z
	}
	return cols
}()

const crcPoly = 0xedb88320 // reflected CRC-32 (IEEE) polynomial

// multModP multiplies a and b modulo the CRC polynomial, in the reflected
// representation (bit 31 is x^0).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// CheckICRCUnknownIPID reports whether f's ICRC is right for some IPv4
// identification and DF bit (see the top of this file): the check to use on
// frames a link marks Frame.IPIDUnknown. f's own ID and flags are ignored.
// IPv6 frames are checked exactly.
func CheckICRCUnknownIPID(f *Frame) bool {
	_, _, ok := RecoverIPv4ID(f)
	return ok
}

// SetIPv4ID writes an identification and DF bit (as RecoverIPv4ID finds
// them) into the IPv4 header ip and recomputes its checksum: a rebuilt header
// becomes the one the sender put on the wire.
func SetIPv4ID(ip []byte, id uint16, df bool) {
	binary.BigEndian.PutUint16(ip[4:], id)
	ip[6] &^= 0x40
	if df {
		ip[6] |= 0x40
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], IPv4HeaderChecksum(ip[:IPv4Len]))
}

// RecoverIPv4ID returns the IPv4 identification and DF bit with which f's
// ICRC is right, if there are any. For IPv6 frames it returns ok = f.ICRCOK().
func RecoverIPv4ID(f *Frame) (id uint16, df bool, ok bool) {
	if !f.IsIPv4() {
		return 0, false, f.ICRCOK()
	}
	t := f.Transport
	n := len(t) - ICRCLen
	if n < BTHLen || len(f.UDP) != UDPLen {
		return 0, false, false
	}
	var hdr [IPv4Len + UDPLen]byte
	copy(hdr[:], f.IP)
	copy(hdr[IPv4Len:], f.UDP)
	// Try the usual case first, exactly: ID 0 and DF (the UDP link and
	// Linux's unconnected sockets send that; rxe sends DF).
	hdr[4], hdr[5], hdr[6], hdr[7] = 0, 0, 0x40, 0
	diff := binary.LittleEndian.Uint32(t[n:]) ^ ComputeICRC(hdr[:], t[:n])
	if diff == 0 {
		return 0, true, true
	}
	// Move the difference back to where the unknown bits end (IP byte 8),
	// across the rest of the IP header, UDP and the transport.
	diff = multModP(xPowNeg8n(IPv4Len-8+UDPLen+n), diff)
	x := uint32(0)
	for _, p := range idPivots {
		if diff&p.bit != 0 {
			diff ^= p.col
			x ^= p.combo
		}
	}
	if diff != 0 {
		return 0, false, false
	}
	// x is relative to the DF-set header we tried.
	x ^= 1
	return uint16(x >> 1), x&1 != 0, true
}

// xInv is x^-1 modulo the polynomial: (P(x) - 1) / x, reflected.
var xInv = bits.Reverse32(0x04C11DB7>>1 | 1<<31)

// crcShift computes x^(8n) or x^(-8n) modulo the polynomial: the factor
// that moves a CRC difference forward or back across n bytes. Lengths repeat
// (MTU-sized packets), so it caches the last few.
type crcShift struct {
	table [32]uint32        // x^(±8 * 2^k)
	cache [64]atomic.Uint64 // (n+1)<<32 | factor, for recently seen lengths
}

// newCRCShift returns the shifter whose one-byte step is step (x^8 or x^-8).
func newCRCShift(step uint32) *crcShift {
	s := &crcShift{}
	for k, p := 0, step; k < len(s.table); k++ {
		s.table[k] = p
		p = multModP(p, p)
	}
	return s
}

// pow returns the factor for n bytes.
func (s *crcShift) pow(n int) uint32 {
	slot := &s.cache[n&(len(s.cache)-1)]
	if v := slot.Load(); v>>32 == uint64(n)+1 {
		return uint32(v)
	}
	p := uint32(1) << 31 // x^0, reflected
	for k, m := 0, n; m > 0; m, k = m>>1, k+1 {
		if m&1 != 0 {
			p = multModP(s.table[k&31], p)
		}
	}
	slot.Store((uint64(n)+1)<<32 | uint64(p))
	return p
}

// shiftBack moves a CRC difference back across bytes: x^(-8n).
var shiftBack = newCRCShift(func() uint32 {
	p := uint32(1) << 31
	for i := 0; i < 8; i++ {
		p = multModP(p, xInv)
	}
	return p
}())

// xPowNeg8n returns x^(-8n).
func xPowNeg8n(n int) uint32 { return shiftBack.pow(n) }

// idPivot is one step of the precomputed elimination over the ID columns.
type idPivot struct {
	bit, col, combo uint32
}

// idPivots reduce a CRC difference (at IP byte 8) over the 17 unknown
// columns: combo bit 16-j stands for column j, so the ID reads most
// significant bit first in bits 16..1 and DF is bit 0.
var idPivots = func() (ps []idPivot) {
	cols := idColumnBase
	var combo [17]uint32
	for j := range combo {
		combo[j] = 1 << (16 - j)
	}
	for bit := uint32(1) << 31; bit != 0; bit >>= 1 {
		pivot := -1
		for j := range cols {
			if cols[j]&bit != 0 {
				pivot = j
				break
			}
		}
		if pivot < 0 {
			continue
		}
		pc, pm := cols[pivot], combo[pivot]
		cols[pivot] = 0
		for j := range cols {
			if cols[j]&bit != 0 {
				cols[j] ^= pc
				combo[j] ^= pm
			}
		}
		ps = append(ps, idPivot{bit, pc, pm})
	}
	if len(ps) != len(cols) {
		panic("packet: IPv4 ID columns are not independent")
	}
	return ps
}()

// IPv4IDCorrections computes what to XOR into the ICRC of an IPv4 packet
// computed for ID 0 for it to be right with a small ID instead (the UDP
// GSO case in the doc comment above), and keeps the corrections for the
// two packet lengths last asked for: a GSO run is of one length but may end
// with a shorter packet, which must not evict the run's corrections before
// the next run of that length. The zero value is ready to use; it is not
// safe for concurrent use.
type IPv4IDCorrections struct {
	e    [2]ipv4IDCorrLen
	last int // the entry used last
}

// ipv4IDCorrLen is the corrections for one packet length.
type ipv4IDCorrLen struct {
	n     int
	shift uint32
	have  uint64 // bit id: adj[id] is valid
	adj   [MaxIPv4IDCorrection]uint32
}

// Get returns what to XOR into the ICRC of an IPv4 packet of n transport
// bytes (ICRC excluded), computed for ID 0, for it to be right with ID id
// (< MaxIPv4IDCorrection).
func (c *IPv4IDCorrections) Get(id, n int) uint32 {
	i := c.last
	if e := &c.e[i]; e.n != n || e.have == 0 {
		i ^= 1 // the other entry: it holds n, or it is the older one to reuse
		if e := &c.e[i]; e.n != n || e.have == 0 {
			e.n, e.shift, e.have = n, icrcIDShift(n), 0
		}
	}
	c.last = i
	e := &c.e[i]
	if e.have&(1<<id) == 0 {
		e.adj[id] = multModP(icrcIDColumn(uint16(id)), e.shift)
		e.have |= 1 << id
	}
	return e.adj[id]
}

// icrcIDColumn returns the raw CRC change of setting IPv4 ID id (from 0),
// at the position where the IPv4 header's first 8 bytes end.
func icrcIDColumn(id uint16) uint32 {
	var col uint32
	for i := 0; i < 16; i++ {
		if id&(0x8000>>i) != 0 {
			col ^= idColumnBase[i]
		}
	}
	return col
}

// icrcIDShift returns the factor that moves an ID column to the end of an
// IPv4 RoCE packet whose transport part, ICRC excluded, is n bytes.
func icrcIDShift(n int) uint32 {
	return xPowPos8n(IPv4Len - 8 + UDPLen + n)
}

// shiftForward moves a CRC difference forward across bytes: x^(8n).
var shiftForward = newCRCShift(1 << (31 - 8)) // x^8, reflected

// xPowPos8n returns x^(8n).
func xPowPos8n(n int) uint32 { return shiftForward.pow(n) }
