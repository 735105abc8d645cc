package main

// daemon.go: `softroce daemon`, the process that owns a softroce device and
// answers the drop-in libibverbs.so.1 (libibverbs/) over a Unix socket. The
// wire format is libibverbs/proto.h (daemon_proto.go); each connection is one
// ibv_context of a program (daemon_conn.go), whose verbs objects the daemon
// creates on its device (daemon_verbs.go, daemon_mr.go, daemon_post.go) and
// whose events it routes back (daemon_events.go).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var (
		socket string
		name   string
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Serve a softroce device to programs using the drop-in libibverbs.so.1",
		Long: `daemon starts a softroce device on the link the flags describe and serves it,
on a Unix socket, to programs linked against libibverbs.so.1 that run with
softroce's drop-in library (libibverbs/, see 'softroce run'). It runs until
interrupted.

Each connection to the socket is one ibv_context of a program: the objects it
creates (PDs, MRs, CQs, QPs, SRQs, AHs, completion channels) are its own, and
when the program exits or crashes the daemon destroys whatever it left. Memory
regions are shared, not copied: the library backs registered memory with
memfds that the daemon maps too, so RDMA reads, writes and atomics act on the
program's own pages.

The socket is --socket, else $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock,
else /tmp/softroce-UID.sock: the rule the library follows too.`,
		Example: `  softroce daemon --link udp --addr 127.0.0.2
  LD_LIBRARY_PATH=$PWD/libibverbs ibv_devinfo -v`,
		Args: cobra.NoArgs,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket to serve (default: see above)")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d, err := startDaemon(*lf, name, defaultSocket(socket))
		if err != nil {
			return exitError{exitTrouble, err}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "softroce daemon: %s on %s\n", name, d.path)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		signal.Stop(sig)
		if err := d.Close(); err != nil {
			return exitError{exitTrouble, err}
		}
		return nil
	}
	return cmd
}

// defaultSocket applies the socket path rule (see the daemon's help).
func defaultSocket(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv("SOFTROCE_SOCKET"); s != "" {
		return s
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		return filepath.Join(rt, "softroce.sock")
	}
	return fmt.Sprintf("/tmp/softroce-%d.sock", os.Getuid())
}

// daemon serves one device on a Unix socket. All connections share one
// verbs context on the device; each connection keeps its own handle tables
// (conn), and owners says which connection owns a QP, CQ or SRQ so that the
// device's asynchronous events reach it.
type daemon struct {
	path     string
	ln       net.Listener
	ctx      *verbsapi.Context
	closeDev func() error
	stopEv   context.CancelFunc

	mu      sync.Mutex
	closing bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup

	owners owners
	// mrBytes counts the bytes of all connections' region mappings, up
	// to maxDaemonMRBytes (daemon_mrlimit.go).
	mrBytes atomic.Uint64
}

// startDaemon opens the device and starts serving it on path. A socket file
// left by a daemon that is gone is replaced; a live one is an error.
func startDaemon(lf linkFlags, name, path string) (*daemon, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("a daemon already serves %s", path)
	}
	os.Remove(path)
	ctx, closeDev, err := openDevice(lf, name)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		closeDev()
		return nil, fmt.Errorf("daemon socket: %w", err)
	}
	// Only the daemon's user may connect: the daemon acts for whoever
	// does, on its device and with its memory.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		closeDev()
		return nil, fmt.Errorf("daemon socket: %w", err)
	}
	d := &daemon{path: path, ln: ln, ctx: ctx, closeDev: closeDev, conns: map[net.Conn]struct{}{}}
	d.owners.init()
	evCtx, stop := context.WithCancel(context.Background())
	d.stopEv = stop
	d.wg.Add(2)
	go d.routeAsyncEvents(evCtx)
	go d.accept()
	return d, nil
}

// Close stops serving, drops every client and closes the device.
func (d *daemon) Close() error {
	d.ln.Close() // also removes the socket file
	d.mu.Lock()
	d.closing = true
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.stopEv()
	d.wg.Wait()
	return d.closeDev()
}

func (d *daemon) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		if !peerAllowed(c.(*net.UnixConn)) {
			c.Close()
			continue
		}
		d.mu.Lock()
		if d.closing {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.conns[c] = struct{}{}
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serve(c.(*net.UnixConn))
			d.mu.Lock()
			delete(d.conns, c)
			d.mu.Unlock()
			c.Close()
		}()
	}
}

// peerAllowed reports whether the process at the other end of c runs as
// the daemon's user or as root, the users the socket's mode lets in: a
// socket file made more open, or one passed on, must not let another user
// have the daemon act for them. The library checks the daemon the same way.
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil {
		return false
	}
	return uidAllowed(cred.Uid, uint32(os.Getuid()))
}

// uidAllowed reports whether a peer running as uid may use a daemon
// running as self.
func uidAllowed(uid, self uint32) bool { return uid == self || uid == 0 }
