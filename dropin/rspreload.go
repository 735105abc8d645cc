package dropin

// rspreload.go: finding librdmacm's librspreload.so, which, preloaded,
// turns a program's TCP sockets into rsockets (served by the drop-in
// librdmacm.so.1 it then loads).

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// rspreloadDirs are where distributions put librspreload.so: Debian and
// Ubuntu under the multiarch library directory, Fedora and SUSE in lib64.
var rspreloadDirs = []string{
	"/usr/lib/x86_64-linux-gnu/rsocket", "/usr/lib/aarch64-linux-gnu/rsocket",
	"/usr/lib64/rsocket", "/usr/lib/rsocket",
}

// ErrNoRspreload says librspreload.so is not installed, and how to get it.
var ErrNoRspreload = errors.New("librspreload.so not found (it comes with librdmacm: apt-get install librdmacm1, dnf install librdmacm)")

// RspreloadPath returns the installed librspreload.so.
func RspreloadPath() (string, error) {
	for _, d := range rspreloadDirs {
		p := filepath.Join(d, "librspreload.so")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoRspreload
}

// WithPreload returns env with lib put first in LD_PRELOAD.
func WithPreload(env []string, lib string) []string {
	out := make([]string, 0, len(env)+1)
	pre := lib
	for _, kv := range env {
		if rest, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			if rest != "" {
				pre += ":" + rest
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+pre)
}
