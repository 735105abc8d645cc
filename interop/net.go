package interop

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// cmdTimeout bounds every ip/sysctl command the harness runs.
const cmdTimeout = 20 * time.Second

// Bridge is the name of the bridge inside every Net.
const Bridge = "br0"

// Net is the host side of a test: a network namespace holding a bridge with
// the host's address on it and the TAPs that VMs and softroce's tap link
// join. Programs that must see it (qemu, tcpdump, softroce) run through
// Command, i.e. `ip netns exec`.
type Net struct {
	NS   string       // network namespace name
	Host netip.Prefix // the bridge's address, e.g. 10.77.1.1/24
}

// NewNet creates namespace ns with a bridge holding host. A namespace left
// over from an interrupted run of the same name is removed first, with its
// processes. IPv6 is off inside the namespace so that the host side adds no
// ND/MLD frames to captures (guests keep theirs, as real hosts would).
func NewNet(ctx context.Context, ns string, host netip.Prefix) (*Net, error) {
	n := &Net{NS: ns, Host: host}
	if err := removeNetns(ctx, ns); err != nil {
		return nil, err
	}
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"},
		{"sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", Bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0"},
		// A bridge takes the lowest MAC of its ports unless it has one of
		// its own, so TAPs coming and going (softroce's tap link) would change
		// the host's MAC under the guests' ARP caches.
		{"ip", "link", "set", Bridge, "address", "02:00:00:00:00:01"},
		// Jumbo frames for the guests and TAPs that have them; a bridge keeps
		// an MTU set by hand instead of following its smallest port.
		{"ip", "link", "set", Bridge, "mtu", "9000"},
		{"ip", "addr", "add", host.String(), "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		// Without this, frames from the host's own UDP socket (softroce's
		// udp link) carry a partial checksum on the bridge, which captures
		// show as bad; with it the kernel computes it, as on a real NIC.
		{"ethtool", "-K", Bridge, "tx", "off"},
	}
	for _, s := range steps {
		if err := n.run(ctx, s...); err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	return n, nil
}

// AddTap creates a persistent TAP (IFF_TAP|IFF_NO_PI) on the bridge, with the
// given MTU (0: 1500). qemu opens it by name; softroce's tap link too.
func (n *Net) AddTap(ctx context.Context, name string, mtu int) error {
	if mtu == 0 {
		mtu = 1500
	}
	for _, s := range [][]string{
		{"ip", "tuntap", "add", "mode", "tap", "name", name},
		{"ip", "link", "set", name, "mtu", fmt.Sprint(mtu)},
		{"ip", "link", "set", name, "master", Bridge},
		{"ip", "link", "set", name, "up"},
	} {
		if err := n.run(ctx, s...); err != nil {
			return fmt.Errorf("add tap %s: %w", name, err)
		}
	}
	return nil
}

// EnsureTap adds TAP name (as AddTap) unless it exists, and sets its MTU.
// softroce's tap link clears a TAP's persist flag (water sets TUNSETPERSIST
// to its Persist option, false), so the TAP vanishes when softroce exits and
// each run needs it again.
func (n *Net) EnsureTap(ctx context.Context, name string, mtu int) error {
	if err := n.run(ctx, "ip", "link", "show", name); err != nil {
		return n.AddTap(ctx, name, mtu)
	}
	if mtu == 0 {
		mtu = 1500
	}
	return n.run(ctx, "ip", "link", "set", name, "mtu", fmt.Sprint(mtu))
}

// Command returns a command that runs inside the namespace. The process is
// killed if the test process dies (Pdeathsig) or ctx ends.
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a short command inside the namespace.
func (n *Net) run(ctx context.Context, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", n.NS}, args...)...)
}

// Output runs a short command inside the namespace and returns its stdout.
func (n *Net) Output(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := n.Command(ctx, args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Close kills whatever still runs in the namespace and deletes it, which
// removes the bridge and every TAP in it.
func (n *Net) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	return removeNetns(ctx, n.NS)
}

// removeNetns deletes ns (if it exists) after killing its processes.
func removeNetns(ctx context.Context, ns string) error {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	found := false
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == ns {
			found = true
		}
	}
	if !found {
		return nil
	}
	if pids, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output(); err == nil {
		for _, p := range strings.Fields(string(pids)) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return run(ctx, "ip", "netns", "del", ns)
}

// run runs a short host command, with its stderr in the error.
func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// EnableIPv6 turns IPv6 on for the bridge alone (the namespace keeps it off
// elsewhere) and gives it addr, without duplicate address detection so that
// the address is usable at once. The kernel then answers the guests'
// neighbour solicitations for it, and softroce's udp link can bind to it.
func (n *Net) EnableIPv6(ctx context.Context, addr netip.Prefix) error {
	for _, s := range [][]string{
		{"sysctl", "-q", "-w", "net.ipv6.conf." + Bridge + ".disable_ipv6=0"},
		{"ip", "-6", "addr", "replace", addr.String(), "dev", Bridge, "nodad"},
	} {
		if err := n.run(ctx, s...); err != nil {
			return fmt.Errorf("enable ipv6 on %s: %w", Bridge, err)
		}
	}
	return nil
}
