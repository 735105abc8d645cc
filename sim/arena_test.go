package sim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run's regions come out of recycled chunks: each starts zeroed (as make
// gives it) even when the chunk held an earlier run's bytes, ends at its
// length (a region's capacity must not reach its neighbour's), starts on a
// cache line, and no two overlap.
func TestArenaRecycledChunksStartZeroed(t *testing.T) {
	var first arena
	for _, n := range []int{100, 8192, arenaChunk / 2, arenaChunk / 2} {
		b := first.bytes(n)
		for i := range b {
			b[i] = 0xA5
		}
	}
	require.Len(t, first.chunks, 2)
	used := first.chunks
	first.release()

	var second arena
	sizes := []int{1, 63, 64, 65, 4096, 100000, arenaChunk, arenaChunk + 1}
	var got [][]byte
	for _, n := range sizes {
		// Overwritten bytes between them are not cleared, and leave
		// the regions after them zeroed all the same.
		second.overwritten(n)
		b := second.bytes(n)
		require.Len(t, b, n)
		assert.Equal(t, n, cap(b), "a region's capacity ends at its length")
		assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%arenaAlign, "%d bytes: aligned", n)
		for i, v := range b {
			if v != 0 {
				t.Fatalf("%d bytes: byte %d is %#x, not zero", n, i, v)
			}
		}
		got = append(got, b)
	}
	reused := false
	for _, c := range second.chunks {
		for _, u := range used {
			reused = reused || &c[0] == &u[0]
		}
	}
	assert.True(t, reused, "the second run takes the first one's chunks")
	for i := range got {
		for j := range i {
			a0, a1 := uintptr(unsafe.Pointer(&got[i][0])), uintptr(unsafe.Pointer(&got[i][0]))+uintptr(len(got[i]))
			b0, b1 := uintptr(unsafe.Pointer(&got[j][0])), uintptr(unsafe.Pointer(&got[j][0]))+uintptr(len(got[j]))
			assert.True(t, a1 <= b0 || b1 <= a0, "regions %d and %d overlap", i, j)
		}
	}
	second.release()
}

// A region larger than a chunk gets whole chunks of its own, which the next
// run takes again: cleared for bytes, as they were for overwritten.
func TestArenaLargeRegionsRecycled(t *testing.T) {
	const big = 7*arenaChunk + 1 // 8 MiB blocks: no library scenario asks for them
	var first arena
	a, b := first.bytes(big), first.overwritten(big)
	require.Len(t, a, big)
	require.Len(t, b, big)
	assert.Equal(t, big, cap(a), "a region's capacity ends at its length")
	for i := range a {
		a[i], b[i] = 0xA5, 0x5A
	}
	first.release()

	var second arena
	c := second.bytes(big)
	d := second.overwritten(big)
	defer second.release()
	reused := map[*byte]bool{&a[0]: true, &b[0]: true}
	assert.True(t, reused[&c[0]] && reused[&d[0]], "the second run takes the first one's blocks")
	for i, v := range c {
		if v != 0 {
			t.Fatalf("byte %d is %#x, not zero", i, v)
		}
	}
	assert.NotEqual(t, &c[0], &d[0])
}

// What a run sends and logs never depends on the runs before it in the
// process: a scenario run on chunks an earlier run left full of other bytes
// logs exactly what it does on fresh ones (the log's frame sums cover the
// ICRC, and so every payload byte). Regions taken without clearing (a flow's
// source buffer, its remote region, a model) must be written before they are
// read; a byte sent unwritten would show in the log, one compared unwritten
// in the verdicts.
func TestRunsIgnoreEarlierRunsBytes(t *testing.T) {
	for _, c := range []struct{ name, src string }{
		{"scale", ""},      // SEND, WRITE, READ, FADD; RC and UC; 1,000 QPs
		{"corruption", ""}, // UD and CAS
		{"bulk", `{"name": "bulk", "duration": "1s", "host_count": 4,
			"star": {"bandwidth": "100Gbps", "latency": "500ns"},
			"workloads": [{"name": "ws", "from": ["*"], "to": ["*"],
				"flows": {"cdf": "websearch", "load": 0.3, "for": "1ms"}}]}`}, // flows sharing their hosts' regions
	} {
		t.Run(c.name, func(t *testing.T) {
			var sc *Scenario
			var err error
			if c.src == "" {
				sc, err = Load("../testdata/scenarios/" + c.name + ".json")
			} else {
				sc, err = Parse([]byte(c.src))
			}
			require.NoError(t, err)
			arenaPool.Drain()
			clean, err := Run(sc, 3)
			require.NoError(t, err)
			require.True(t, clean.OK(), clean.Failures())
			// Every chunk and block the run gave back now holds bytes
			// no run writes.
			arenaPool.Each(func(b []byte) {
				for i := range b {
					b[i] = byte(i*131) ^ 0x5A
				}
			})
			dirty, err := Run(sc, 3)
			require.NoError(t, err)
			assert.True(t, dirty.OK(), "on reused chunks: %s", dirty.Failures())
			assert.Equal(t, clean.EventLog, dirty.EventLog, "the event log on reused chunks")
		})
	}
}
