// Package testenv lets tests ask for what the machine must provide (root,
// /dev/net/tun, a tool, a file a Debian package installs) and skip without
// it, except under CI (CI=true), where .ci/run installs everything and a
// missing piece must fail the test instead of silently removing its
// evidence. LockedBuffer (buffer.go) is the one piece of test support
// besides: a program's output a test reads while it runs.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run under CI (CI=true).
func CI() bool { return os.Getenv("CI") == "true" }

// Need skips t (fails it under CI) unless ok; what names the missing piece
// and fix says how to get it, e.g. "apt-get install perftest".
func Need(t testing.TB, what string, ok bool, fix string) {
	t.Helper()
	if ok {
		return
	}
	if CI() {
		t.Fatalf("%s not available: CI must provide it (%s)", what, fix)
	}
	t.Skipf("%s not available (%s)", what, fix)
}

// Tools needs every tool on PATH.
func Tools(t testing.TB, fix string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		_, err := exec.LookPath(tool)
		Need(t, tool, err == nil, fix)
	}
}

// File needs path to exist.
func File(t testing.TB, path, fix string) {
	t.Helper()
	_, err := os.Stat(path)
	Need(t, path, err == nil, fix)
}

// Root needs the tests to run as root (network namespaces, TAPs).
func Root(t testing.TB) {
	t.Helper()
	Need(t, "root", os.Geteuid() == 0, "run the tests as root")
}

// TUN needs /dev/net/tun.
func TUN(t testing.TB) {
	t.Helper()
	_, err := os.Stat("/dev/net/tun")
	Need(t, "/dev/net/tun", err == nil, "a kernel with TUN/TAP and the device node")
}
