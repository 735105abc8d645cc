package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDoctor: on a machine with the build tools doctor finds the library
// and says so, with the GID advice; every line is a verdict.
func TestDoctor(t *testing.T) {
	builtLib(t)
	var out, errb bytes.Buffer
	code := run([]string{"doctor"}, &out, &errb)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	require.Regexp(t, `(?m)^ok   build tools`, out.String())
	require.Regexp(t, `(?m)^ok   drop-in libibverbs.so.1\s+/`, out.String())
	require.Contains(t, out.String(), "pass -g 1")
}
