package dropin

// rspreload.go: the preload libraries that turn a program's TCP sockets
// into rsockets served by the drop-in librdmacm.so.1: softroce's own
// (librspreload/, which also serves epoll and accept4) and the system's
// (librdmacm's librspreload.so).

import (
	"errors"
	"fmt"
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

// PreloadName is the file name of both preload libraries.
const PreloadName = "librspreload.so"

// PreloadPath returns the preload library which names: "softroce" (or "")
// for softroce's own, built beside the drop-in libraries of libDir (its
// sibling librspreload/), "system" for the distribution's librspreload.so,
// anything else is taken for a path.
func PreloadPath(libDir, which string) (string, error) {
	switch which {
	case "", "softroce":
		dir := filepath.Join(filepath.Dir(libDir), "librspreload")
		if err := makeTarget(dir, PreloadName); err != nil {
			return "", err
		}
		p := filepath.Join(dir, PreloadName)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("softroce's %s: %w (it builds with make -C dropin/librspreload, which needs librdmacm-dev)", PreloadName, err)
		}
		return p, nil
	case "system":
		return RspreloadPath()
	}
	if _, err := os.Stat(which); err != nil {
		return "", fmt.Errorf("preload library: %w", err)
	}
	return filepath.Abs(which)
}

// RspreloadPath returns the installed (the distribution's) librspreload.so.
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
