package dropin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWithPreload: the preload library goes first in LD_PRELOAD, and what
// the user preloads stays after it.
func TestWithPreload(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"HOME=/root"}, "LD_PRELOAD=/p/librspreload.so"},
		{[]string{"LD_PRELOAD=/u/libfoo.so", "HOME=/root"}, "LD_PRELOAD=/p/librspreload.so:/u/libfoo.so"},
		{[]string{"LD_PRELOAD="}, "LD_PRELOAD=/p/librspreload.so"},
	} {
		env := WithPreload(tc.env, "/p/librspreload.so")
		n := 0
		for _, kv := range env {
			if len(kv) >= 11 && kv[:11] == "LD_PRELOAD=" {
				n++
				assert.Equal(t, tc.want, kv)
			}
		}
		assert.Equal(t, 1, n, "%v", env)
	}
}

// TestPreloadPath: which library --rsocket names, and the errors that say
// what is missing.
func TestPreloadPath(t *testing.T) {
	p, err := PreloadPath(t.TempDir(), filepath.Join(t.TempDir(), "missing.so"))
	require.Error(t, err)
	assert.Empty(t, p)

	f := filepath.Join(t.TempDir(), "mine.so")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	p, err = PreloadPath("", f)
	require.NoError(t, err)
	assert.Equal(t, f, p)

	// softroce's: built beside the drop-in libraries; a directory without
	// its sources says how to build it.
	lib := filepath.Join(t.TempDir(), "libibverbs")
	_, err = PreloadPath(lib, "softroce")
	require.ErrorContains(t, err, "make -C dropin/librspreload")

	sys, err := PreloadPath("", "system")
	if err != nil {
		require.ErrorIs(t, err, ErrNoRspreload)
	} else {
		assert.Equal(t, PreloadName, filepath.Base(sys))
	}
}
