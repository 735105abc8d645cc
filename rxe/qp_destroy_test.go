package rxe

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// A QP destroyed as soon as its receive completion is seen still sends the
// ACK it owes for that message: the sender completes successfully instead of
// retrying into a QP that is gone until RETRY_EXC_ERR (seen with Debian's
// ibv_rc_pingpong on the drop-in library, whose client exits the moment its
// last receive completes).
func TestDestroyedQPSendsOwedAck(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	n := newNet(da, db)
	a := destroyOwingAck(t, n, da, db)

	got := n.poll(t, a.scq, 1)
	assert.Equal(t, qp.WCSuccess, got[0].Status, "a's SEND: %v", got[0])
	assert.Zero(t, da.Counters().RetryExceededErr)
}

// A device closed right after a QP was destroyed (softroce run's own device,
// when its program exits) still sends the ACK that QP owed for a message
// its program saw complete. Device b here has a runtime whose goroutines
// never run, so that only Close can send it.
func TestCloseSendsOwedAcks(t *testing.T) {
	la, lb := link.NewMemPair(1500)
	da, err := New(Config{Name: "rxe0", Link: la, MAC: macA, IPv4: ipA})
	require.NoError(t, err)
	db, err := New(Config{Name: "rxe1", Link: lb, MAC: macB, IPv4: ipB})
	require.NoError(t, err)
	require.True(t, db.rt.CompareAndSwap(nil, newRuntime(db)))
	n := newNet(da, db)
	a := destroyOwingAck(t, n, da, db)
	require.NoError(t, db.Close())

	got := make(chan link.Frame, 1)
	go func() {
		frames := []link.Frame{{Data: make([]byte, 2048)}}
		if k, err := la.Recv(frames); err == nil && k == 1 {
			got <- frames[0]
		}
	}()
	select {
	case f := <-got:
		da.HandleFrame(n.now, f)
	case <-time.After(10 * time.Second): // only keeps a broken Close from hanging the run
		t.Fatal("the closed device never sent the ACK its destroyed QP owed")
	}
	wc := make([]qp.WC, 1)
	require.Equal(t, 1, a.scq.Poll(wc))
	assert.Equal(t, qp.WCSuccess, wc[0].Status, "a's SEND: %v", wc[0])
	la.Close()
}

// destroyOwingAck connects an RC QP on da to one on db, carries a SEND from
// a to b by hand (so that b's ACK is still unsent when b's program sees the
// message complete), and destroys b's QP. It returns a's side, whose SEND
// waits for that ACK.
func destroyOwingAck(t *testing.T, n *net, da, db *Device) *side {
	t.Helper()
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	am, err := da.RegMR(a.pd, make([]byte, 64), qp.AccessLocalWrite)
	require.NoError(t, err)
	bm, err := db.RegMR(b.pd, make([]byte, 64), qp.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, b.qp.PostRecv(&qp.RecvWR{ID: 2, SGL: []qp.SGE{{Addr: bm.Addr(), Length: 64, LKey: bm.LKey()}}}))
	require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: 64, LKey: am.LKey()}}}))
	k, _ := da.Output(n.now, n.frames)
	require.Equal(t, 1, k)
	db.HandleFrame(n.now, n.frames[0])
	wc := make([]qp.WC, 1)
	require.Equal(t, 1, b.rcq.Poll(wc))
	require.Equal(t, qp.WCSuccess, wc[0].Status)
	require.NoError(t, db.DestroyQP(b.qp))
	return a
}
