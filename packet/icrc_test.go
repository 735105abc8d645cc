package packet

import (
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestICRCSlicingAgrees: the payload CRC gives the same ICRC by
// slicing-by-8 as by hash/crc32, whichever crcBodySlicing chose.
func TestICRCSlicingAgrees(t *testing.T) {
	save := crcBodySlicing
	defer func() { crcBodySlicing = save }()
	ipudp := make([]byte, 28)
	ipudp[0] = 0x45
	for _, n := range []int{12, 13, 19, 20, 76, 1036, 4108} {
		tr := make([]byte, n)
		for i := range tr {
			tr[i] = byte(i*31 + n)
		}
		crcBodySlicing = false
		lib := ComputeICRC(ipudp, tr)
		crcBodySlicing = true
		require.Equal(t, lib, ComputeICRC(ipudp, tr), "transport of %d bytes", n)
	}
}

// FuzzUpdateCRC32: UpdateCRC32 is crc32.Update with the IEEE table for any
// state and bytes, whichever of its paths (slicing-by-8, hash/crc32's
// folding, the 256-bit fold) the length and the processor choose.
func FuzzUpdateCRC32(f *testing.F) {
	f.Add(uint32(0), []byte("RoCE"))
	f.Add(uint32(0xdebb20e3), make([]byte, 300))
	f.Add(uint32(0xffffffff), make([]byte, 4096+28))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := UpdateCRC32(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("UpdateCRC32(%#x, %d bytes) = %#x, want %#x", crc, len(p), got, want)
		}
	})
}
