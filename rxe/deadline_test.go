package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// scanDeadline is what Deadline returned before the device kept its QPs'
// deadlines in a heap: the minimum over every live QP.
func scanDeadline(d *Device) qp.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := qp.Never
	for _, x := range d.qpList {
		e = min(e, x.q.Deadline())
	}
	return e
}

// TestDeadlineHeapMatchesScan drives several RC connections through a
// lossy network, so retransmit timers are armed, moved and cancelled on
// many QPs, and destroys the QP holding the earliest deadline, checking at
// every frame that the heap's Deadline equals a scan of all QPs.
func TestDeadlineHeapMatchesScan(t *testing.T) {
	const pairs, size = 6, 8 << 10
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	type conn struct {
		a, b *side
		wr   qp.SendWR
	}
	conns := make([]conn, pairs)
	for i := range conns {
		// Distinct ACK timeouts, so that deadlines rarely tie.
		a, b := newSide(t, da, qp.RC, 8), newSide(t, db, qp.RC, 8)
		a.timeout, b.timeout = uint8(10+i), uint8(10+i)
		connectSides(t, a, b, 1024)
		src, dst := make([]byte, size), make([]byte, size)
		am, err := da.RegMR(a.pd, src, 0)
		require.NoError(t, err)
		bm, err := db.RegMR(b.pd, dst, rwAll)
		require.NoError(t, err)
		conns[i] = conn{a: a, b: b, wr: qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: am.Addr(), Length: size, LKey: am.LKey()}},
			RemoteAddr: bm.Addr(), RKey: bm.RKey()}}
	}
	n := newNet(da, db)
	checks, k := 0, 0
	n.filter = func(from, to *Device, f []byte) bool {
		for _, d := range n.devs {
			require.Equal(t, scanDeadline(d), d.Deadline(), "frame %d", checks)
			checks++
		}
		k++
		return k%5 != 0 // drop every fifth frame
	}
	for round := 0; round < 4; round++ {
		for i := range conns {
			require.NoError(t, conns[i].a.qp.PostSend(&conns[i].wr))
		}
		n.pump(t, 1000, 20)
		for _, d := range n.devs {
			assert.Equal(t, scanDeadline(d), d.Deadline(), "round %d", round)
		}
	}
	assert.Greater(t, checks, 100)

	// Destroying the QP that holds the earliest deadline must not leave
	// its deadline behind. Sending without delivering arms the timers.
	for i := range conns {
		require.NoError(t, conns[i].a.qp.PostSend(&conns[i].wr))
	}
	da.Output(n.now, n.frames)
	da.mu.Lock()
	require.NotEmpty(t, da.timers, "some QP has a retransmit timer armed")
	holder := da.timers[0]
	da.mu.Unlock()
	before := da.Deadline()
	require.NoError(t, da.DestroyQP(holder))
	assert.Equal(t, scanDeadline(da), da.Deadline())
	assert.Less(t, before, da.Deadline(), "the destroyed QP's deadline no longer counts")
	n.pump(t, 1000, 1000)
	for _, d := range n.devs {
		assert.Equal(t, scanDeadline(d), d.Deadline())
	}
}
