package verbsapi

import (
	"context"
	"testing"
)

// BenchmarkWriteRoundTrip measures a signaled 64-byte RDMA WRITE from post
// to polled completion between two devices on a mem link with the real-time
// runtime: the verbs layer's overhead on top of the device's round trip.
func BenchmarkWriteRoundTrip(b *testing.B) {
	benchRoundTrip(b, 64)
}

// BenchmarkWrite64K is the same with 64 KiB writes (64 packets each).
func BenchmarkWrite64K(b *testing.B) { benchRoundTrip(b, 64<<10) }

func benchRoundTrip(b *testing.B, size int) {
	ca, cb := startPairTB(b)
	x, y := newHostTB(b, ca, hostOpts{}), newHostTB(b, cb, hostOpts{})
	ex, err := x.qp.Endpoint(1, 0)
	if err != nil {
		b.Fatal(err)
	}
	ey, err := y.qp.Endpoint(1, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := x.qp.Connect(0, ey, nil); err != nil {
		b.Fatal(err)
	}
	if err := y.qp.Connect(0, ex, nil); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, size)
	mr, err := x.pd.RegMR(buf, AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := y.pd.RegMR(make([]byte, size), AccessAll)
	if err != nil {
		b.Fatal(err)
	}
	wr := &SendWR{Opcode: WRWrite, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, size)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wc := make([]WC, 1)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := x.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if _, err := x.scq.PollWait(ctx, wc); err != nil {
			b.Fatal(err)
		}
		if wc[0].Status != WCSuccess {
			b.Fatalf("status %s", wc[0].Status)
		}
	}
}
