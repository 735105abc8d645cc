package rxe

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// BenchmarkPacedWrite measures how well the pacer holds a DCQCN rate on
// the real clock: two running devices on an in-memory link, the sender's
// QP set to a rate by a CNP (rate_to_set_on_first_cnp, no increases), 64
// KiB WRITEs kept in flight. It reports the payload rate achieved against
// the rate set (goodput/rate: a little below 1 is right, as the rate
// counts headers too; the pacer sends up to 1 ms ahead of its slots, as
// `softroce --dcqcn` sets it on real links).
func BenchmarkPacedWrite(b *testing.B) {
	for _, mbps := range []int64{200, 1000, 5000} {
		b.Run(fmt.Sprintf("%dMbps", mbps), func(b *testing.B) {
			cc := DefaultCongestion()
			cc.Enable()
			cc.Engine.Burst = qp.Millisecond
			cc.Engine.DCQCN.RateToSetOnFirstCNP = mbps * 1_000_000
			cc.Engine.DCQCN.RPGTimeReset = 3600 * qp.Second
			cc.Engine.DCQCN.RPGByteReset = 0
			la, lb := link.NewMemPair(4096 + 128)
			da, err := New(Config{Name: "rxe0", Link: la, IPv4: ipA, Congestion: &cc})
			require.NoError(b, err)
			db, err := New(Config{Name: "rxe1", Link: lb, IPv4: ipB})
			require.NoError(b, err)
			require.NoError(b, da.Start())
			require.NoError(b, db.Start())
			defer da.Close()
			defer db.Close()
			const size = 64 << 10
			w := newWriter(b, da, db, 4096, size, 8, 0)
			da.mu.Lock()
			da.qps.get(w.a.qp.QPN()).q.ReceiveCNP(1)
			da.mu.Unlock()
			b.SetBytes(size)
			b.ResetTimer()
			w.run(b, b.N)
			b.StopTimer()
			got := float64(b.N) * size * 8 / b.Elapsed().Seconds()
			b.ReportMetric(got/1e6, "Mb/s")
			b.ReportMetric(got/float64(mbps*1_000_000), "goodput/rate")
		})
	}
}
