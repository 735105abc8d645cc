package packet

import (
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
)

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

func TestXPow8n(t *testing.T) {
	// Moving a CRC difference across n zero bytes by multiplication must
	// equal running the CRC over them.
	for _, n := range []int{0, 1, 2, 3, 7, 100, 4096, 65535} {
		e := make([]byte, 8+n)
		e[3] = 0x10
		z := make([]byte, 8+n)
		want := crc32IEEE(e) ^ crc32IEEE(z)
		base := crc32IEEE(e[:8]) ^ crc32IEEE(z[:8])
		assert.Equal(t, want, multModP(xPow8n(n), base), "n=%d", n)
	}
}

// xPow8n returns x^(8n) modulo the polynomial: the factor that moves a CRC
// difference across n more bytes.
func xPow8n(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
	}
	return p
}

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// The cached shifts agree with the direct computation, forward and back.
func TestCRCShiftCache(t *testing.T) {
	for _, n := range []int{0, 1, 8, 100, 1500, 4096, 65535, 100} {
		assert.Equal(t, xPow8n(n), xPowPos8n(n), "x^(8*%d)", n)
		assert.Equal(t, uint32(1)<<31, multModP(xPowPos8n(n), xPowNeg8n(n)), "x^(8*%d) * x^(-8*%d) = 1", n, n)
	}
}

// A GSO run's length and its shorter last packet both stay cached.
func TestIPv4IDCorrectionsKeepTwoLengths(t *testing.T) {
	var c IPv4IDCorrections
	run := c.Get(3, 4112)
	c.Get(1, 100)
	assert.Equal(t, run, c.Get(3, 4112))
	assert.ElementsMatch(t, []int{4112, 100}, []int{c.e[0].n, c.e[1].n})
}
