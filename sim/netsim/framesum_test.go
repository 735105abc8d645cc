package netsim

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// frameSum is the CRC-32 of the head and the last four bytes, however it
// computes it: the event logs of earlier runs must still match.
func TestFrameSumIsCRCOfHeadAndTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 300; n++ {
		f := make([]byte, n)
		for i := range f {
			f[i] = byte(rng.Uint32())
		}
		want := crc32.ChecksumIEEE(f)
		if n > sumHead+4 {
			want = crc32.ChecksumIEEE(append(append([]byte(nil), f[:sumHead]...), f[n-4:]...))
		}
		if got := frameSum(f); got != want {
			t.Fatalf("%d bytes: sum %08x, want %08x", n, got, want)
		}
	}
}

func BenchmarkFrameSum(b *testing.B) {
	for _, n := range []int{62, 1100, 4200} {
		f := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				f[0] ^= byte(frameSum(f))
			}
		})
	}
}
