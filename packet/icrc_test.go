package packet

import (
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
