package main

// run.go: `softroce run -- PROGRAM ARGS`, running an unmodified verbs
// program on a softroce device through the drop-in libibverbs.so.1.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/softroce/softroce/dropin"
	"github.com/softroce/softroce/rxe"
)

func init() { register(newRunCmd) }

func newRunCmd() *cobra.Command {
	var (
		socket  string
		lib     string
		name    string
		private bool
		idle    time.Duration
		noView  bool
		rsock   string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- PROGRAM [ARGS...]",
		Short: "Run an unmodified libibverbs program on a softroce device",
		Long: `run runs PROGRAM with softroce's drop-in libibverbs.so.1 in place of the
system's (and its drop-in librdmacm.so.1 in place of librdmacm's), talking
to a softroce daemon. If a daemon answers on the socket (--socket,
$SOFTROCE_SOCKET, $XDG_RUNTIME_DIR/softroce.sock or
/tmp/softroce-UID/softroce.sock, in a directory of the user's own)
run uses it and the link flags are ignored.

Otherwise, when neither a socket nor any link flag is given, run starts a
shared daemon on the default socket (a device on the mem link at 10.0.0.1,
in the background, exiting --idle-exit after its last program is gone):
every program started with 'softroce run' in any shell of this user then
sees the same device and reaches the others, as with a kernel device. With
--private, or with a socket or link flags given, run starts a device of its
own on the link the flags describe, serves it on a private socket for as long
as PROGRAM runs, and closes it afterwards; once PROGRAM has started, run
raises its own priority as the daemon does (see softroce daemon --help),
PROGRAM's staying as it was.

run finds the library with --lib, else $SOFTROCE_LIBDIR, else in a
libibverbs/ directory next to the softroce binary, else in dropin/libibverbs/
of the source checkout holding the current directory; in a checkout it runs
make there first (gcc and libibverbs-dev), so the library is always built
from the current sources.

run is equivalent to starting 'softroce daemon' and running
  SOFTROCE_SOCKET=SOCKET LD_LIBRARY_PATH=LIBDIR PROGRAM ARGS
Programs that look for the device in the file system rather than through
libibverbs (UCX, Open MPI's hwloc, pyverbs' rdmacm tests) find it because
run starts PROGRAM in a mount namespace of its own, in which the daemon's
sysfs directory (SOCKET.sys) lies over /sys/class and /dev:
/sys/class/infiniband/DEV and /dev/infiniband/uverbsN exist there as with
kernel rxe. The host's /sys and /dev do not change. As root this is a plain
mount namespace; otherwise a user namespace too, where the kernel allows one
(the program still runs as the user). --no-view runs PROGRAM without it.

With --rsocket, run also preloads a library that turns PROGRAM's TCP
sockets into rsockets: the same socket calls, carried by RC queue pairs that
rdma_cm connects, in librdmacm's rsocket protocol, served by the drop-in
librdmacm.so.1. Two such programs reach each other at the device's address
(10.0.0.1 for the shared device), and one reaches an rsocket program on
kernel rxe or an RNIC at its RoCE address. --rsocket preloads softroce's
own library (dropin/librspreload), which also serves epoll, accept4 and
dual-stack listeners (Redis needs all three); --rsocket=system preloads the
distribution's librspreload.so (Debian: librdmacm1), which serves neither
epoll nor accept4; --rsocket=PATH another.

It exits with PROGRAM's status.`,
		Example: `  softroce run -- ibv_devices
  softroce run --link udp --addr 127.0.0.2 -- ibv_devinfo -v
  softroce run --rsocket -- redis-server --protected-mode no   # TCP, carried by RDMA
  softroce run --rsocket -- redis-benchmark -h 10.0.0.1 -q`,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().StringVar(&socket, "socket", "", "daemon socket (default: see above)")
	cmd.Flags().StringVar(&lib, "lib", "", "directory holding the built libibverbs.so.1 (default: see above)")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name, when run starts the device")
	cmd.Flags().BoolVar(&private, "private", false, "start a device of this program's own, even with no daemon running")
	cmd.Flags().DurationVar(&idle, "idle-exit", 30*time.Second, "a shared daemon run starts exits this long after its last program")
	cmd.Flags().BoolVar(&noView, "no-view", false, "run PROGRAM without the device's /sys/class/infiniband and /dev/infiniband view")
	cmd.Flags().StringVar(&rsock, "rsocket", "", "PROGRAM's TCP sockets become rsockets over RDMA: preload softroce's library (or =system, =PATH)")
	cmd.Flags().Lookup("rsocket").NoOptDefVal = "softroce"
	// Flags after PROGRAM are PROGRAM's, with or without "--".
	cmd.Flags().SetInterspersed(false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError{errNoProgram}
		}
		libDir, err := dropin.FindLib(lib)
		if err != nil {
			return exitError{exitTrouble, err}
		}
		preload := ""
		if rsock != "" {
			if preload, err = dropin.PreloadPath(libDir, rsock); err != nil {
				return exitError{exitTrouble, fmt.Errorf("--rsocket: %w", err)}
			}
		}
		sock := dropin.SocketPath(socket)
		var dev *rxe.Device // the device run serves itself, if it does
		shared := !private && socket == "" && os.Getenv("SOFTROCE_SOCKET") == "" && !linkFlagsGiven(cmd)
		if !dropin.Answers(sock) && shared {
			if err := startSharedDaemon(sock, name, idle, cmd.ErrOrStderr()); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "softroce run: %v; this program gets a device of its own, which no other program reaches\n", err)
			}
		}
		if !dropin.Answers(sock) {
			dir, err := os.MkdirTemp("", "softroce-run-")
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer os.RemoveAll(dir)
			sock = filepath.Join(dir, "softroce.sock")
			srv, stop, _, err := serveDevice(*lf, name, sock, cmd.ErrOrStderr(), daemonLimits{})
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer stop()
			dev = srv.Device.RXE()
		}
		start := func(view bool) (*exec.Cmd, error) {
			prog := programCmd(args, sock, view)
			prog.Stdin, prog.Stdout, prog.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			prog.Env = dropin.Env(os.Environ(), libDir, sock)
			if preload != "" {
				prog.Env = dropin.WithPreload(prog.Env, preload)
			}
			return prog, prog.Start()
		}
		prog, err := start(!noView)
		if err != nil && prog.SysProcAttr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "softroce run: no mount namespace for the sysfs view (%v); programs that look for the device in /sys or /dev (UCX, Open MPI) will not find it (--no-view hides this)\n", err)
			prog, err = start(false)
		}
		if err == nil && dev != nil && setPriority(cmd, dropin.DefaultRealtime, dropin.DefaultNice) {
			// The device run serves from its own process takes the
			// daemon's priority once the program has started, so that
			// the program keeps its own.
			realtimePlan(dev, lf.Link, dropin.DefaultRealtime, dropin.DefaultNice, false)
		}
		if err == nil {
			err = prog.Wait()
		}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			// A program killed by a signal ends run as a shell reports
			// it (128+N), with the signal named: its buffered output is
			// lost, so this may be all there is to tell.
			code, sig := dropin.ShellStatus(ee)
			if sig != 0 {
				return exitError{code, fmt.Errorf("%s killed by signal %d (%v)", args[0], int(sig), sig)}
			}
			return exitError{code: code}
		case err != nil:
			return exitError{exitTrouble, fmt.Errorf("run %s: %w", args[0], err)}
		}
		return nil
	}
	return cmd
}

// programCmd returns the command that runs args: directly, or with view
// through view-exec in a mount namespace of its own, in which the daemon's
// sysfs view covers /sys/class and /dev (when the daemon wrote one).
func programCmd(args []string, sock string, view bool) *exec.Cmd {
	dir := dropin.SysfsDir(sock)
	self, err := os.Executable()
	if _, serr := os.Stat(dir); !view || err != nil || serr != nil {
		return exec.Command(args[0], args[1:]...)
	}
	vargs := []string{"view-exec"}
	if os.Geteuid() != 0 {
		vargs = append(vargs, "--uid", strconv.Itoa(os.Geteuid()), "--gid", strconv.Itoa(os.Getegid()))
	}
	vargs = append(append(vargs, dir), args...)
	c := exec.Command(self, vargs...)
	c.SysProcAttr = dropin.ViewSysProcAttr()
	return c
}

var errNoProgram = errors.New("no program to run: softroce run [flags] -- PROGRAM [ARGS]")

// linkFlagsGiven reports whether any flag but run's own was set: then the
// user asked for a particular device, which a shared daemon is not.
func linkFlagsGiven(cmd *cobra.Command) bool {
	given := false
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "socket", "lib", "private", "idle-exit", "ib-dev", "rsocket", "no-view":
		default:
			given = true
		}
	})
	return given
}

// startSharedDaemon starts `softroce daemon` on sock in the background, in
// a session of its own so that it outlives this program and its shell, with
// its log beside the socket, and waits until it answers. Two runs racing to
// start one find the same daemon: the second fails to listen and exits.
func startSharedDaemon(sock, name string, idle time.Duration, w io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start a shared daemon: %w", err)
	}
	if err := dropin.PrepareSocketDir(sock); err != nil {
		return fmt.Errorf("start a shared daemon: %w", err)
	}
	logPath := strings.TrimSuffix(sock, ".sock") + "-daemon.log"
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start a shared daemon: %w", err)
	}
	defer logf.Close()
	d := exec.Command(exe, "daemon", "--socket", sock, "-d", name, "--idle-exit", idle.String())
	d.Stdout, d.Stderr = logf, logf
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Start(); err != nil {
		return fmt.Errorf("start a shared daemon: %w", err)
	}
	exited := make(chan struct{})
	go func() { d.Wait(); close(exited) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if dropin.Answers(sock) {
			fmt.Fprintf(w, "softroce run: started a shared device %s (mem link, 10.0.0.1) on %s; it exits %v after its last program (log: %s)\n",
				name, sock, idle, logPath)
			return nil
		}
		select {
		case <-exited:
			if dropin.Answers(sock) {
				return nil // another run's daemon won the race
			}
			return fmt.Errorf("the shared daemon exited at once (see %s)", logPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("the shared daemon did not answer on %s within 10 s (see %s)", sock, logPath)
}
