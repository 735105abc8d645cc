package dropin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEnv: the program's environment names the socket and puts the
// libraries first, and carries what UCX needs on softroce unless the user
// set it otherwise.
func TestEnv(t *testing.T) {
	count := func(env []string, key string) (n int, val string) {
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == key {
				n, val = n+1, v
			}
		}
		return
	}
	env := Env([]string{"HOME=/root", "LD_LIBRARY_PATH=/opt/lib", "SOFTROCE_SOCKET=/old.sock"}, "/lib/sr", "/tmp/s.sock")
	for key, want := range map[string]string{
		"SOFTROCE_SOCKET":             "/tmp/s.sock",
		"UCX_UD_VERBS_ETH_DGID_CHECK": "n",
		"HOME":                        "/root",
	} {
		n, v := count(env, key)
		assert.Equal(t, 1, n, key)
		assert.Equal(t, want, v, key)
	}
	_, ld := count(env, "LD_LIBRARY_PATH")
	assert.True(t, strings.HasPrefix(ld, "/lib/sr"), ld)
	assert.True(t, strings.HasSuffix(ld, ":/opt/lib"), ld)

	env = Env([]string{"UCX_UD_VERBS_ETH_DGID_CHECK=y"}, "/lib/sr", "/tmp/s.sock")
	for key, want := range map[string]string{"UCX_UD_VERBS_ETH_DGID_CHECK": "y"} {
		n, v := count(env, key)
		assert.Equal(t, 1, n, key)
		assert.Equal(t, want, v, "the user's %s stands", key)
	}
}
