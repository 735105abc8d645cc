package dropin

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// TestSetNiceEveryThread runs SetNice in a child process (it changes the
// whole process) and checks that every thread, those that existed and those
// the runtime starts afterwards, has the nice value.
func TestSetNiceEveryThread(t *testing.T) {
	if os.Getenv("SOFTROCE_NICE_CHILD") != "" {
		niceChild()
		return
	}
	testenv.Root(t)
	nices, out := childLines(t, "TestSetNiceEveryThread", "SOFTROCE_NICE_CHILD", "nice ")
	require.Greater(t, len(nices), 4, "threads listed:\n%s", out)
	for _, v := range nices {
		require.Equal(t, "-7", v, "a thread's nice value:\n%s", out)
	}
}

// childLines runs test name again in a child process with env set to 1
// (the child's part changes the whole process) and returns the lines of its
// output that start with prefix, less the prefix, and the whole output.
func childLines(t *testing.T, name, env, prefix string) ([]string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			lines = append(lines, v)
		}
	}
	return lines, string(out)
}

// niceChild sets nice -7, makes the runtime start more threads (goroutines
// locked to their own), and prints every thread's nice value.
func niceChild() {
	if err := SetNice(-7); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	stop := startThreads(6)
	tids, err := threadIDs()
	if err != nil {
		os.Exit(1)
	}
	for _, tid := range tids {
		if f := threadStat(tid); f != nil {
			os.Stdout.WriteString("nice " + f[16] + "\n")
		}
	}
	close(stop)
	os.Exit(0)
}

// startThreads makes the runtime start n more threads (goroutines locked
// to their own), which stay until stop is closed.
func startThreads(n int) (stop chan struct{}) {
	var wg sync.WaitGroup
	stop = make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			wg.Done()
			<-stop
		}()
	}
	wg.Wait()
	return stop
}

// threadStat returns the fields of a thread's /proc stat line after the
// command name (which may hold spaces), or nil if it has exited: field 19
// (the nice value) is [16], field 41 (the policy) [38].
func threadStat(tid int) []string {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
}

// TestSetRealtimeEveryThread runs SetRealtime, then SetNormal, in a child
// process and checks every thread's policy (and nice value) after each,
// threads started in between included.
func TestSetRealtimeEveryThread(t *testing.T) {
	if os.Getenv("SOFTROCE_RT_CHILD") != "" {
		realtimeChild()
		return
	}
	testenv.Root(t)
	lines, out := childLines(t, "TestSetRealtimeEveryThread", "SOFTROCE_RT_CHILD", "thread ")
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	// Field 41 is the policy (2: SCHED_RR), field 19 the nice value.
	assert.Greater(t, seen["rt policy 2"], 4, "%s", out)
	assert.Zero(t, len(seen)-2, "every thread real-time, then every one back: %v\n%s", seen, out)
	assert.Equal(t, seen["rt policy 2"], seen["normal policy 0 nice -3"], "%s", out)
}

// realtimeChild sets SCHED_RR 1, starts threads, prints every thread's
// policy; then SetNormal(-3) and prints policy and nice value again.
func realtimeChild() {
	if err := SetRealtime(1); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	stop := startThreads(6)
	tids, _ := threadIDs()
	for _, tid := range tids {
		if f := threadStat(tid); f != nil {
			os.Stdout.WriteString("thread rt policy " + f[38] + "\n")
		}
	}
	if err := SetNormal(-3); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	for _, tid := range tids {
		if f := threadStat(tid); f != nil {
			os.Stdout.WriteString("thread normal policy " + f[38] + " nice " + f[16] + "\n")
		}
	}
	close(stop)
	os.Exit(0)
}

func TestBoostStep(t *testing.T) {
	b := Boost{On: 100, Off: 10}
	for i, c := range []struct {
		rate        float64
		on, changed bool
	}{
		{50, false, false}, {100, false, false}, {101, true, true}, {500, true, false},
		{50, true, false}, {10, true, false}, {9, false, true}, {0, false, false}, {1000, true, true},
	} {
		on, changed := b.Step(c.rate)
		assert.Equal(t, c.on, on, "step %d (rate %v)", i, c.rate)
		assert.Equal(t, c.changed, changed, "step %d (rate %v)", i, c.rate)
	}
}

// TestBoostRun feeds Run ticks a second apart and packet counts, and checks
// the changes it asks for.
func TestBoostRun(t *testing.T) {
	b := Boost{On: 100, Off: 10}
	// The first count is read before the first tick, the others one per tick.
	counts := []uint64{0, 0, 50, 250, 1000, 1005, 1006, 2000}
	calls := 0
	packets := func() uint64 { n := counts[calls]; calls++; return n }
	ticks := make(chan time.Time, len(counts))
	t0 := time.Unix(1000, 0)
	for k := range len(counts) - 1 {
		ticks <- t0.Add(time.Duration(k) * time.Second)
	}
	close(ticks)
	var got []bool
	b.Run(ticks, packets, func(on bool) { got = append(got, on) })
	// Rates 50, 200, 750, 5, 1, 994 packets a second after the first tick.
	assert.Equal(t, []bool{true, false, true}, got)
	assert.Equal(t, len(counts), calls)
}
