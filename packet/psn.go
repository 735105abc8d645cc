package packet

// PSNDiff returns a-b as a signed 24-bit distance: negative when PSN a is
// before b, zero when equal, positive when after, as rxe's psn_compare;
// valid while the two are less than 2^23 apart.
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// ReadResponsePackets is how many response packets answer an RDMA READ of
// length bytes at path MTU mtu: one at least, for a zero-length read.
func ReadResponsePackets(length uint32, mtu int) int {
	return max(1, (int(length)+mtu-1)/mtu)
}
