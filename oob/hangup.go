package oob

import (
	"errors"
	"net"

	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPeerGone is the cause WatchHangup reports: the peer closed its end of
// the out-of-band connection (or the connection was reset) in the middle
// of a test, which is how perftest notices that the other side died.
var ErrPeerGone = errors.New("the peer went away (its out-of-band connection closed)")

// WatchHangup calls hangup once, when the peer of conn closes its end or
// resets the connection, until stop is called. It only peeks (MSG_PEEK),
// so the protocol's own reads see every byte; while unread data is
// pending it looks again every pendingRecheck. A conn without a file
// descriptor (net.Pipe) is not watched.
func WatchHangup(conn net.Conn, hangup func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		for {
			pending, gone := false, false
			err := rc.Read(func(fd uintptr) bool {
				n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				switch {
				case err == unix.EAGAIN:
					return false // not readable yet: wait in the poller
				case err != nil || n == 0:
					gone = true // reset, or end of file
				default:
					pending = true
				}
				return true
			})
			mu.Lock()
			quit := stopped
			mu.Unlock()
			if quit || (err != nil && !gone) {
				return
			}
			if gone {
				hangup()
				return
			}
			if pending {
				time.Sleep(pendingRecheck)
			}
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		// A deadline in the past wakes the watcher from the poller; the
		// protocol's reads get theirs back afterwards.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}

// pendingRecheck is how often WatchHangup peeks while the peer's data
// waits to be read: rare, and only between protocol steps.
const pendingRecheck = 100 * time.Millisecond
