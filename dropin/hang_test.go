package dropin

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime/pprof"
	"time"
)

// hangReport says where a program that should have exited waits: its
// threads' stacks (gdb, if installed) and this process's goroutines (the
// test's in-process daemons). A rare hang in CI is then found from its
// log, not by trying to reproduce it.
func hangReport(pid int) string {
	var b bytes.Buffer
	if gdb, err := exec.LookPath("gdb"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, gdb, "-p", fmt.Sprint(pid), "-batch", "-nx",
			"-ex", "thread apply all bt").CombinedOutput()
		cancel()
		fmt.Fprintf(&b, "--- gdb -p %d (%v):\n%s\n", pid, err, out)
	} else {
		b.WriteString("--- no gdb (apt-get install gdb) for the program's stacks\n")
	}
	b.WriteString("--- goroutines:\n")
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}
