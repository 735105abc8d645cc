package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A broken scenario file is refused with the line and column of the fault,
// and the file name when loaded from a file.
func TestScenarioErrorsHaveLineAndColumn(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"syntax", "{\n  \"name\": \"x\",\n  \"hosts\": [,]\n}", "3:13: invalid character ','"},
		{"unknown field", "{\n  \"name\": \"x\",\n  \"hostz\": 2\n}", `unknown field "hostz"`},
		{"wrong type", "{\n  \"name\": \"x\",\n  \"host_count\": \"two\"\n}", "3:"},
		{"trailing object", "{\"name\": \"x\"}\n{\"name\": \"y\"}\n", "2:1: data after the end of the scenario"},
		{"trailing brace", "{\"name\": \"x\"}}", "1:14: data after the end of the scenario"},
		{"truncated", "{\"name\": \"x\",\n", "2:1: the file ends inside the scenario"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	path := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(path, []byte("{\"name\": \"x\"} x"), 0o644))
	_, err := Load(path)
	assert.ErrorContains(t, err, "bad.json: parse scenario: 1:15: data after the end")
}
