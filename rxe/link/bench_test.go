package link

import (
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/ipv4"
)

// Benchmarks move 4 KiB frames from a sender goroutine to the benchmark
// loop, which receives them; b.N counts received frames, so ns/op is the
// time per delivered frame and MB/s the delivered rate. Senders outpace
// receivers, so links drop (counted): the receive side is what is measured.

const benchPayload = 4096

// benchLink runs the benchmark over tx -> rx, with frame sent in batches.
func benchLink(b *testing.B, tx, rx Link, frame []byte, batch int, bytesPerFrame int) {
	out := make([]Frame, batch)
	for i := range out {
		out[i].Data = frame
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tx.Send(out); err != nil {
				return
			}
		}
	}()
	in := make([]Frame, batch)
	b.SetBytes(int64(bytesPerFrame))
	b.ReportAllocs()
	b.ResetTimer()
	for got := 0; got < b.N; {
		n, err := rx.Recv(in)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	close(stop)
	rx.Close()
	tx.Close()
	wg.Wait()
}

// BenchmarkMemLink4K: a 4 KiB RoCE frame (4096-byte payload) over a Mem pair.
func BenchmarkMemLink4K(b *testing.B) {
	a, c := NewMemPair(benchPayload + 128)
	f := roceFrame(b, c.MAC(), a.MAC(), ip4a, ip4b, benchPayload, 1)
	benchLink(b, a, c, f, 32, len(f))
	sent, dropped := a.Stats().Sent, c.Stats().QueueDrop
	b.ReportMetric(float64(sent)/float64(sent+dropped)*100, "%queued")
}

// BenchmarkMemLink4KLossless is BenchmarkMemLink4K with the sender held to
// the ring's size by credits the receiver returns (as a QP window would),
// so that no frame is dropped and the sender does not burn a CPU on drops.
func BenchmarkMemLink4KLossless(b *testing.B) {
	const batch = 32
	a, c := NewMemPair(benchPayload + 128)
	f := roceFrame(b, c.MAC(), a.MAC(), ip4a, ip4b, benchPayload, 1)
	out := make([]Frame, batch)
	for i := range out {
		out[i].Data = f
	}
	var credits atomic.Int64
	credits.Store(DefaultMemQueueLen - batch) // the receiver holds one batch
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for credits.Load() < batch {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
			}
			credits.Add(-batch)
			if _, err := a.Send(out); err != nil {
				return
			}
		}
	}()
	in := make([]Frame, batch)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	b.ResetTimer()
	for got := 0; got < b.N; {
		n, err := c.Recv(in)
		if err != nil {
			b.Fatal(err)
		}
		credits.Add(int64(n))
		got += n
	}
	b.StopTimer()
	close(stop)
	c.Close()
	a.Close()
	wg.Wait()
	if d := c.Stats().QueueDrop; d != 0 {
		b.Fatalf("%d frames dropped", d)
	}
}

// BenchmarkUDPLink4K: the same frame (UDP payload 4096+28+4 bytes) over two
// UDP links on loopback; bytes counted are UDP payload bytes.
func BenchmarkUDPLink4K(b *testing.B) {
	o := UDPOptions{MTU: 9000, SocketBuffer: 4 << 20}
	o.Addr = netip.AddrPortFrom(udpA, 64791)
	o.PeerPort = 64792
	tx := listenUDP(b, o)
	o.Addr = netip.AddrPortFrom(udpB, 64792)
	rx := listenUDP(b, o)
	f := udpFrame(b, tx, udpB, benchPayload-12-4, 1, 0, 64) // transport = 4096 bytes
	benchLink(b, tx, rx, f, 32, benchPayload)
	b.ReportMetric(float64(rx.Stats().RxFrames)/float64(tx.Stats().TxFrames)*100, "%delivered")
}

// BenchmarkRawUDP4K is the baseline for BenchmarkUDPLink4K: plain
// sendmmsg/recvmmsg (x/net/ipv4 batches of 32) of 4096-byte datagrams
// between two sockets on the same addresses, with nothing done per packet.
func BenchmarkRawUDP4K(b *testing.B) {
	listen := func(a netip.Addr, port uint16) *net.UDPConn {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err != nil {
			b.Fatal(err)
		}
		c.SetReadBuffer(4 << 20)
		c.SetWriteBuffer(4 << 20)
		return c
	}
	txc, rxc := listen(udpA, 64793), listen(udpB, 64794)
	tx, rx := ipv4.NewPacketConn(txc), ipv4.NewPacketConn(rxc)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(udpB, 64794))
	const batch = 32
	payload := make([]byte, benchPayload)
	out := make([]ipv4.Message, batch)
	for i := range out {
		out[i].Buffers = [][]byte{payload}
		out[i].Addr = dst
	}
	in := make([]ipv4.Message, batch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, benchPayload+1)}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tx.WriteBatch(out, 0); err != nil {
				return
			}
		}
	}()
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	for got := 0; got < b.N; {
		n, err := rx.ReadBatch(in, 0)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	close(stop)
	rxc.Close()
	txc.Close()
	wg.Wait()
}
