package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// benchWrite keeps depth RDMA WRITEs of size bytes in flight between two
// running devices on an in-memory link, one b.N iteration per completed
// WRITE, waiting on the CQ's notification channel rather than spinning.
func benchWrite(b *testing.B, size, depth int) {
	da, db := startPair(b, 4096+128)
	benchWriteOn(b, da, db, 4096, size, depth)
}

func benchWriteOn(b *testing.B, da, db *Device, mtu qp.MTU, size, depth int) {
	w := newWriter(b, da, db, mtu, size, depth, 0)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	w.run(b, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	if size >= 4096 {
		b.ReportMetric(float64(b.N)*float64(size)/b.Elapsed().Seconds()/1e9, "GB/s")
	}
}

// writer keeps up to depth signaled RDMA WRITEs of size bytes in flight on
// an RC connection between two running devices.
type writer struct {
	a     *side
	wr    qp.SendWR
	depth int
	wcs   []qp.WC
}

// newWriter connects an RC QP pair for w. A non-zero timeout is the local
// ACK timeout code of the sender (the default is 14, 67 ms).
func newWriter(b *testing.B, da, db *Device, mtu qp.MTU, size, depth int, timeout uint8) *writer {
	a := newSide(b, da, qp.RC, 2*depth)
	if timeout != 0 {
		a.timeout = timeout
	}
	a, r := connectSides(b, a, newSide(b, db, qp.RC, 2*depth), mtu)
	src, dst := make([]byte, size), make([]byte, size)
	am, err := da.RegMR(a.pd, src, 0)
	require.NoError(b, err)
	bm, err := db.RegMR(r.pd, dst, rwAll)
	require.NoError(b, err)
	w := &writer{a: a, depth: depth, wcs: make([]qp.WC, 64),
		wr: qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: am.Addr(), Length: uint32(size), LKey: am.LKey()}},
			RemoteAddr: bm.Addr(), RKey: bm.RKey()}}
	if size <= MaxInline {
		w.wr.Flags |= qp.SendInline
		w.wr.Inline = src
	}
	return w
}

// run performs n WRITEs and returns when all have completed, waiting on the
// CQ's notification channel rather than spinning.
func (w *writer) run(b *testing.B, n int) {
	posted, done := 0, 0
	for done < n {
		for posted-done < w.depth && posted < n {
			if err := w.a.qp.PostSend(&w.wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		k := w.a.scq.Poll(w.wcs)
		if k == 0 {
			_ = w.a.scq.Arm(false)
			if k = w.a.scq.Poll(w.wcs); k == 0 {
				<-w.a.scq.C()
				continue
			}
		}
		for _, wc := range w.wcs[:k] {
			if wc.Status != qp.WCSuccess {
				b.Fatalf("write: %s", wc.Status)
			}
		}
		done += k
	}
}

// BenchmarkWrite64KiB is bandwidth: 64 KiB RDMA WRITEs at path MTU 4096.
func BenchmarkWrite64KiB(b *testing.B) { benchWrite(b, 64<<10, 16) }

// BenchmarkWrite8B is the operation rate of small (inline) RDMA WRITEs.
func BenchmarkWrite8B(b *testing.B) { benchWrite(b, 8, 64) }

// BenchmarkCoreWrite64KiB measures the device core alone: two devices, no
// link or goroutines, frames moved by the benchmark loop (as the simulator
// does).
func BenchmarkCoreWrite64KiB(b *testing.B) {
	const size = 64 << 10
	da := newDev(b, "rxe0", macA, ipA, netip.Addr{}, 9000)
	db := newDev(b, "rxe1", macB, ipB, netip.Addr{}, 9000)
	a, r := connect(b, da, db, qp.RC, 32, 4096)
	src, dst := make([]byte, size), make([]byte, size)
	am, _ := da.RegMR(a.pd, src, 0)
	bm, _ := db.RegMR(r.pd, dst, rwAll)
	wr := qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: am.Addr(), Length: size, LKey: am.LKey()}},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}
	n := newNet(da, db)
	wcs := make([]qp.WC, 16)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.qp.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		n.pump(b, 1000, 1000)
		if k := a.scq.Poll(wcs); k != 1 || wcs[0].Status != qp.WCSuccess {
			b.Fatalf("write: %d completions, %s", k, wcs[0].Status)
		}
	}
}
