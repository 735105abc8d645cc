package rxe

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// BenchmarkRetryStormShareUDP is BenchmarkRetryStormShare on the real clock:
// two running devices on UDP loopback, one pair streaming 64 KiB WRITEs,
// measured alone and then beside stuck QPs whose receivers never post a
// receive (RNR NAK timer 10 us, rnr_retry 7: they retry forever, each as
// fast as the device's timers allow), in the same run. It reports both
// rates and their ratio:
//
//	go test ./rxe -run '^$' -bench RetryStormShareUDP -benchtime 400x
func BenchmarkRetryStormShareUDP(b *testing.B) {
	for _, stuck := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("stuck=%d", stuck), func(b *testing.B) {
			var devs [2]*Device
			for i, a := range loBenchAddrs {
				l, err := link.ListenUDP(link.UDPOptions{Addr: netip.AddrPortFrom(a, loBenchPort+10), PeerPort: loBenchPort + 10,
					SocketBuffer: loBenchSockBuf})
				if err != nil {
					b.Skipf("no UDP socket on %s: %v", a, err)
				}
				d, err := New(Config{Name: fmt.Sprintf("rxe%d", i), Link: l, IPv4: a})
				require.NoError(b, err)
				require.NoError(b, d.Start())
				b.Cleanup(func() { d.Close() })
				devs[i] = d
			}
			w := newWriter(b, devs[0], devs[1], 1024, 64<<10, 16, 18)
			w.run(b, 64) // warm up
			t0 := time.Now()
			w.run(b, b.N)
			alone := float64(b.N) * (64 << 10) / time.Since(t0).Seconds() / 1e6

			src := make([]byte, 64)
			for range stuck {
				a, _ := connect(b, devs[0], devs[1], qp.RC, 4, 1024)
				m, err := devs[0].RegMR(a.pd, src, 0)
				require.NoError(b, err)
				require.NoError(b, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled,
					SGL: []qp.SGE{{Addr: m.Addr(), Length: 64, LKey: m.LKey()}}}))
			}
			time.Sleep(100 * time.Millisecond) // the storm under way
			before := devs[0].Counters().RcvdRNRErr
			b.ResetTimer()
			t0 = time.Now()
			w.run(b, b.N)
			crowded := float64(b.N) * (64 << 10) / time.Since(t0).Seconds() / 1e6
			b.StopTimer()
			rnr := devs[0].Counters().RcvdRNRErr - before
			require.Positive(b, rnr, "the stuck QPs retried meanwhile")
			b.ReportMetric(alone, "alone-MB/s")
			b.ReportMetric(crowded, "crowded-MB/s")
			b.ReportMetric(crowded/alone, "share")
		})
	}
}
