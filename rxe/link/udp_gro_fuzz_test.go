//go:build linux

package link

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// FuzzUDPGRORunAfterSwitch sends a GSO run of any datagram size and count
// to a link whose GRO is switched off after the run was queued, with any
// run size remembered from before (the guess the link then cuts the run
// at, udp_recv.go), then a marker datagram. Whatever the sizes, the link
// must not panic, must hand out nothing longer than its MTU, and must
// still deliver the marker: a wrong guess costs only the run.
func FuzzUDPGRORunAfterSwitch(f *testing.F) {
	// Sizes 1-1472 and counts 1-40 (size-1 and count-1 wrapped); a guess
	// of 0 is no size remembered.
	f.Add(uint16(199), uint8(14), uint16(200))  // 15 of 200, the guess right
	f.Add(uint16(199), uint8(14), uint16(1400)) // the guess too long
	f.Add(uint16(199), uint8(14), uint16(7))    // the guess tiny
	f.Add(uint16(1399), uint8(39), uint16(200)) // as many as a run can hold
	f.Add(uint16(0), uint8(0), uint16(0))
	f.Fuzz(func(t *testing.T, size uint16, count uint8, guess uint16) {
		size = 1 + size%1472
		count = 1 + count%40
		guess %= 1473
		if int(size)*int(count) > 0xFFFF-8-20 {
			count = uint8((0xFFFF - 28) / int(size))
		}
		// Any free port: fuzzing runs workers side by side.
		var b *UDP
		var err error
		for try := 0; b == nil; try++ {
			b, err = ListenUDP(UDPOptions{Addr: netip.AddrPortFrom(udpB, uint16(20000+rand.IntN(30000))), MTU: 1500, Batch: 8})
			require.True(t, err == nil || try < 20, "no free port: %v", err)
		}
		defer b.Close()
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpA, 0)),
			net.UDPAddrFromAddrPort(b.local))
		require.NoError(t, err)
		defer c.Close()
		raw, err := c.SyscallConn()
		require.NoError(t, err)
		setInt := func(conn interface {
			Control(func(uintptr)) error
		}, level, opt, v int) error {
			var serr error
			require.NoError(t, conn.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }))
			return serr
		}
		if setInt(raw, unix.IPPROTO_UDP, unix.UDP_SEGMENT, int(size)) != nil {
			t.Skip("no UDP_SEGMENT")
		}
		// GRO on, as adaptGRO turns it on; the run is queued coalesced.
		r := &b.rx
		r.initGRO(len(r.hdrs), r.mtu)
		r.gro = true
		if setInt(b.raw, unix.IPPROTO_UDP, unix.UDP_GRO, 1) != nil {
			t.Skip("no UDP_GRO")
		}
		r.sockGRO = true
		_, err = c.Write(make([]byte, int(size)*int(count)))
		require.NoError(t, err)
		// Switched off before the run is read, with a remembered size.
		require.NoError(t, setInt(b.raw, unix.IPPROTO_UDP, unix.UDP_GRO, 0))
		r.sockGRO, r.nextChunk = false, int(guess)
		require.NoError(t, setInt(raw, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 0))
		marker := []byte("marker")
		_, err = c.Write(marker)
		require.NoError(t, err)

		deadline := time.AfterFunc(10*time.Second, func() { b.Close() })
		defer deadline.Stop()
		frames := make([]Frame, 16)
		maxLen := b.ipUDPLen() + 14 + b.MTU()
		got := 0
		for {
			n, err := b.Recv(frames)
			require.NoError(t, err, "the marker never came")
			for _, fr := range frames[:n] {
				require.LessOrEqual(t, len(fr.Data), maxLen)
				if len(fr.Data) >= len(marker) && string(fr.Data[len(fr.Data)-len(marker):]) == string(marker) {
					if guess == size && int(size)*int(count) > b.MTU()-b.ipUDPLen() {
						// The remembered size is the run's and the run is
						// longer than one datagram can be: every datagram
						// of it arrives (it was dropped whole before). A
						// shorter run cannot be told from one datagram.
						require.Equal(t, int(count), got, "the run's datagrams")
						require.Zero(t, b.Stats().RxTruncated)
					}
					return
				}
				got++
			}
		}
	})
}
