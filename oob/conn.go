package oob

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// dialRetry is how long a client keeps trying a server that is not
// listening yet, so that a client started right after its server (a script,
// a test) does not lose the race; the C tools try once.
const dialRetry = 5 * time.Second

// Dial connects to the server's out-of-band port, retrying a refused
// connection for dialRetry.
func Dial(cctx context.Context, peer string, port int) (net.Conn, error) {
	addr := net.JoinHostPort(peer, strconv.Itoa(port))
	deadline := time.Now().Add(dialRetry)
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(cctx, 30*time.Second)
		conn, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) || cctx.Err() != nil {
			return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Accept listens on every address at port, as the C tools do
// (AI_PASSIVE), and returns the first connection.
func Accept(cctx context.Context, port int) (net.Conn, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(cctx, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(cctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return conn, nil
}
