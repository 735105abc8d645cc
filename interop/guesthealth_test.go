package interop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guestHealthScript reports what a failed case may have left behind in a
// guest: test programs still running a moment after the case ended (a job
// the guest should have killed; kernel threads such as ib_mad1, whose
// arguments ps shows in brackets, are not programs), tasks stuck in the
// kernel (state D) with their kernel stacks, the kernel's last messages,
// free memory and rxe0's counters. It exits non-zero when the guest is
// unfit for the next case: such a program or task, no answer to a ping of
// the host (host), or rxe0 not ACTIVE, which its last line says
// ("unfit: ..."). It uses busybox's ps, the one in the image.
func guestHealthScript(host string) string {
	return `sleep 1
unfit=
ps=$(busybox ps -o pid,stat,comm,args | awk 'NR > 1 && ($2 ~ /^D/ || ($3 ~ /^(ib_|ibv_|rping|rdma_|ucmatose|udaddy|rstream|riostream|cmtime)/ && $4 !~ /^\[/))')
if [ -n "$ps" ]; then
	echo "left over or stuck:"; echo "$ps"
	unfit="$unfit; left over or stuck: $(echo "$ps" | awk '{print $1, $2, $3}' | tr '\n' ' ')"
	for p in $(echo "$ps" | awk '$2 ~ /^D/ {print $1}'); do
		echo "kernel stack of $p:"; cat /proc/$p/stack
	done
fi
ping -c 1 -W 2 ` + host + ` >/dev/null 2>&1 || unfit="$unfit; no answer to a ping of ` + host + `"
echo "dmesg:"; dmesg | tail -n 12
grep -E '^(MemFree|MemAvailable):' /proc/meminfo
rdma statistic show link rxe0/1 2>&1 | tr -s ' ' | fold -w 200
ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || unfit="$unfit; rxe0 not ACTIVE"
[ -z "$unfit" ] && exit 0
echo "unfit: ${unfit#; }"
exit 1`
}

// healthScript is guestHealthScript for this suite's host address.
func (s *suite) healthScript() string { return guestHealthScript(s.net.Host.Addr().String()) }

// health is what the suite learnt of its guests in failed cases, for the
// digest TestInterop prints last (the tail of a CI log is often all there
// is to read). The tests run one after another: no lock.
type health struct {
	failed   []string // failed tests, in order
	rebooted []string // "guest X after TEST: why"
}

// afterFailure arranges that, if t fails, it is recorded in the digest and
// both guests are checked (checkGuest) once its own cleanups (killing its
// guest programs among them) have run: registered first, this runs last.
func (s *suite) afterFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s.health.failed = append(s.health.failed, t.Name())
		for _, vm := range []*VM{s.a, s.b} {
			s.checkGuest(t, vm)
		}
	})
}

// checkGuest runs guestHealthScript in vm after t has failed and, if the
// guest is unfit (a program it should have killed still runs, a task is
// stuck in its kernel, rxe0 is gone, or it does not answer), logs why and
// reboots it, so that one wedged kernel fails one case and not every case
// after it.
func (s *suite) checkGuest(t *testing.T, vm *VM) {
	r, err := vm.Run(s.ctx, s.healthScript(), 20*time.Second)
	if err == nil && r.Status == 0 {
		t.Logf("guest %s looks fit after the failure:\n%s", vm.Name, r.Output)
		return
	}
	why := fmt.Sprintf("status %d, err %v", r.Status, err)
	if _, unfit, ok := strings.Cut(r.Output, "\nunfit: "); ok {
		why = strings.TrimSpace(unfit)
	}
	console := vm.Console()
	if len(console) > 4000 {
		console = console[len(console)-4000:]
	}
	t.Logf("guest %s is unfit (%s); rebooting it. Its report:\n%s\nits console's tail:\n%s", vm.Name, why, r.Output, console)
	start := time.Now()
	nvm, err := vm.Reboot(s.ctx)
	if err != nil {
		t.Logf("reboot guest %s: %v", vm.Name, err)
		why += "; reboot failed"
	} else {
		t.Logf("guest %s rebooted in %v", vm.Name, time.Since(start).Round(time.Millisecond))
		s.replaceGuest(t, nvm)
	}
	s.health.rebooted = append(s.health.rebooted, fmt.Sprintf("guest %s after %s: %s", vm.Name, t.Name(), why))
}

// replaceGuest puts a rebooted guest in its place and gives it back the
// IPv6 address an earlier case set up.
func (s *suite) replaceGuest(t *testing.T, vm *VM) {
	switch vm.Name {
	case s.a.Name:
		s.a = vm
	case s.b.Name:
		s.b = vm
	}
	if s.v6.gid == nil {
		return
	}
	n, err := s.guestIPv6(vm, guestAddr6[vm.Name])
	if err != nil {
		t.Logf("rebooted guest %s: %v", vm.Name, err)
		return
	}
	s.v6.gid[vm.Name] = n
}

// digest is the last thing a failed TestInterop logs: the failed tests and
// the guests rebooted, in a few lines.
func (s *suite) digest() string {
	var b strings.Builder
	names := s.health.failed
	more := ""
	if len(names) > 6 {
		names, more = names[:6], fmt.Sprintf(" and %d more", len(names)-6)
	}
	fmt.Fprintf(&b, "digest: %d tests failed: %s%s", len(s.health.failed), strings.Join(names, ", "), more)
	for _, r := range s.health.rebooted {
		fmt.Fprintf(&b, "\ndigest: rebooted %s", r)
	}
	return b.String()
}

// testGuestHealth shows the health check and the reboot work: a fresh
// guest is fit, one with a test program left running is not and says
// which, and a rebooted guest has rxe0 ready again.
func (s *suite) testGuestHealth(t *testing.T) {
	r, err := s.a.Run(s.ctx, s.healthScript(), 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, r.Status, "fresh guest a unfit:\n%s", r.Output)

	job, err := s.b.Start(s.ctx, "ib_write_bw -d rxe0", 30*time.Second)
	require.NoError(t, err)
	defer job.Kill()
	r, err = s.b.Run(s.ctx, waitListenScript, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, r.Status, "ib_write_bw never listened")
	r, err = s.b.Run(s.ctx, s.healthScript(), 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, r.Status, "guest b with a server left running passed:\n%s", r.Output)
	require.Contains(t, r.Output, "ib_write_bw -d rxe0")
	require.Regexp(t, `(?m)^unfit: left over or stuck: \d+ \S+ ib_write_bw`, r.Output)

	start := time.Now()
	b, err := s.b.Reboot(s.ctx)
	require.NoError(t, err)
	s.replaceGuest(t, b)
	t.Logf("guest b rebooted in %v", time.Since(start).Round(time.Millisecond))
	r, err = s.b.Run(s.ctx, s.healthScript(), 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, r.Status, "rebooted guest b unfit:\n%s", r.Output)
}
