package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerateIsDeterministicAndValid(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		a, err := MarshalScenario(Generate(seed))
		require.NoError(t, err)
		b, err := MarshalScenario(Generate(seed))
		require.NoError(t, err)
		require.Equal(t, string(a), string(b))
		// What Generate makes survives the file format.
		sc, err := Parse(a)
		require.NoError(t, err, "seed %d:\n%s", seed, a)
		c, err := MarshalScenario(sc)
		require.NoError(t, err)
		assert.JSONEq(t, string(a), string(c))
	}
	a, _ := MarshalScenario(Generate(1))
	b, _ := MarshalScenario(Generate(2))
	assert.NotEqual(t, string(a), string(b))
}

func TestFuzz(t *testing.T) {
	n := 24
	if testing.Short() {
		n = 6
	}
	var runs int
	rep := FuzzWith(n, 1, 2, func(seed uint64, res *Result, err error) {
		runs++
		assert.Equal(t, uint64(runs), seed, "callbacks come in seed order")
		if err == nil {
			assert.Equal(t, seed, res.Seed)
		}
	})
	assert.Equal(t, n, rep.Runs)
	assert.Equal(t, n, runs)
	assert.Positive(t, rep.Frames)
	for _, f := range rep.Failures {
		t.Errorf("seed %d failed (reproduce: %s):\n%s%s", f.Seed, f.Command, f.Error, f.Failures)
	}
}
