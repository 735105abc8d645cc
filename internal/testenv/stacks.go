package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// Stacks says where the processes of process group pgid (or, if it has
// none, process pgid alone) wait: each one's threads' stacks, taken by gdb
// if it is installed, and this process's goroutines (a test's in-process
// daemons). A rare hang in CI is then found from its log, not by trying to
// reproduce it.
func Stacks(pgid int) string {
	var b bytes.Buffer
	pids := groupMembers(pgid)
	if len(pids) == 0 {
		pids = []int{pgid}
	}
	gdb, err := exec.LookPath("gdb")
	for _, pid := range pids {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			fmt.Fprintf(&b, "--- process %d (%s): no gdb (apt-get install gdb) for its stacks\n", pid, bytes.TrimSpace(comm))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, gerr := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(pid), "-batch", "-nx",
			"-ex", "thread apply all bt").CombinedOutput()
		cancel()
		fmt.Fprintf(&b, "--- process %d (%s), gdb (%v):\n%s\n", pid, bytes.TrimSpace(comm), gerr, out)
	}
	b.WriteString("--- this process's goroutines:\n")
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// groupMembers returns the processes whose process group is pgid.
func groupMembers(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		s, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so the
		// fields are counted from its closing parenthesis.
		i := bytes.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(s[i+1:]))
		if len(fields) < 3 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
