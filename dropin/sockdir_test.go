package dropin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckSocketDir: the default socket's directory must be the user's
// own, a real directory, closed to others; anything else is named.
func TestCheckSocketDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(p, mode))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	own := mk("own", 0o700)
	open := mk("open", 0o755)
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(own, link))
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	tests := []struct {
		name, dir, want string
	}{
		{"own", own, ""},
		{"open to others", open, "has mode 0755: others may enter it"},
		{"a link", link, "is not a directory"},
		{"a file", file, "is not a directory"},
	}
	if os.Getuid() == 0 {
		other := mk("other", 0o700)
		require.NoError(t, os.Chown(other, 65534, 65534))
		tests = append(tests, struct{ name, dir, want string }{"another user's", other, "belongs to uid 65534"})
	}
	for _, tt := range tests {
		err := checkSocketDir(tt.dir)
		if tt.want == "" {
			assert.NoError(t, err, tt.name)
			continue
		}
		require.ErrorIs(t, err, ErrSquatted, tt.name)
		assert.Contains(t, err.Error(), tt.want, tt.name)
	}
	// A socket the user named is the user's business.
	assert.NoError(t, PrepareSocketDir(filepath.Join(open, "s.sock")))
}
