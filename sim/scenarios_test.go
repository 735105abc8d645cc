package sim

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScenarioLibrary runs every scenario in testdata/scenarios with its
// invariants, on a few seeds.
func TestScenarioLibrary(t *testing.T) {
	files, err := filepath.Glob("../testdata/scenarios/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			sc, err := Load(file)
			require.NoError(t, err)
			assert.Equal(t, name, sc.Name, "a scenario's name is its file name")
			seeds := []uint64{1, 2}
			if testing.Short() || name == "scale" {
				seeds = seeds[:1]
			}
			for _, seed := range seeds {
				res, err := Run(sc, seed)
				require.NoError(t, err)
				require.True(t, res.OK(), "%s seed %d (reproduce: softroce sim run %s --seed %d):\n%s\n%s",
					name, seed, file, seed, res.Failures(), res.Summary())
				assert.Positive(t, res.Completed)
				t.Logf("seed %d: %s", seed, strings.SplitN(res.Summary(), "\n", 5)[1])
			}
		})
	}
}
