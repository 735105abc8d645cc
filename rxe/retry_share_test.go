package rxe

import (
	"fmt"
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
	healthy, total := retryStorm(t, 200, 40000, 0)
	require.Greater(t, total, 30000, "the link was busy")
	share := float64(healthy) / float64(total)
	t.Logf("streaming pair: %d of %d frames (%.0f%%)", healthy, total, 100*share)
	assert.Greater(t, share, 0.6, "the streaming pair's share of the link")
	assert.Positive(t, total-healthy, "the retrying QPs still retry")
}

// TestRNRRetryBudget: with a budget of 20,000 RNR retries a second (the
// default on the real clock), the same 200 QPs retry about 400 times in 20
// ms (beside their 200 first tries) instead of taking a quarter of the
// link, and the streaming pair keeps nearly all of it; the stuck QPs still
// retry.
func TestRNRRetryBudget(t *testing.T) {
	healthy, total := retryStorm(t, 200, 20000, DefaultRNRRetryRate)
	retries := total - healthy
	t.Logf("streaming pair: %d of %d frames; %d retries", healthy, total, retries)
	assert.Positive(t, retries, "the stuck QPs still retry")
	assert.LessOrEqual(t, retries, 20000*DefaultRNRRetryRate/1_000_000+rnrBurst+200, "retries within the budget (and each QP's first try)")
	assert.Greater(t, float64(healthy)/float64(total), 0.95)
}

// BenchmarkRetryStormShare reports the streaming pair's share of the link
// (percent of frames) beside thousands of QPs retrying forever, as
// TestRetryStormShare sets it up:
//
//	go test ./rxe -run '^$' -bench RetryStormShare -benchtime 1x
func BenchmarkRetryStormShare(b *testing.B) {
	for _, stuck := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("stuck=%d", stuck), func(b *testing.B) {
			var healthy, total int
			for range b.N {
				healthy, total = retryStorm(b, stuck, 40000, 0)
			}
			b.ReportMetric(100*float64(healthy)/float64(total), "%link")
		})
	}
}

// retryStorm runs stuck QPs whose receivers never post a receive (RNR NAK,
// 10 us timer, rnr_retry 7: they retry forever) beside one pair streaming
// WRITEs, for steps microseconds of virtual time on a link that carries one
// frame per microsecond, and counts the frames the device sent in all and
// for the streaming pair.
// rnrRate is device A's Config.RNRRetryRate (0: none on virtual time).
func retryStorm(t testing.TB, stuck, steps, rnrRate int) (healthy, total int) {
	da, err := New(Config{Name: "rxe0", MAC: macA, IPv4: ipA, MTU: 1500, Seed: 1 + uint64(macA[5]), RNRRetryRate: rnrRate})
	require.NoError(t, err)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
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
	wcs := make([]qp.WC, 16)
	var now qp.Time
	for step := 0; step < steps; step++ {
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
	return healthy, total
}
