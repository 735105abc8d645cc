package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/softroce/softroce/internal/testenv"
)

// VMConfig describes one guest.
type VMConfig struct {
	Name        string        // label, used in file names and markers
	Tap         string        // TAP in the Net that the VM's eth0 uses (created by Boot)
	IP          netip.Prefix  // eth0 address, e.g. 10.77.1.2/24
	MAC         string        // eth0 MAC, e.g. 52:54:00:77:01:02
	MTU         int           // eth0 MTU (0: 1500)
	CPUs        int           // vCPUs (0: 1)
	MemMB       int           // memory (0: 512)
	Dir         string        // folder for the console log and command socket
	BootTimeout time.Duration // qemu start to rxe0 ready (0: 90 s)
	// Share is a host folder the guest may mount read-only over 9p
	// (mount -t 9p -o trans=virtio host /mnt), or "" for none.
	Share string
}

// Result is what a guest command returned.
type Result struct {
	Status  int    // exit status; 137 when the guest-side timeout killed it
	Output  string // stdout and stderr, interleaved
	Elapsed time.Duration
}

// VM is a running guest whose command server is connected.
type VM struct {
	Name     string
	IP       netip.Addr
	BootTime time.Duration // qemu start to "rxe0 ready"
	cfg      VMConfig
	img      Image
	net      *Net
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	conn     net.Conn
	console  *testenv.LockedBuffer
	exited   chan struct{}

	wmu     sync.Mutex // serialises request lines
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan Result
	readErr error
}

// Accel returns the qemu accelerator arguments: KVM when /dev/kvm can be
// used by a normal guest, else multi-threaded TCG. A /dev/kvm that exists is
// not enough (kvm_pvm hosts have one that hangs Debian's kernel), so KVM is
// used only when SOFTROCE_INTEROP_KVM=1 or /proc/cpuinfo shows vmx/svm.
func Accel() []string {
	if os.Getenv("SOFTROCE_INTEROP_KVM") == "0" {
		return []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
	}
	kvm := os.Getenv("SOFTROCE_INTEROP_KVM") == "1"
	if !kvm {
		if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
			_ = f.Close()
			if ci, err := os.ReadFile("/proc/cpuinfo"); err == nil {
				kvm = bytes.Contains(ci, []byte(" vmx")) || bytes.Contains(ci, []byte(" svm"))
			}
		}
	}
	if kvm {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
}

// Boot creates cfg.Tap in n, starts qemu and waits until the guest's command
// server reports rxe0 ready. The VM must be closed.
func Boot(ctx context.Context, img Image, n *Net, cfg VMConfig) (*VM, error) {
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.MemMB == 0 {
		cfg.MemMB = 512
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 90 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	// EnsureTap, not AddTap: a reboot finds the TAP of the first boot.
	if err := n.EnsureTap(ctx, cfg.Tap, cfg.MTU); err != nil {
		return nil, err
	}
	sock := filepath.Join(cfg.Dir, cfg.Name+".sock")
	_ = os.Remove(sock)
	appendArgs := fmt.Sprintf("console=ttyS0 panic=-1 quiet rxe.ip=%s rxe.mtu=%d rxe.name=%s", cfg.IP, cfg.MTU, cfg.Name)
	args := append(Accel(),
		"-m", strconv.Itoa(cfg.MemMB), "-smp", strconv.Itoa(cfg.CPUs),
		"-display", "none", "-monitor", "none", "-no-reboot", "-nodefaults",
		"-kernel", img.Kernel, "-initrd", img.Initrd, "-append", appendArgs,
		"-netdev", "tap,id=n0,ifname="+cfg.Tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+cfg.MAC,
		"-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
		"-serial", "unix:"+sock+",server=on,wait=off",
	)
	if cfg.Share != "" {
		args = append(args, "-virtfs", "local,path="+cfg.Share+",mount_tag=host,security_model=none,readonly=on")
	}
	qctx, cancel := context.WithCancel(context.Background())
	v := &VM{
		Name: cfg.Name, IP: cfg.IP.Addr(), cfg: cfg, img: img, net: n, cancel: cancel,
		console: &testenv.LockedBuffer{}, exited: make(chan struct{}), waiting: map[int]chan Result{},
	}
	v.cmd = n.Command(qctx, "qemu-system-x86_64", args...)
	v.cmd.Stdout = v.console
	v.cmd.Stderr = v.console
	start := time.Now()
	if err := v.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start qemu for %s: %w", cfg.Name, err)
	}
	go func() {
		_ = v.cmd.Wait()
		close(v.exited)
	}()
	ready := make(chan struct{})
	if err := v.connect(ctx, sock, ready); err != nil {
		v.kill()
		return nil, fmt.Errorf("boot %s: %w\nconsole:\n%s", cfg.Name, err, v.Console())
	}
	select {
	case <-ready:
		v.BootTime = time.Since(start)
	case <-v.exited:
		v.kill()
		return nil, fmt.Errorf("boot %s: qemu exited before ready\nconsole:\n%s", cfg.Name, v.Console())
	case <-time.After(cfg.BootTimeout):
		v.kill()
		return nil, fmt.Errorf("boot %s: not ready after %v\nconsole:\n%s", cfg.Name, cfg.BootTimeout, v.Console())
	case <-ctx.Done():
		v.kill()
		return nil, ctx.Err()
	}
	return v, nil
}

// connect dials qemu's socket for the guest's second serial port (it appears
// when qemu has started) and reads answers until the connection ends.
func (v *VM) connect(ctx context.Context, sock string, ready chan struct{}) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			v.conn = c
			break
		}
		select {
		case <-v.exited:
			return errors.New("qemu exited before its serial socket appeared")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dial %s: %w", sock, err)
		}
	}
	go v.readLoop(ready)
	return nil
}

// readLoop parses the command server's lines: the READY marker and
// "=== RES ID rc=N BASE64".
func (v *VM) readLoop(ready chan struct{}) {
	sc := bufio.NewScanner(v.conn)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	readyOnce := sync.Once{}
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(line, "=== RXEVM READY") {
			readyOnce.Do(func() { close(ready) })
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "===" || f[1] != "RES" || !strings.HasPrefix(f[3], "rc=") {
			continue
		}
		id, err1 := strconv.Atoi(f[2])
		rc, err2 := strconv.Atoi(strings.TrimPrefix(f[3], "rc="))
		if err1 != nil || err2 != nil {
			continue
		}
		var out []byte
		if len(f) > 4 {
			out, _ = base64.StdEncoding.DecodeString(f[4])
		}
		v.mu.Lock()
		ch := v.waiting[id]
		delete(v.waiting, id)
		v.mu.Unlock()
		if ch != nil {
			ch <- Result{Status: rc, Output: string(out)}
		}
	}
	v.mu.Lock()
	v.readErr = fmt.Errorf("command channel of %s closed: %v", v.Name, sc.Err())
	for id, ch := range v.waiting {
		close(ch)
		delete(v.waiting, id)
	}
	v.mu.Unlock()
}

// Job is a guest command started with Start.
type Job struct {
	vm      *VM
	id      int
	script  string
	timeout time.Duration
	start   time.Time
	ch      chan Result
	ctx     context.Context
}

// Start sends script to the guest to run under bash, in its own process
// group, which the guest kills after timeout. Wait for it with Wait.
func (v *VM) Start(ctx context.Context, script string, timeout time.Duration) (*Job, error) {
	secs := int(timeout.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	j := &Job{vm: v, script: script, timeout: timeout, ch: make(chan Result, 1), ctx: ctx}
	v.mu.Lock()
	if v.readErr != nil {
		v.mu.Unlock()
		return nil, v.readErr
	}
	v.nextID++
	j.id = v.nextID
	v.waiting[j.id] = j.ch
	v.mu.Unlock()
	j.start = time.Now()
	if err := v.send(fmt.Sprintf("%d %d %s\n", j.id, secs, base64.StdEncoding.EncodeToString([]byte(script)))); err != nil {
		return nil, fmt.Errorf("send command to %s: %w", v.Name, err)
	}
	return j, nil
}

// send writes one request line; lines from concurrent callers never mix.
func (v *VM) send(line string) error {
	v.wmu.Lock()
	defer v.wmu.Unlock()
	_, err := v.conn.Write([]byte(line))
	return err
}

// Wait waits for the job's answer. The host gives up 15 s after the guest
// should have killed it. A non-zero exit status is not an error: check
// Result.Status.
func (j *Job) Wait() (Result, error) {
	select {
	case r, ok := <-j.ch:
		if !ok {
			return Result{}, fmt.Errorf("run %q on %s: command channel closed", j.script, j.vm.Name)
		}
		r.Elapsed = time.Since(j.start)
		return r, nil
	case <-time.After(time.Until(j.start.Add(j.timeout + 15*time.Second))):
		j.forget()
		return Result{}, fmt.Errorf("run %q on %s: no answer after %v", j.script, j.vm.Name, j.timeout+15*time.Second)
	case <-j.ctx.Done():
		j.Kill()
		j.forget()
		return Result{}, j.ctx.Err()
	}
}

// forget drops the job's answer slot once nobody waits for it.
func (j *Job) forget() {
	j.vm.mu.Lock()
	delete(j.vm.waiting, j.id)
	j.vm.mu.Unlock()
}

// Kill asks the guest to kill the job's process group now; its Wait then
// returns status 137. Killing a finished job does nothing.
func (j *Job) Kill() {
	_ = j.vm.send(fmt.Sprintf("kill %d\n", j.id))
}

// Run runs script in the guest and waits for it (Start then Wait).
func (v *VM) Run(ctx context.Context, script string, timeout time.Duration) (Result, error) {
	j, err := v.Start(ctx, script, timeout)
	if err != nil {
		return Result{}, err
	}
	return j.Wait()
}

// Console returns the guest's console output so far.
func (v *VM) Console() string { return v.console.String() }

// Reboot closes the guest and boots a new one with the same configuration
// (address, MAC, TAP): a fresh kernel for whatever runs after a test that
// left this one unusable.
func (v *VM) Reboot(ctx context.Context) (*VM, error) {
	_ = v.Close()
	return Boot(ctx, v.img, v.net, v.cfg)
}

// Close powers the guest off (up to 10 s), then kills qemu.
func (v *VM) Close() error {
	if v.conn != nil {
		_ = v.send("0 5 " + base64.StdEncoding.EncodeToString([]byte("poweroff -f")) + "\n")
	}
	select {
	case <-v.exited:
	case <-time.After(10 * time.Second):
	}
	v.kill()
	return nil
}

func (v *VM) kill() {
	v.cancel()
	if v.conn != nil {
		_ = v.conn.Close()
	}
	select {
	case <-v.exited:
	case <-time.After(10 * time.Second):
	}
}
