package packet

import (
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCRCUpdateSmall checks the slicing-by-8 CRC against hash/crc32 for
// every length across several strides and for several starting states.
func TestCRCUpdateSmall(t *testing.T) {
	p := make([]byte, 70)
	for i := range p {
		p[i] = byte(i*37 + 11)
	}
	for _, seed := range []uint32{0, 1, icrcSeed, 0xFFFFFFFF} {
		for n := 0; n <= len(p); n++ {
			require.Equal(t, crc32.Update(seed, crc32.IEEETable, p[:n]), crcUpdateSmall(seed, p[:n]), "seed %#x len %d", seed, n)
		}
	}
}
