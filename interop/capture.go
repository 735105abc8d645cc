package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultFilter keeps what an interop capture is about: RoCE v2, the
// out-of-band TCP exchange of the pingpong and perftest programs, and ARP.
const DefaultFilter = "udp port 4791 or tcp port 18515 or arp"

// Capture is a running tcpdump inside a Net.
type Capture struct {
	Path   string
	cancel context.CancelFunc
	done   chan error
	pid    int
	once   sync.Once
	err    error
	// kernelDrops is what tcpdump said at exit it lost ("N packets
	// dropped by kernel"), -1 if it said nothing; set before done.
	kernelDrops int
}

// dropsRE is tcpdump's exit report of the packets it lost.
var dropsRE = regexp.MustCompile(`(?m)^(\d+) packets? dropped by kernel`)

// KernelDrops returns the packets tcpdump lost (its buffer overflowed, the
// machine busy), -1 if it did not say: a capture that lost any does not
// hold every frame that crossed the interface. Valid after Stop.
func (c *Capture) KernelDrops() int { return c.kernelDrops }

// StartCapture runs tcpdump on iface inside n, writing path, and returns once
// tcpdump says it is listening (or fails within 15 s).
func (n *Net) StartCapture(ctx context.Context, iface, path, filter string) (*Capture, error) {
	ctx, cancel := context.WithCancel(ctx)
	cmd := n.Command(ctx, "tcpdump", "-i", iface, "-n", "--immediate-mode", "-U", "-B", "32768", "-s", "0", "-Z", "root", "-w", path, filter)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start tcpdump on %s: %w", iface, err)
	}
	c := &Capture{Path: path, cancel: cancel, done: make(chan error, 1), pid: cmd.Process.Pid, kernelDrops: -1}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen strings.Builder
		sent := false
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), "listening on") {
				listening <- ""
				sent = true
			}
		}
		if !sent {
			listening <- seen.String()
		}
		_, _ = io.Copy(io.Discard, stderr)
		if m := dropsRE.FindStringSubmatch(seen.String()); m != nil {
			c.kernelDrops, _ = strconv.Atoi(m[1])
		}
		c.done <- cmd.Wait()
	}()
	select {
	case msg := <-listening:
		if msg != "" {
			cancel()
			return nil, fmt.Errorf("tcpdump on %s exited: %s", iface, strings.TrimSpace(msg))
		}
	case <-time.After(15 * time.Second):
		_ = c.Stop()
		return nil, fmt.Errorf("tcpdump on %s: not listening after 15 s", iface)
	}
	return c, nil
}

// Stop waits (up to 3 s) until the capture file stops growing, since tcpdump
// drops queued packets on an early SIGINT, then stops tcpdump. Later calls
// return the first call's result.
func (c *Capture) Stop() error {
	c.once.Do(func() { c.err = c.stop() })
	return c.err
}

func (c *Capture) stop() error {
	defer c.cancel()
	last := int64(-1)
	for i := 0; i < 12; i++ {
		fi, err := os.Stat(c.Path)
		if err == nil && fi.Size() == last {
			break
		}
		if err == nil {
			last = fi.Size()
		}
		time.Sleep(250 * time.Millisecond)
	}
	_ = syscall.Kill(c.pid, syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-time.After(5 * time.Second):
		c.cancel()
		<-c.done
		return fmt.Errorf("tcpdump writing %s did not stop on SIGINT", c.Path)
	}
}
