package dropin

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

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
	cmd := exec.Command(os.Args[0], "-test.run=^TestSetNiceEveryThread$")
	cmd.Env = append(os.Environ(), "SOFTROCE_NICE_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var nices []string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "nice "); ok {
			nices = append(nices, v)
		}
	}
	require.Greater(t, len(nices), 4, "threads listed:\n%s", out)
	for _, v := range nices {
		require.Equal(t, "-7", v, "a thread's nice value:\n%s", out)
	}
}

// niceChild sets nice -7, makes the runtime start more threads (goroutines
// locked to their own), and prints every thread's nice value.
func niceChild() {
	if err := SetNice(-7); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 6 {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			wg.Done()
			<-stop
		}()
	}
	wg.Wait()
	tids, err := threadIDs()
	if err != nil {
		os.Exit(1)
	}
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
		if err != nil {
			continue
		}
		// Field 19 is the nice value; the command name (field 2) may hold
		// spaces, so count from after its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		os.Stdout.WriteString("nice " + f[16] + "\n")
	}
	close(stop)
	os.Exit(0)
}
