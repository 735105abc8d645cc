package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefModelFill: any range of a message's pattern, written alone (made
// byte by byte or copied from its first period), is what the whole message
// holds there.
func TestRefModelFill(t *testing.T) {
	m := newRefModel(7, &modelScratch{}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		size := rng.IntN(3*patternPeriod + 100)
		if rng.IntN(4) == 0 {
			size = rng.IntN(10) // short messages have no header
		}
		whole := make([]byte, size)
		fillPattern(whole, 7, 42)
		from := rng.IntN(size + 1)
		n := rng.IntN(size - from + 1)
		if rng.IntN(2) == 0 {
			n = min(n, rng.IntN(directMax+1)) // made where it goes
		}
		got := make([]byte, n)
		m.fill(got, noteWrite{size: size, seq: 42}, from)
		require.Equal(t, whole[from:from+n], got, "message of %d bytes, from %d, %d bytes", size, from, n)
	}
}

// TestRefModelMatchesCopies: the model that notes WRITEs and writes their
// patterns when read holds, at every read (of part of it, made apart or
// written into it, or of all of it), what copying each WRITE's bytes as it
// was posted gives, with atomics in between, and matches holds a copy to
// it byte for byte.
func TestRefModelMatchesCopies(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		size := 1 + rng.IntN(20000)
		eager := make([]byte, size)
		fillPattern(eager, 9, initialSeq)
		// The model's bytes start as garbage: it writes the initial
		// pattern itself where no WRITE covers it.
		garbage := make([]byte, size)
		for i := range garbage {
			garbage[i] = byte(rng.Uint32())
		}
		m := newRefModel(9, &modelScratch{}, garbage)
		ops := 50 + rng.IntN(300) // past maxPending notes in some seeds
		for seq := uint32(0); seq < uint32(ops); seq++ {
			switch k := rng.IntN(20); {
			case k < 13: // a WRITE, small or up to the whole region
				n := rng.IntN(size + 1)
				if rng.IntN(2) == 0 {
					n = rng.IntN(min(size, 300) + 1)
				}
				off := rng.IntN(size - n + 1)
				msg := make([]byte, n)
				fillPattern(msg, 9, seq)
				copy(eager[off:], msg)
				m.write(off, n, seq)
			case k < 16 && size >= 8: // an atomic
				off := rng.IntN(size/8) * 8
				b := m.span(off, off+8)
				require.Equal(t, eager[off:off+8], b, "seed %d, atomic at %d after message %d", seed, off, seq)
				v := binary.LittleEndian.Uint64(b) + rng.Uint64()
				binary.LittleEndian.PutUint64(b, v)
				binary.LittleEndian.PutUint64(eager[off:], v)
			case k < 19: // a READ's expectation
				n := rng.IntN(min(size, 3000) + 1)
				off := rng.IntN(size - n + 1)
				got := make([]byte, n)
				if rng.IntN(2) == 0 {
					m.read(got, off) // a READ's expectation, made apart
				} else {
					copy(got, m.span(off, off+n)) // written into the model
				}
				requireSameBytes(t, eager[off:off+n], got, "seed %d, READ of %d at %d after message %d", seed, n, off, seq)
			default: // the final comparison, and all of it
				require.True(t, m.matches(eager), "seed %d, after message %d", seed, seq)
				requireSameBytes(t, eager, m.bytes(), "seed %d, after message %d", seed, seq)
			}
		}
		require.True(t, m.matches(eager), "seed %d, at the end", seed)
		// One byte off anywhere does not match: in a note's pattern,
		// in the initial pattern or in bytes an atomic changed.
		for range 20 {
			i := rng.IntN(size)
			eager[i] ^= 1 << rng.IntN(8)
			require.False(t, m.matches(eager), "seed %d, byte %d changed", seed, i)
			eager[i] = m.span(i, i+1)[0]
		}
		require.False(t, m.matches(eager[:size-1]), "seed %d, one byte short", seed)
		requireSameBytes(t, eager, m.bytes(), "seed %d, at the end", seed)
	}
}

// requireSameBytes is require.Equal for long byte slices: it names the
// first difference instead of printing them.
func requireSameBytes(t *testing.T, want, got []byte, msg string, args ...any) {
	t.Helper()
	require.Equal(t, len(want), len(got), fmt.Sprintf(msg, args...))
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s: byte %d is %#x, want %#x", fmt.Sprintf(msg, args...), i, got[i], want[i])
		}
	}
}

func TestAddSpan(t *testing.T) {
	tests := []struct {
		name string
		cov  []span
		add  span
		want []span
	}{
		{"into nothing", nil, span{5, 9}, []span{{5, 9}}},
		{"before", []span{{10, 20}}, span{0, 5}, []span{{0, 5}, {10, 20}}},
		{"after", []span{{10, 20}}, span{25, 30}, []span{{10, 20}, {25, 30}}},
		{"between", []span{{0, 5}, {20, 30}}, span{10, 15}, []span{{0, 5}, {10, 15}, {20, 30}}},
		{"touching merges", []span{{0, 5}, {10, 15}}, span{5, 10}, []span{{0, 15}}},
		{"over several", []span{{0, 2}, {4, 6}, {8, 10}, {20, 30}}, span{1, 9}, []span{{0, 10}, {20, 30}}},
		{"inside", []span{{0, 100}}, span{10, 20}, []span{{0, 100}}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, addSpan(append([]span(nil), tt.cov...), tt.add), tt.name)
	}
}
