package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/oob"
)

// tcpTap relays one connection from a listener to target and records what
// flows each way.
type tcpTap struct {
	ln       net.Listener
	mu       sync.Mutex
	up, down bytes.Buffer // client to server, server to client
	done     chan struct{}
}

func newTCPTap(t *testing.T, target string) *tcpTap {
	ln, err := net.Listen("tcp", "127.0.88.6:0")
	require.NoError(t, err)
	tap := &tcpTap{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(tap.done)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		var s net.Conn
		for deadline := time.Now().Add(10 * time.Second); ; {
			if s, err = net.Dial("tcp", target); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return
		}
		defer s.Close()
		var wg sync.WaitGroup
		relay := func(dst, src net.Conn, rec *bytes.Buffer) {
			defer wg.Done()
			buf := make([]byte, 4096)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					tap.mu.Lock()
					rec.Write(buf[:n])
					tap.mu.Unlock()
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if tc, ok := dst.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
					return
				}
			}
		}
		wg.Add(2)
		go relay(s, c, &tap.up)
		go relay(c, s, &tap.down)
		wg.Wait()
	}()
	return tap
}

func (tap *tcpTap) port() string { return strconv.Itoa(tap.ln.Addr().(*net.TCPAddr).Port) }

// wireReader takes perftest's messages off a recorded stream.
type wireReader struct {
	t *testing.T
	r *bytes.Reader
}

func (w *wireReader) next(n int) []byte {
	w.t.Helper()
	b := make([]byte, n)
	_, err := io.ReadFull(w.r, b)
	require.NoError(w.t, err, "stream ends before a %d-byte message", n)
	return b
}

func (w *wireReader) record() oob.PerftestDest {
	w.t.Helper()
	d, err := oob.ParsePerftestDest(w.next(oob.KeyMsgSizeGID), true)
	require.NoError(w.t, err)
	return d
}

// TestPerfWireSequence records the out-of-band streams of a write bw and a
// write lat run, through a relay, and checks them message by message
// against perftest 6.06's sequence: versions, system data, MTU, the records
// twice (lat: three times) and a barrier, then (bw) a barrier, the reports,
// and the closing hand shake and "done" (write lat closes without them).
func TestPerfWireSequence(t *testing.T) {
	bin := buildSoftroce(t)
	for i, lat := range []bool{false, true} {
		name := "bw"
		if lat {
			name = "lat"
		}
		t.Run(name, func(t *testing.T) {
			srvPort := strconv.Itoa(28760 + i)
			tap := newTCPTap(t, "127.0.88.4:"+srvPort)
			args := []string{"perf", "write", "-n", "20", "-s", "4096"}
			if lat {
				args = append(args, "--lat")
			}
			srv, cli := runPeers(t, bin, 60*time.Second,
				append(append([]string{}, args...), "--addr", "127.0.88.4", "-p", srvPort),
				append(append([]string{}, args...), "--addr", "127.0.88.5", "-p", tap.port(), "127.0.88.6"))
			require.Equal(t, 0, cli.code, "client: %s%s", cli.stdout, cli.stderr)
			require.Equal(t, 0, srv.code, "server: %s%s", srv.stdout, srv.stderr)
			<-tap.done

			for dir, stream := range map[string][]byte{"up": tap.up.Bytes(), "down": tap.down.Bytes()} {
				w := &wireReader{t, bytes.NewReader(stream)}
				assert.Equal(t, append([]byte("6.06"), make([]byte, 12)...), w.next(16), dir)
				assert.Equal(t, uint32(os.Getpagesize()), binary.BigEndian.Uint32(w.next(4)), dir+": cycle buffer")
				assert.Equal(t, uint32(64), binary.BigEndian.Uint32(w.next(4)), dir+": cache line")
				assert.Equal(t, []byte("3\x00"), w.next(2), dir+": MTU 1024")
				first := w.record()
				assert.NotZero(t, first.QPN, dir)
				assert.Equal(t, netip4mapped(t, dir), first.GIDAddr().String(), dir)
				assert.Equal(t, first, w.record(), dir+": second round")
				if lat {
					// write_lat.c opens with one more round: the
					// first record alone, then the per-QP one.
					assert.Equal(t, first, w.record(), dir+": third round")
				}
				assert.Equal(t, first, w.record(), dir+": barrier after RTR")
				if lat {
					// write_lat.c ends without ctx_close_connection.
					assert.Zero(t, w.r.Len(), dir+": nothing after the barrier")
					continue
				}
				assert.Equal(t, first, w.record(), dir+": barrier before the reports")
				size := binary.BigEndian.Uint64(w.next(8))
				iters := binary.BigEndian.Uint64(w.next(8))
				peak := math.Float64frombits(binary.BigEndian.Uint64(w.next(8)))
				avg := math.Float64frombits(binary.BigEndian.Uint64(w.next(8)))
				rate := math.Float64frombits(binary.BigEndian.Uint64(w.next(8)))
				// The half-duplex server has no measurement of its own
				// (perftest sends an unset report; softroce zeros).
				if dir == "up" {
					assert.Equal(t, uint64(4096), size, "the client reports its size")
					assert.Equal(t, uint64(20), iters, "the client reports its iterations")
					assert.Greater(t, avg, 0.0)
					assert.GreaterOrEqual(t, peak*1.0001, avg)
					assert.Greater(t, rate, 0.0)
				}
				assert.Equal(t, first, w.record(), dir+": closing hand shake")
				assert.Equal(t, []byte("done\x00"), w.next(5), dir)
				assert.Zero(t, w.r.Len(), dir+": nothing after done")
			}
		})
	}
}

// netip4mapped returns the GID each direction's sender advertises.
func netip4mapped(_ *testing.T, dir string) string {
	if dir == "up" {
		return "::ffff:127.0.88.5"
	}
	return "::ffff:127.0.88.4"
}
