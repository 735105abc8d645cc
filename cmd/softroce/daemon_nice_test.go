package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/dropin"
	"github.com/softroce/softroce/internal/testenv"
)

// TestDaemonNice: the daemon raises every thread of itself to --nice
// (default dropin.DefaultNice) where it may, and stays under the ordinary
// policy while idle (the real-time one is for bulk traffic, dropin.Boost);
// where it may not (an ordinary user), it runs on, silently unless --nice
// or --realtime was given.
func TestDaemonNice(t *testing.T) {
	testenv.Root(t)
	testenv.Tools(t, "apt-get install util-linux", "setpriv")
	bin := softroceBin(t)
	dir := t.TempDir()

	d := exec.Command(bin, "daemon", "--socket", filepath.Join(dir, "a.sock"))
	require.NoError(t, d.Start())
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "a.sock")); return err == nil },
		10*time.Second, 20*time.Millisecond, "the daemon never listened")
	tasks, err := os.ReadDir("/proc/" + itoa(d.Process.Pid) + "/task")
	require.NoError(t, err)
	require.NotEmpty(t, tasks)
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + itoa(d.Process.Pid) + "/task/" + task.Name() + "/stat")
		require.NoError(t, err)
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		require.Equal(t, strconv.Itoa(dropin.DefaultNice), f[16], "thread %s's nice value", task.Name())
		require.Equal(t, "0", f[38], "thread %s's policy (SCHED_OTHER) while idle", task.Name())
	}

	for _, tc := range []struct{ args, want string }{
		{"--nice 30", "--nice 30: a nice value runs from -20 to 19"},
		{"--realtime 100", "--realtime 100: a SCHED_RR priority runs from 1 to 99 (0: none)"},
		{"--realtime 1 --ring-spin 10us", "a poller spinning at real-time priority keeps the programs it waits for off the CPU"},
	} {
		out, err := exec.Command(bin, append([]string{"daemon"}, strings.Fields(tc.args)...)...).CombinedOutput()
		require.Error(t, err, tc.args)
		require.Contains(t, string(out), tc.want, tc.args)
	}

	shared, err := os.MkdirTemp("", "softroce-nice") // a directory nobody can reach
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(shared) })
	require.NoError(t, os.Chmod(shared, 0o777))
	for _, tc := range []struct {
		args []string
		warn bool
	}{{nil, false}, {[]string{"--nice", "-5"}, true}, {[]string{"--realtime", "1"}, true}} {
		args := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin, "daemon",
			"--socket", filepath.Join(shared, "n.sock"), "--idle-exit", "300ms"}, tc.args...)
		out, err := exec.Command("setpriv", args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, tc.warn, strings.Contains(string(out), "runs at its inherited priority"), "%v:\n%s", tc.args, out)
	}
}
