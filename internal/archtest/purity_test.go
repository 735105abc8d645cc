package archtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pure lists the packages that promise to be sans-I/O, with the files
// exempt from the promise and why. Everything else in them never reads a
// clock, sleeps, starts a goroutine or reaches the operating system: that
// is what lets the simulator run them in virtual time, reproducibly.
var pure = []struct {
	dir    string
	exempt map[string]string
}{
	{"qp", nil},
	{"cm", nil},
	{"rxe", map[string]string{
		"runtime.go": "the real-time driver of the device core: its goroutines and the monotonic clock",
	}},
	{"sim/netsim", nil},
	{"sim", map[string]string{
		"fuzz.go":     "the fault search runs seeds on every core, one simulation per goroutine; each run is pure",
		"scenario.go": "Load reads a scenario file before the run; the run itself touches no file",
		"parallel.go": "a Parallel scenario's switches run as a shard on a goroutine of their own, a window of virtual time at a time, and writes the event log's windows, in order, while it waits; " +
			"a window's events depend only on the shards' states at its start, so the run is the same on one goroutine (TestParallelSameOnAnyCores)",
		"tracewriter.go": "the event log's writer formats, hashes and writes records on a goroutine of its own, in the order the loop took them down; " +
			"it reads nothing of the simulation, so no result can depend on it",
	}},
}

func TestSansIOPackages(t *testing.T) {
	root := moduleRoot(t)
	for _, p := range pure {
		t.Run(p.dir, func(t *testing.T) {
			bad, err := PurityViolations(filepath.Join(root, p.dir), p.exempt)
			require.NoError(t, err)
			assert.Empty(t, bad, "package %s promises to be sans-I/O", p.dir)
		})
	}
}

// The rule finds what it must, and only that.
func TestPurityViolations(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
	}
	write("a.go", `package x

import (
	clock "time"
	"net"
)

// time.Now() in a comment does not count, nor does "go func" in a string.
var s = "time.Sleep go func"

func f() clock.Duration {
	go func() {}()
	_ = net.IPv4len
	return clock.Since(clock.Now())
}
`)
	write("b.go", "package x\n\nimport \"time\"\n\nfunc g(d time.Duration) time.Duration { return d * time.Second }\n")
	write("c_test.go", "package x\n\nimport \"time\"\n\nvar _ = time.Now()\n")
	write("d.go", "package x\n\nimport \"os\"\n\nvar _ = os.Getpid\n")
	bad, err := PurityViolations(dir, map[string]string{"d.go": "allowed here"})
	require.NoError(t, err)
	assert.Len(t, bad, 4, "%q", bad) // net import, go statement, Since, Now
	bad, err = PurityViolations(dir, nil)
	require.NoError(t, err)
	assert.Len(t, bad, 5, "%q", bad) // and d.go's os import
}
