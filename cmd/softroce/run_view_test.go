package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// viewScript prints what middleware looks for in the file system, the
// user the program runs as, and leaves a file in /dev/shm to show that the
// view's /dev/shm is the host's.
const viewScript = `stat -c %F /dev/infiniband/uverbs0
cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1 /sys/class/infiniband_verbs/uverbs0/ibdev
id -u
echo x > /dev/null && echo null writable
touch /dev/shm/softroce-view-test-$1 && echo shm`

// TestRunView: a program started by softroce run finds the device where UCX
// and pyverbs look for it (/dev/infiniband/uverbs0, a character device;
// /sys/class/infiniband/rxe0 with kernel rxe's files), keeps its user and
// the host's /dev/shm, and the host's /dev and /sys are the same
// afterwards; as root, and as an unprivileged user through a user
// namespace where the kernel allows one. With --no-view none of it is
// there.
func TestRunView(t *testing.T) {
	bin := softroceBin(t)
	lib := builtLib(t)
	hostBefore := hostRDMAFiles()
	type tc struct {
		name   string
		prefix []string
		uid    string
	}
	cases := []tc{{name: "as invoker", uid: fmt.Sprint(os.Geteuid())}}
	if _, err := exec.LookPath("setpriv"); err == nil && os.Geteuid() == 0 {
		cases = append(cases, tc{"as nobody", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, "65534"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tag := fmt.Sprintf("%d-%d", os.Getpid(), len(c.prefix))
			args := append(append([]string{}, c.prefix...), bin, "run", "--private", "--lib", lib, "--", "sh", "-c", viewScript, "sh", tag)
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			if c.prefix != nil && strings.Contains(string(out), "no mount namespace") {
				t.Skipf("the kernel refuses an unprivileged user namespace here: %s", out)
			}
			require.NoError(t, err, "%s", out)
			require.Equal(t, "character special file\nRoCE v2\nlo\nrxe0\n"+c.uid+"\nnull writable\nshm\n", string(out))
			shm := "/dev/shm/softroce-view-test-" + tag
			_, err = os.Stat(shm)
			require.NoError(t, err, "the program's /dev/shm file is in the host's /dev/shm")
			os.Remove(shm)
		})
	}
	out, err := exec.Command(bin, "run", "--private", "--no-view", "--lib", lib, "--", "sh", "-c",
		"ls /dev/infiniband/uverbs0 /sys/class/infiniband/rxe0 2>&1 | grep -c 'No such file'").CombinedOutput()
	if _, statErr := os.Stat("/sys/class/infiniband/rxe0"); statErr != nil {
		require.NoError(t, err, "%s", out)
		require.Equal(t, "2\n", string(out), "--no-view leaves the host's view")
	}
	require.Equal(t, hostBefore, hostRDMAFiles(), "the host's /dev/infiniband and /sys/class/infiniband changed")
}

// hostRDMAFiles lists what the host has where the view puts the device.
func hostRDMAFiles() string {
	var b strings.Builder
	for _, d := range []string{"/dev/infiniband", "/sys/class/infiniband", "/sys/class/infiniband_verbs"} {
		ents, err := os.ReadDir(d)
		fmt.Fprintf(&b, "%s %v:", d, err != nil)
		for _, e := range ents {
			b.WriteString(" " + e.Name())
		}
		b.WriteString("\n")
	}
	return b.String()
}
