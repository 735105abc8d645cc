package packet

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCRCFoldConstants derives the folding constants of crcfold_amd64.s:
// x^(d+32) and x^(d-32) mod the CRC-32 polynomial, bit-reflected, shifted
// left by one, for each distance d it folds by.
func TestCRCFoldConstants(t *testing.T) {
	xpow := func(e int) uint64 { // x^e mod P, P = 0x104C11DB7
		r := uint64(1)
		for range e {
			r <<= 1
			if r&(1<<32) != 0 {
				r ^= 0x104C11DB7
			}
		}
		return r
	}
	k := func(e int) uint64 {
		var r uint64
		for i := range 32 {
			r |= (xpow(e) >> i & 1) << (31 - i)
		}
		return r << 1
	}
	for _, c := range []struct {
		d      int
		lo, hi uint64
	}{{1024, 0x1e88ef372, 0x14a7fe880}, {512, 0x154442bd4, 0x1c6e41596}, {256, 0x0f1da05aa, 0x15a546366}, {128, 0x1751997d0, 0x0ccaa009e}} {
		require.Equal(t, c.lo, k(c.d+32), "x^(%d+32)", c.d)
		require.Equal(t, c.hi, k(c.d-32), "x^(%d-32)", c.d)
	}
}

// TestUpdateCRC32Fold: with the 256-bit fold on, UpdateCRC32 is
// crc32.Update for every length from 0 to 1,200 bytes at every 16-byte
// alignment, and for frame-sized and longer inputs, from several states.
func TestUpdateCRC32Fold(t *testing.T) {
	if !crcFoldWide {
		t.Skip("this processor has no 256-bit carry-less multiply (VPCLMULQDQ with AVX2)")
	}
	save := crcBodySlicing
	defer func() { crcBodySlicing = save }()
	crcBodySlicing = false
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 20000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lens := []int{4096, 4096 + 12, 4096 + 16 + 28, 8192 + 100, 9000, 16384, 19000}
	for n := range 1201 {
		lens = append(lens, n)
	}
	for _, crc := range []uint32{0, 0xdebb20e3, 0xffffffff, rng.Uint32()} {
		for _, n := range lens {
			step := 1 // every alignment of a 16-byte block
			if n > 1200 {
				step = 7 // the long ones at a few
			}
			for off := 0; off < 16 && off+n <= len(buf); off += step {
				p := buf[off : off+n]
				require.Equal(t, crc32.Update(crc, crc32.IEEETable, p), UpdateCRC32(crc, p), "crc %#x, %d bytes at +%d", crc, n, off)
			}
		}
	}
}

// BenchmarkUpdateCRC32 is the CRC of a 4 KiB payload with the 256-bit fold
// and with hash/crc32's.
func BenchmarkUpdateCRC32(b *testing.B) {
	buf := make([]byte, 4096+16)
	for _, wide := range []bool{false, true} {
		name := "crc32"
		if wide {
			name = "fold256"
		}
		b.Run(name, func(b *testing.B) {
			if wide && !crcFoldWide {
				b.Skip("no VPCLMULQDQ with AVX2 here")
			}
			save := crcFoldWide
			crcFoldWide = wide
			defer func() { crcFoldWide = save }()
			b.SetBytes(int64(len(buf)))
			var sink uint32
			for b.Loop() {
				sink += UpdateCRC32(sink, buf)
			}
		})
	}
}
