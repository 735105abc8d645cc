package sim

import (
	"math/bits"
	"slices"
)

// The event log's numbers, formatted straight into the line: strconv's
// Append functions format into a buffer of their own and copy it, and with
// half a dozen numbers a line that was 6% of a run on one core.

// digitPairs is "00" to "99".
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// decLen is the number of decimal digits of v.
func decLen(v uint64) int {
	// log10(v) from log2(v), then one comparison to correct it.
	n := (bits.Len64(v|1)*1233)>>12 + 1
	if n > 1 && v < pow10[n-1] {
		n--
	}
	return n
}

var pow10 = [...]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// appendUint appends v in decimal, as strconv.AppendUint(b, v, 10).
func appendUint(b []byte, v uint64) []byte {
	if v < 10 {
		return append(b, byte('0'+v))
	}
	n := decLen(v)
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	d := b[l:]
	i := n
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		d[i], d[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		d[0], d[1] = digitPairs[v*2], digitPairs[v*2+1]
	} else {
		d[0] = byte('0' + v)
	}
	return b
}

// appendInt appends v in decimal, as strconv.AppendInt(b, v, 10).
func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return appendUint(append(b, '-'), uint64(-v))
	}
	return appendUint(b, uint64(v))
}

// appendHex32 appends v in lower-case hexadecimal without leading zeros, as
// strconv.AppendUint(b, uint64(v), 16).
func appendHex32(b []byte, v uint32) []byte {
	const hex = "0123456789abcdef"
	n := (bits.Len32(v|1) + 3) / 4
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	d := b[l:]
	for i := n - 1; i >= 0; i-- {
		d[i] = hex[v&15]
		v >>= 4
	}
	return b
}
