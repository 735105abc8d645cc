package rsocket

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzConnData: the peer's connection data never panics the decoder, and
// what decodes encodes back to the same 40 bytes.
func FuzzConnData(f *testing.F) {
	f.Add(connData{flags: flagIOMap, credits: 384, targetSGL: sge{addr: 0x1000, key: 7, length: 2},
		dataBuffer: sge{addr: 0x2000, key: 8, length: 65536}}.encode())
	f.Add([]byte{1})
	f.Add(make([]byte, connDataLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeConnData(b)
		if err != nil {
			return
		}
		out := c.encode()
		want := append([]byte(nil), b[:connDataLen]...)
		want[4], want[5], want[6] = 0, 0, 0 // reserved: not kept
		require.Equal(t, want, out)
	})
}

// FuzzPeerMessages feeds a connection the immediates (and write lengths) a
// peer may send, in any order: no panic, the receive queue and ring stay
// in bounds, and a connection that failed stays failed.
func FuzzPeerMessages(f *testing.F) {
	a, _ := pair(f)
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 0, 0x80, 0, 1, 0x80, 0, 0, 0, 16})
	f.Add([]byte{0xe0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x1f, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := newConn(a, &Options{QueueDepth: minQueue, RecvBuffer: 2 * sndLowat, SendBuffer: 2 * sndLowat})
		require.NoError(t, err)
		defer c.release()
		c.state = stConnected | stReadable | stWritable
		c.remoteSGL = sge{addr: 0x1000, key: 1, length: 2}
		c.tgtNext = 1
		c.mu.Lock()
		defer c.mu.Unlock()
		for len(b) >= 8 {
			m, n := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
			b = b[8:]
			failed := c.failed != nil
			c.recvMsg(m, n)
			queued := (c.rtail - c.rhead + len(c.rmsg)) % len(c.rmsg)
			require.Less(t, queued, len(c.rmsg))
			for i := c.rhead; i != c.rtail; i = (i + 1) % len(c.rmsg) {
				require.LessOrEqual(t, c.rmsg[i], c.rmr.Len()/2)
			}
			if failed {
				require.Error(t, c.failed)
				require.Zero(t, c.state&stConnected)
			}
		}
	})
}
