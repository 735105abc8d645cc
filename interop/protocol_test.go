package interop

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

// fakeGuest speaks cmdloop.sh's side of the command protocol over conn: it
// announces READY, collects requests and answers them in reverse order of
// arrival once n have come (so answers arrive out of order), with status
// len(script) and output "ran: SCRIPT". "kill ID" answers ID with 137 at
// once. Noise lines are mixed in, as a console would.
// It stops when the test ends (the pipe is closed then).
func fakeGuest(t *testing.T, conn net.Conn, n int) {
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = conn.Close()
		<-done
	})
	go func() {
		defer close(done)
		serveFake(t, conn, n)
	}()
}

func serveFake(t *testing.T, conn net.Conn, n int) {
	w := bufio.NewWriter(conn)
	send := func(s string) {
		// A write fails only once the test has closed the pipe.
		_, _ = w.WriteString(s)
		_ = w.Flush()
	}
	send("garbage before ready\r\n=== RXEVM READY fake\n")
	sc := bufio.NewScanner(conn)
	type req struct{ id, script string }
	var pending []req
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "kill" {
			send(fmt.Sprintf("=== RES %s rc=137 %s\n", f[1], base64.StdEncoding.EncodeToString([]byte("killed"))))
			continue
		}
		if !assert.Len(t, f, 3, "request line %q", sc.Text()) {
			return
		}
		script, err := base64.StdEncoding.DecodeString(f[2])
		assert.NoError(t, err)
		if string(script) == "hang" {
			continue
		}
		pending = append(pending, req{f[0], string(script)})
		if len(pending) < n {
			continue
		}
		for i := len(pending) - 1; i >= 0; i-- {
			r := pending[i]
			send("=== RES bogus line\n")
			send(fmt.Sprintf("=== RES %s rc=%d %s\n", r.id, len(r.script), base64.StdEncoding.EncodeToString([]byte("ran: "+r.script))))
		}
		pending = nil
	}
}

// newPipeVM returns a VM whose command channel is one end of a pipe, with
// its reader running, and the other end.
func newPipeVM(t *testing.T) (*VM, net.Conn) {
	host, guest := net.Pipe()
	v := &VM{
		Name: "fake", conn: host, cancel: func() {}, console: &testenv.LockedBuffer{},
		exited: make(chan struct{}), waiting: map[int]chan Result{},
	}
	ready := make(chan struct{})
	go v.readLoop(ready)
	t.Cleanup(func() { _ = host.Close(); _ = guest.Close() })
	return v, guest
}

func TestCommandProtocolMatchesAnswersByID(t *testing.T) {
	v, guest := newPipeVM(t)
	const n = 5
	fakeGuest(t, guest, n)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]Result, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = v.Run(ctx, "echo "+strings.Repeat("x", i), 10*time.Second)
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		script := "echo " + strings.Repeat("x", i)
		require.NoError(t, errs[i])
		assert.Equal(t, len(script), results[i].Status, "status of %q", script)
		assert.Equal(t, "ran: "+script, results[i].Output)
	}
}

func TestCommandProtocolKill(t *testing.T) {
	v, guest := newPipeVM(t)
	fakeGuest(t, guest, 1)
	j, err := v.Start(context.Background(), "hang", 30*time.Second)
	require.NoError(t, err)
	j.Kill()
	r, err := j.Wait()
	require.NoError(t, err)
	assert.Equal(t, 137, r.Status)
	assert.Equal(t, "killed", r.Output)
}

func TestCommandProtocolChannelClosed(t *testing.T) {
	v, guest := newPipeVM(t)
	go func() {
		// Read the request, then hang up without answering.
		_, _ = bufio.NewReader(guest).ReadString('\n')
		_ = guest.Close()
	}()
	_, err := v.Run(context.Background(), "true", 30*time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "closed")
	_, err = v.Run(context.Background(), "true", time.Second)
	require.Error(t, err, "a VM whose channel closed refuses new commands")
}

func TestCommandProtocolContextCancel(t *testing.T) {
	v, guest := newPipeVM(t)
	fakeGuest(t, guest, 1)
	ctx, cancel := context.WithCancel(context.Background())
	j, err := v.Start(ctx, "hang", 30*time.Second)
	require.NoError(t, err)
	cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

func TestWireGID(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"10.77.1.2", "0000:0000:0000:0000:0000:ffff:0a4d:0102"},
		{"192.168.0.255", "0000:0000:0000:0000:0000:ffff:c0a8:00ff"},
	} {
		assert.Equal(t, tc.want, wireGID(netip.MustParseAddr(tc.ip)), tc.ip)
	}
}
