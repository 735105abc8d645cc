package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	// SCHED_OTHER while idle; on a machine of one CPU, SCHED_RR always
	// (realtimePlan).
	idlePolicy := "0"
	if runtime.NumCPU() == 1 {
		idlePolicy = "2"
	}
	require.True(t, threadsAre(t, d.Process.Pid, idlePolicy, strconv.Itoa(dropin.DefaultNice)),
		"every thread at policy %s, nice %d, while idle", idlePolicy, dropin.DefaultNice)

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

// TestRunPrivatePriority: a device run serves from its own process takes
// the daemon's priority once the program has started, and the program
// keeps its own: nice -5 under SCHED_OTHER on a machine of several CPUs,
// SCHED_RR on one (taskset gives the run and its program one CPU).
func TestRunPrivatePriority(t *testing.T) {
	testenv.Root(t)
	bin := softroceBin(t)
	lib := builtLib(t)
	for _, tc := range []struct {
		name          string
		pre           []string
		policy, niceV string
	}{
		{"several CPUs", nil, "0", strconv.Itoa(dropin.DefaultNice)},
		{"one CPU", []string{"taskset", "-c", "0"}, "2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pre != nil {
				testenv.Tools(t, "apt-get install util-linux", "taskset")
			} else if runtime.NumCPU() == 1 {
				t.Skip("a machine of one CPU")
			}
			args := append(append([]string{}, tc.pre...), bin, "run", "--private", "--lib", lib, "--", "sleep", "3")
			c := exec.Command(args[0], args[1:]...)
			require.NoError(t, c.Start())
			t.Cleanup(func() { c.Process.Kill(); c.Wait() })
			// The program (sleep) is run's child; wait until it runs, then
			// a little for run to raise itself.
			require.Eventually(t, func() bool { return len(childrenOf(c.Process.Pid)) > 0 },
				10*time.Second, 20*time.Millisecond, "run never started its program")
			require.Eventually(t, func() bool {
				return threadsAre(t, c.Process.Pid, tc.policy, tc.niceV)
			}, 5*time.Second, 20*time.Millisecond, "run's threads never took policy %s nice %s", tc.policy, tc.niceV)
			for _, pid := range childrenOf(c.Process.Pid) {
				assert.True(t, threadsAre(t, pid, "0", ""), "the program %d keeps the ordinary policy", pid)
			}
		})
	}
}

// childrenOf lists the child processes of pid: /proc lists a child under
// the thread that forked it, which in a Go program is any of its threads.
func childrenOf(pid int) []int {
	var kids []int
	tasks, _ := os.ReadDir("/proc/" + itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// threadsAre reports whether pid has threads and every one has the policy
// and, if niceV is not "", the nice value (fields 41 and 19 of its stat).
func threadsAre(t *testing.T, pid int, policy, niceV string) bool {
	tasks, err := os.ReadDir("/proc/" + itoa(pid) + "/task")
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if f[38] != policy || (niceV != "" && f[16] != niceV) {
			return false
		}
	}
	return true
}
