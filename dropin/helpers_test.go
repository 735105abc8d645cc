package dropin

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/softroce/softroce/verbsapi"
)

// linkFlags names the link of a test server, as the command's flags would.
type linkFlags struct{ Link, Addr, Pcap string }

// testDaemon is a Server on a device of its own, as `softroce daemon` runs
// one, with a context of the test's for queries.
type testDaemon struct {
	*Server
	ctx  *verbsapi.Context
	path string
	done chan error
	// closeOnce, when a test sets it, closes the daemon early and tells
	// its cleanup not to close it again.
	closeOnce func() error
}

// startDaemon starts a device on the link lf names and serves it on path,
// discarding the server's log.
func startDaemon(lf linkFlags, name, path string) (*testDaemon, error) {
	return startDaemonLog(lf, name, path, func(string, ...any) {})
}

// startDaemonLog is startDaemon with the server's log going to logf.
func startDaemonLog(lf linkFlags, name, path string, logf func(string, ...any)) (*testDaemon, error) {
	return startDaemonWith(lf, name, path, func(s *Server) { s.Logf = logf })
}

// startDaemonWith is startDaemon with the Server set up by configure
// (limits, log) before it serves.
func startDaemonWith(lf linkFlags, name, path string, configure func(*Server)) (*testDaemon, error) {
	addr, err := netip.ParseAddr(lf.Addr)
	if err != nil {
		return nil, err
	}
	dev, err := verbsapi.NewDevice(name, verbsapi.LinkConfig{Kind: lf.Link, Addr: netip.AddrPortFrom(addr, 0), Pcap: lf.Pcap})
	if err != nil {
		return nil, err
	}
	ln, err := Listen(path)
	if err != nil {
		dev.Close()
		return nil, err
	}
	ctx, err := dev.Open()
	if err != nil {
		dev.Close()
		return nil, err
	}
	// The sysfs view, as softroce daemon writes it.
	if err := WriteSysfs(SysfsDir(path), dev); err != nil {
		dev.Close()
		return nil, err
	}
	srv := &Server{Device: dev, Logf: func(string, ...any) {}}
	configure(srv)
	d := &testDaemon{Server: srv, ctx: ctx, path: path, done: make(chan error, 1)}
	go func() { d.done <- d.Serve(ln) }()
	return d, nil
}

// Close stops the server, then the device.
func (d *testDaemon) Close() error {
	d.Server.Close()
	if err := <-d.done; err != ErrServerClosed {
		return fmt.Errorf("serve returned %v", err)
	}
	return d.Device.Close()
}

// newTestConn is a connection without a socket, for calling the handlers
// directly, with a context of its own as Serve gives each program.
func newTestConn(d *testDaemon) *conn {
	ctx, err := d.Device.Open()
	if err != nil {
		panic(err)
	}
	c := newConn(d.Server, ctx, nil)
	return c
}

// logLines collects a Server's log lines (Server.Logf) for a test.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// all returns the lines so far.
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
