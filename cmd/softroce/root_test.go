package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionFlag(t *testing.T) {
	code, out, _ := runCmd(t, "--version")
	require.Equal(t, 0, code)
	assert.Equal(t, "softroce "+versionString()+"\n", out)
	assert.True(t, strings.HasPrefix(out, "softroce "+Version), out)
}

func TestBuildSuffix(t *testing.T) {
	tests := []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none", nil, ""},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}},
			" (rev 0123456789ab)"},
		{"modified", []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}},
			" (rev abc, modified)"},
		{"modified-no-rev", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, buildSuffix(tc.settings))
		})
	}
}

// TestVersionLdflags builds the binary with -X main.Version and checks
// that the flag reports it.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "softroce")
	build := exec.Command("go", "build", "-ldflags", "-X main.Version=v9.8.7-test", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), "softroce v9.8.7-test"), "%s", out)
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		t.Run(shell, func(t *testing.T) {
			code, out, errOut := runCmd(t, "completion", shell)
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, out, "softroce")
		})
	}
	// Cobra's hidden __complete command lists the subcommands, as the shell
	// scripts ask it to.
	code, out, _ := runCmd(t, cobra.ShellCompRequestCmd, "")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "decode\t")
	assert.Contains(t, out, "completion\t")

	if bash, err := exec.LookPath("bash"); err == nil {
		_, script, _ := runCmd(t, "completion", "bash")
		f := filepath.Join(t.TempDir(), "c.bash")
		require.NoError(t, os.WriteFile(f, []byte(script), 0o644))
		out, err := exec.Command(bash, "-c", "source "+f+" && complete -p softroce").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "softroce")
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCmd(t, "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "decode")
	assert.Contains(t, out, "completion")

	code, out, _ = runCmd(t, "decode", "--help")
	require.Equal(t, 0, code)
	for _, s := range []string{"--json", "icrc_ok", "# total:", "Exit status"} {
		assert.Contains(t, out, s)
	}

	code, _, errOut := runCmd(t, "nosuchcommand")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "unknown command")
}

// TestRootFresh checks that each root has its own flag state, which the
// in-process tests rely on.
func TestRootFresh(t *testing.T) {
	a, b := newRootCmd(), newRootCmd()
	da, _, err := a.Find([]string{"decode"})
	require.NoError(t, err)
	db, _, err := b.Find([]string{"decode"})
	require.NoError(t, err)
	require.NoError(t, da.Flags().Set("json", "true"))
	assert.Equal(t, "false", db.Flags().Lookup("json").Value.String())
}
