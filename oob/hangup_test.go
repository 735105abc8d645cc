package oob

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	b = <-acc
	require.NotNil(t, b)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestWatchHangup: a peer that closes is noticed; data the peer sends is
// left for the protocol to read, whole, and does not end the watch; after
// stop the connection reads as before.
func TestWatchHangup(t *testing.T) {
	a, b := tcpPair(t)
	gone := make(chan struct{})
	stop := WatchHangup(a, func() { close(gone) })
	_, err := b.Write([]byte("hello"))
	require.NoError(t, err)
	time.Sleep(2 * pendingRecheck)
	buf := make([]byte, 5)
	_, err = io.ReadFull(a, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf), "the watcher consumed nothing")
	select {
	case <-gone:
		t.Fatal("hangup with the peer alive")
	default:
	}
	require.NoError(t, b.Close())
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's close went unnoticed")
	}
	stop()

	c, d := tcpPair(t)
	stop = WatchHangup(c, func() { t.Error("hangup after stop") })
	stop()
	_, err = d.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf[:1])
	require.NoError(t, err, "stop left a deadline behind")
	d.Close()
	time.Sleep(2 * pendingRecheck)
}
