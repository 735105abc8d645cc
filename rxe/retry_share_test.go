package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// TestRetryStormShare: 200 QPs whose receivers never post a receive retry
// forever (RNR NAK, 10 us timer, rnr_retry 7) beside one pair streaming
// WRITEs, over a link that carries one frame per microsecond of virtual
// time. The QPs retrying take at most one output turn in retryShare
// however many they are, so the streaming pair keeps most of the link; with
// plain round robin it got one frame in about 200.
func TestRetryStormShare(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	const stuck = 200
	src := make([]byte, 4096)
	for i := 0; i < stuck; i++ {
		a, _ := connect(t, da, db, qp.RC, 4, 1024)
		m, err := da.RegMR(a.pd, src, 0)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: m.Addr(), Length: 64, LKey: m.LKey()}}}))
	}
	ha, hb := connect(t, da, db, qp.RC, 64, 1024)
	hm, err := da.RegMR(ha.pd, make([]byte, 64<<10), 0)
	require.NoError(t, err)
	rm, err := db.RegMR(hb.pd, make([]byte, 64<<10), rwAll)
	require.NoError(t, err)
	post := func() {
		require.NoError(t, ha.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: hm.Addr(), Length: 4096, LKey: hm.LKey()}},
			RemoteAddr: rm.Addr(), RKey: rm.RKey()}))
	}
	for i := 0; i < 32; i++ {
		post()
	}

	frames := newNet().frames
	one := frames[:1]
	healthy, total := 0, 0
	wcs := make([]qp.WC, 16)
	var now qp.Time
	for step := 0; step < 40000; step++ {
		now += 1000 // 1 us: one frame from A, and B's answers
		da.Tick(now)
		db.Tick(now)
		if k, _ := da.Output(now, one); k == 1 {
			var fr packetFrame
			require.NoError(t, parse(one[0].Data, &fr))
			total++
			tr := fr.Transport // BTH: the destination QP in bytes 5..7
			if uint32(tr[5])<<16|uint32(tr[6])<<8|uint32(tr[7]) == hb.qp.QPN() {
				healthy++
			}
			db.HandleFrame(now, one[0])
		}
		for {
			k, more := db.Output(now, frames)
			for i := 0; i < k; i++ {
				da.HandleFrame(now, frames[i])
			}
			if !more {
				break
			}
		}
		for _, wc := range wcs[:ha.scq.Poll(wcs)] {
			require.Equal(t, qp.WCSuccess, wc.Status)
			post()
		}
	}
	require.Greater(t, total, 30000, "the link was busy")
	share := float64(healthy) / float64(total)
	t.Logf("streaming pair: %d of %d frames (%.0f%%)", healthy, total, 100*share)
	assert.Greater(t, share, 0.6, "the streaming pair's share of the link")
	assert.Positive(t, total-healthy, "the retrying QPs still retry")
}
