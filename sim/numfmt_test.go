package sim

import (
	"math"
	"strconv"
	"testing"
)

// The event log's number formatting writes what strconv does: the log's
// bytes, and so its digest, must not depend on which formats them.
func TestNumberFormatting(t *testing.T) {
	uints := []uint64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 4095, 65535, 1<<24 - 1,
		999999999, 1e9, 1<<32 - 1, 1 << 32, 9999999999999999999, 1e19, math.MaxUint64}
	for p := uint64(1); p < 1e19; p *= 10 {
		uints = append(uints, p-1, p, p+1)
	}
	for _, v := range uints {
		prefix := []byte("x=")
		if got, want := string(appendUint(prefix, v)), "x="+strconv.FormatUint(v, 10); got != want {
			t.Errorf("appendUint(%d) = %q, want %q", v, got, want)
		}
		if v <= math.MaxInt64 {
			for _, s := range []int64{int64(v), -int64(v)} {
				if got, want := string(appendInt(nil, s)), strconv.FormatInt(s, 10); got != want {
					t.Errorf("appendInt(%d) = %q, want %q", s, got, want)
				}
			}
		}
		if v <= math.MaxUint32 {
			if got, want := string(appendHex32(prefix, uint32(v))), "x="+strconv.FormatUint(v, 16); got != want {
				t.Errorf("appendHex32(%#x) = %q, want %q", v, got, want)
			}
		}
	}
	if got := string(appendInt(nil, math.MinInt64)); got != strconv.FormatInt(math.MinInt64, 10) {
		t.Errorf("appendInt(MinInt64) = %q", got)
	}
}

func FuzzNumberFormatting(f *testing.F) {
	f.Add(uint64(0), make([]byte, 3, 8))
	f.Add(uint64(12345678901234), []byte("abc"))
	f.Fuzz(func(t *testing.T, v uint64, prefix []byte) {
		want := strconv.AppendUint(append([]byte(nil), prefix...), v, 10)
		if got := appendUint(append([]byte(nil), prefix...), v); string(got) != string(want) {
			t.Fatalf("appendUint(%d) = %q, want %q", v, got, want)
		}
		wantH := strconv.AppendUint(append([]byte(nil), prefix...), uint64(uint32(v)), 16)
		if got := appendHex32(append([]byte(nil), prefix...), uint32(v)); string(got) != string(wantH) {
			t.Fatalf("appendHex32(%#x) = %q, want %q", uint32(v), got, wantH)
		}
		wantI := strconv.AppendInt(nil, int64(v), 10)
		if got := appendInt(nil, int64(v)); string(got) != string(wantI) {
			t.Fatalf("appendInt(%d) = %q, want %q", int64(v), got, wantI)
		}
	})
}
