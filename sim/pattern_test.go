package sim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refPattern is the message content byte by byte, as the simulator has
// always defined it (captures and event logs depend on it): the word-wise
// fillPattern must produce exactly these bytes.
func refPattern(n int, id, seq uint32) []byte {
	b := make([]byte, n)
	j := 0
	if n >= 8 {
		binary.BigEndian.PutUint32(b, id)
		binary.BigEndian.PutUint32(b[4:], seq)
		j = 8
	}
	x := uint64(id)<<32 | uint64(seq)
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	for ; j < n; j++ {
		b[j] = byte(x>>(8*(j&7))) ^ byte(j>>3)
	}
	return b
}

func TestFillPatternMatchesDefinition(t *testing.T) {
	ids := []struct{ id, seq uint32 }{{0, 0}, {1, 2}, {499, 0xFFFFFFFF}, {0xFFFFFFFF, 7}}
	for _, c := range ids {
		for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 1024, 2051, 2055, 2056, 2057, 4096 + 3, 4104, 3*2048 + 8, 1<<20 + 5} {
			want := refPattern(n, c.id, c.seq)
			got := make([]byte, n)
			fillPattern(got, c.id, c.seq)
			require.Equal(t, want, got, "id %d seq %d len %d", c.id, c.seq, n)
			assert.True(t, checkPattern(got, c.id, c.seq), "len %d", n)
		}
	}
}

func TestCheckPatternCatchesEveryByte(t *testing.T) {
	for _, n := range []int{1, 5, 8, 13, 64, 300, 2057, 5000} {
		b := make([]byte, n)
		fillPattern(b, 3, 9)
		for i := range b {
			b[i] ^= 0x10
			assert.False(t, checkPattern(b, 3, 9), "len %d: flipped byte %d not caught", n, i)
			b[i] ^= 0x10
		}
		if n >= 8 {
			assert.False(t, checkPattern(b, 4, 9), "len %d: wrong flow", n)
			assert.False(t, checkPattern(b, 3, 10), "len %d: wrong sequence", n)
		}
	}
}

func TestPoison(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 8, 1000, 4096} {
		b := make([]byte, n)
		poison(b)
		for i, v := range b {
			require.Equal(t, byte(0xEE), v, "len %d byte %d", n, i)
		}
	}
}
