package prefetch

import (
	"bytes"
	"testing"
)

// TestHintsChangeNothing: hints over every length and alignment around a
// few lines leave the bytes (and the bytes beside them) as they were.
func TestHintsChangeNothing(t *testing.T) {
	buf := make([]byte, 512)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	want := bytes.Clone(buf)
	for off := 0; off < 130; off++ {
		for n := 0; off+n <= 384; n += 3 {
			Read(buf[off : off+n])
		}
	}
	Read(nil)
	if !bytes.Equal(buf, want) {
		t.Fatal("a prefetch changed memory")
	}
}

func BenchmarkRead4K(b *testing.B) {
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		Read(buf)
	}
}
