package packet

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPSNDiffAndReadPackets(t *testing.T) {
	for _, tt := range []struct {
		a, b uint32
		want int32
	}{{5, 3, 2}, {3, 5, -2}, {0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1}, {0x7FFFFF, 0, 0x7FFFFF}} {
		assert.Equal(t, tt.want, PSNDiff(tt.a, tt.b), "%#x-%#x", tt.a, tt.b)
	}
	for _, tt := range []struct {
		length uint32
		mtu    int
		want   int
	}{{0, 1024, 1}, {1, 1024, 1}, {1024, 1024, 1}, {1025, 1024, 2}, {65536, 4096, 16}} {
		assert.Equal(t, tt.want, ReadResponsePackets(tt.length, tt.mtu), "%d at %d", tt.length, tt.mtu)
	}
}
