package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefModelFill: any range of a message's pattern, written alone, is
// what the whole message holds there.
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
		got := make([]byte, n)
		m.fill(got, noteWrite{size: size, seq: 42}, from)
		require.Equal(t, whole[from:from+n], got, "message of %d bytes, from %d, %d bytes", size, from, n)
	}
}

// TestRefModelMatchesCopies: the model that notes WRITEs and writes their
// patterns when read holds, at every read, what copying each WRITE's bytes
// as it was posted gives, with atomics in between.
func TestRefModelMatchesCopies(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
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
		for seq := uint32(0); seq < 200; seq++ {
			switch k := rng.IntN(10); {
			case k < 7: // a WRITE, small or up to the whole region
				n := rng.IntN(size + 1)
				if rng.IntN(2) == 0 {
					n = rng.IntN(min(size, 300) + 1)
				}
				off := rng.IntN(size - n + 1)
				msg := make([]byte, n)
				fillPattern(msg, 9, seq)
				copy(eager[off:], msg)
				m.write(off, n, seq)
			case k < 8 && size >= 8: // an atomic
				b := m.bytes()
				off := rng.IntN(size/8) * 8
				v := binary.LittleEndian.Uint64(b[off:]) + rng.Uint64()
				binary.LittleEndian.PutUint64(b[off:], v)
				binary.LittleEndian.PutUint64(eager[off:], v)
			default: // a READ's expectation
				requireSameBytes(t, eager, m.bytes(), "seed %d, after message %d", seed, seq)
			}
		}
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
