package qp

import "github.com/softroce/softroce/packet"

// PSNs are 24-bit sequence numbers that wrap; they are compared by the sign
// of their 24-bit difference, as rxe's psn_compare does, which is valid while
// the two are less than 2^23 apart.

const psnMask = 0xFFFFFF

// psnDiff returns a-b as a signed 24-bit distance: negative when a is before
// b, zero when equal, positive when a is after b.
func psnDiff(a, b uint32) int32 { return packet.PSNDiff(a, b) }

// psnAdd returns p+n modulo 2^24.
func psnAdd(p uint32, n uint32) uint32 { return (p + n) & psnMask }
