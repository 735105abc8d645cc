//go:build linux

package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// TestRuntimeOverUDPSockets runs two devices over kernel UDP sockets on
// loopback addresses: the sending side must build frames the kernel's
// headers agree with (fixed source port, IPv4 ID 0), the receiving side must
// check ICRCs without seeing the IPv4 ID.
func TestRuntimeOverUDPSockets(t *testing.T) {
	const port = 24791 // not 4791: leave that to a real rxe or softroce
	addrs := []netip.Addr{netip.MustParseAddr("127.0.77.2"), netip.MustParseAddr("127.0.77.3")}
	var devs []*Device
	for i, a := range addrs {
		l, err := link.ListenUDP(link.UDPOptions{Addr: netip.AddrPortFrom(a, port), PeerPort: port, MTU: 1500})
		if err != nil {
			t.Skipf("no UDP socket on %s: %v", a, err)
		}
		d, err := New(Config{Name: []string{"rxe0", "rxe1"}[i], Link: l, IPv4: a})
		require.NoError(t, err)
		require.NoError(t, d.Start())
		devs = append(devs, d)
	}
	defer func() {
		for _, d := range devs {
			assert.NoError(t, d.Close())
		}
	}()
	a, b := connect(t, devs[0], devs[1], qp.RC, 32, 1024)
	src, dst := make([]byte, 256<<10), make([]byte, 256<<10)
	pattern(src, 99)
	am, _ := devs[0].RegMR(a.pd, src, rwAll)
	bm, _ := devs[1].RegMR(b.pd, dst, rwAll)
	require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: uint32(len(src)), LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wc := waitWC(t, a.scq)
	require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
	// The ACK that completed the WRITE went through the kernel, which the
	// race detector does not see as synchronization: take b's lock, under
	// which b wrote dst, before reading it.
	devs[1].Counters()
	assert.Equal(t, src, dst)

	clear(src)
	require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRRead, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: uint32(len(src)), LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wc = waitWC(t, a.scq)
	require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, dst, src)

	for _, d := range devs {
		c := d.Counters()
		assert.Zero(t, c.BadICRC, "%s: every ICRC checks with the ID unknown", d.Name())
		assert.NotZero(t, c.ICRCIDUnknown, "%s", d.Name())
		assert.Zero(t, c.TxLinkErrors)
	}
}

// BenchmarkUDPWrite64KiB is RDMA WRITE bandwidth between two devices over
// kernel UDP sockets on loopback, at path MTU 1024 (1500-byte link).
func BenchmarkUDPWrite64KiB(b *testing.B) {
	const port = 24792
	var devs []*Device
	for _, a := range []string{"127.0.77.4", "127.0.77.5"} {
		ip := netip.MustParseAddr(a)
		l, err := link.ListenUDP(link.UDPOptions{Addr: netip.AddrPortFrom(ip, port), PeerPort: port, MTU: 1500, SocketBuffer: 4 << 20})
		if err != nil {
			b.Skipf("no UDP socket on %s: %v", a, err)
		}
		d, err := New(Config{Link: l, IPv4: ip})
		require.NoError(b, err)
		require.NoError(b, d.Start())
		b.Cleanup(func() { d.Close() })
		devs = append(devs, d)
	}
	benchWriteOn(b, devs[0], devs[1], 1024, 64<<10, 16)
}
