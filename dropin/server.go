package dropin

// server.go: the Server, shaped like net/http's: options as fields, Serve on
// a listener, Close. Each accepted connection is one ibv_context of a
// program (conn.go) with a verbs context of its own on the device.

import (
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// Default limits; a Server field left 0 takes these.
const (
	// DefaultMaxConnMRBytes caps the bytes of regions one program has
	// mapped into the server: far more than any real program registers,
	// and small enough that a few programs cannot exhaust the server.
	DefaultMaxConnMRBytes = 1 << 40 // 1 TiB
	// DefaultMaxMRBytes caps the regions of all programs together, an
	// eighth of the 128 TiB a process has on x86-64 (47-bit addresses), so
	// that programs opening many connections cannot exhaust it either.
	DefaultMaxMRBytes = 16 << 40 // 16 TiB
	// DefaultMaxConnQueueBytes caps the memory of one program's queues
	// (QPs, SRQs, CQs: queuelimit.go): a thousand QPs of perftest's
	// default depths fit, one at the device's maxima (about 1.9 GB) does
	// not.
	DefaultMaxConnQueueBytes = 1 << 30 // 1 GiB
	// DefaultMaxQueueBytes caps the queues of all programs together.
	DefaultMaxQueueBytes = 4 << 30 // 4 GiB
	// DefaultMaxConnMRMaps caps the memory mappings one program's
	// regions take in the server (one per piece of a region, usually one
	// per region): a quarter of what Linux allows a process by default
	// (vm.max_map_count 65,530), so that one program registering tens of
	// thousands of regions leaves room for the others.
	DefaultMaxConnMRMaps = 16384
	// DefaultMaxConns caps the programs' connections at once (each may
	// hold a partly sent request of up to 1 MiB, srMaxBody).
	DefaultMaxConns = 1024
)

// ErrServerClosed is what Serve returns after Close.
var ErrServerClosed = errors.New("dropin: server closed")

// Server serves one softroce device to programs running the drop-in
// libraries. Set Device (and any limits) before calling Serve; a Server
// must not be copied or reused after Close.
type Server struct {
	// Device is the device served; each connection opens its own context
	// on it. The Server does not close it.
	Device *verbsapi.Device

	// MaxConnMRBytes and MaxMRBytes cap the registered memory mapped into
	// the server per program and in all (0: the defaults above).
	// Registering beyond them fails with ENOMEM, as the kernel answers a
	// registration over a limit.
	MaxConnMRBytes uint64
	MaxMRBytes     uint64

	// MaxConnQueueBytes and MaxQueueBytes cap the memory of queues (QPs,
	// SRQs, CQs) per program and in all (0: the defaults above); creating
	// one beyond them fails with ENOMEM. MaxConns caps the connections
	// served at once (0: DefaultMaxConns); one more is closed at once,
	// and logged.
	MaxConnQueueBytes int64
	MaxQueueBytes     int64
	MaxConns          int
	// MaxConnMRMaps and MaxMRMaps cap the memory mappings of registered
	// regions per program and in all (0: DefaultMaxConnMRMaps, and the
	// kernel's vm.max_map_count less room for the server's own mappings).
	MaxConnMRMaps int64
	MaxMRMaps     int64

	// RingSpin is how long a program's ring poller keeps looking after
	// the last WR it took before it sleeps on the program's doorbell
	// (wqring.go). 0, the default, sleeps at once: on the 2-core machine
	// the figures were best so (ib_send_lat 73 us typical against 136 us
	// with 50 us of spinning, 806 us with 500 us), since a spinning
	// poller takes a CPU from programs that spin on their CQs. A machine
	// with CPUs to spare may gain from a few tens of microseconds.
	RingSpin time.Duration

	// Logf receives the server's log lines: refused requests and dropped
	// programs (at most logBurst lines at once and logRate a second; the
	// rest are counted and reported with the next line). nil: the
	// standard logger.
	Logf func(format string, args ...any)

	mu         sync.Mutex
	lns        map[net.Listener]struct{}
	conns      map[net.Conn]struct{}
	closing    bool
	wg         sync.WaitGroup
	mrBytes    atomic.Uint64 // mapped by all connections (mrlimit.go)
	queueBytes atomic.Int64  // queues of all connections (queuelimit.go)
	mrMaps     atomic.Int64  // region mappings of all connections (mrlimit.go)
	logLimit   logLimiter
}

// Serve accepts connections on ln until Close, serving each on a goroutine
// of its own, and returns ErrServerClosed then (or the accept error that
// stopped it). Connections from other users than the server's (and root)
// are refused: the server acts for whoever connects, on its device and
// with its memory.
func (s *Server) Serve(ln net.Listener) error {
	if s.Device == nil {
		return errors.New("dropin: Server.Device is nil")
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.lns == nil {
		s.lns = map[net.Listener]struct{}{}
		s.conns = map[net.Conn]struct{}{}
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			delete(s.lns, ln)
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			return fmt.Errorf("dropin: accept: %w", err)
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		if cred, ok := peerCred(uc); !ok || !uidAllowed(cred.Uid, uint32(os.Getuid())) {
			s.logf("refused a connection from uid %d: only the server's user (and root) may use it", credUID(cred))
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		if len(s.conns) >= s.maxConns() {
			s.mu.Unlock()
			s.logf("refused a connection: %d programs' connections already (softroce daemon --max-conns)", s.maxConns())
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(uc)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// Conns returns the number of programs' connections being served.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops every Serve, hangs up on every program (destroying what they
// held, as the kernel does when a process dies) and waits until all is
// released. The device stays up.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// The limits in force: a field left 0 (or negative) takes its default.
func (s *Server) maxConnMRBytes() uint64 { return orDefault(s.MaxConnMRBytes, DefaultMaxConnMRBytes) }
func (s *Server) maxMRBytes() uint64     { return orDefault(s.MaxMRBytes, DefaultMaxMRBytes) }
func (s *Server) maxConnQueueBytes() int64 {
	return orDefault(s.MaxConnQueueBytes, DefaultMaxConnQueueBytes)
}
func (s *Server) maxQueueBytes() int64 { return orDefault(s.MaxQueueBytes, DefaultMaxQueueBytes) }
func (s *Server) maxConnMRMaps() int64 { return orDefault(s.MaxConnMRMaps, DefaultMaxConnMRMaps) }
func (s *Server) maxMRMaps() int64     { return orDefault(s.MaxMRMaps, systemMRMaps()) }
func (s *Server) maxConns() int        { return orDefault(s.MaxConns, DefaultMaxConns) }

func orDefault[T int | int64 | uint64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func (s *Server) logf(format string, args ...any) {
	suppressed, ok := s.logLimit.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		format += " (%d earlier lines suppressed)"
		args = append(args, suppressed)
	}
	if s.Logf != nil {
		s.Logf(format, args...)
	} else {
		log.Printf("softroce dropin: "+format, args...)
	}
}

// SocketPath applies the socket path rule the drop-in libraries follow too:
// flag, else $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock, else
// /tmp/softroce-UID/softroce.sock (in a directory of the user's own; see
// PrepareSocketDir).
func SocketPath(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv("SOFTROCE_SOCKET"); s != "" {
		return s
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		return filepath.Join(rt, "softroce.sock")
	}
	return filepath.Join(defaultSocketDir(), "softroce.sock")
}

// Listen listens on the Unix socket path, which only the caller's user may
// connect to (mode 0600). A socket file left by a server that is gone is
// replaced; a live one is an error naming the path.
func Listen(path string) (net.Listener, error) {
	if err := PrepareSocketDir(path); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if Answers(path) {
		return nil, fmt.Errorf("listen on %s: a softroce server already answers there (stop it, or choose another socket with --socket)", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// Answers reports whether something accepts connections on path.
func Answers(path string) bool {
	c, err := net.Dial("unix", path)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// peerCred returns the credentials of the process at the other end of c.
func peerCred(c *net.UnixConn) (*unix.Ucred, bool) {
	if c == nil {
		return nil, false
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return cred, cerr == nil && err == nil
}

func credUID(c *unix.Ucred) int64 {
	if c == nil {
		return -1
	}
	return int64(c.Uid)
}

// uidAllowed reports whether a peer running as uid may use a server
// running as self: the same user, or root. The library checks the server
// the same way.
func uidAllowed(uid, self uint32) bool { return uid == self || uid == 0 }
