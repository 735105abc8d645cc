package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary stand in for softroce when a command run in
// process starts os.Executable() again (run's view-exec stage): it then
// behaves as the real binary would.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "view-exec" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// softroceBin builds the softroce binary once per test run, into a
// directory every user may read (the view tests run it as nobody too).
func softroceBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the softroce binary: not with -short")
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "softroce-bin-"); binErr != nil {
			return
		}
		if binErr = os.Chmod(binDir, 0o755); binErr != nil {
			return
		}
		var out []byte
		if out, binErr = exec.Command("go", "build", "-o", filepath.Join(binDir, "softroce"), ".").CombinedOutput(); binErr != nil {
			binErr = &buildError{binErr, string(out)}
		}
	})
	require.NoError(t, binErr)
	return filepath.Join(binDir, "softroce")
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ":\n" + e.out }
