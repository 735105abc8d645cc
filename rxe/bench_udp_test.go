//go:build linux

package rxe

import (
	"fmt"
	gonet "net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// Loopback benchmark setup: addresses, ports and sizes shared by the RDMA and
// the raw UDP halves so that they differ only in what runs on top.
const (
	loBenchPort    = 24801 // devices (not 4791: leave that to a real rxe)
	loBenchRawPort = 24802 // raw sockets
	loBenchGSOPort = 24803 // raw sockets with GSO and GRO
	// loBenchGSOSegs is the datagrams per UDP_SEGMENT send of the GSO
	// baseline: as many as fit a UDP datagram, as the link's runs.
	loBenchGSOSegs = 15
	loBenchMsg     = 64 << 10
	loBenchDepth   = 32
	// loBenchDatagram is a full RDMA WRITE MIDDLE packet at MTU 4096: BTH,
	// 4096 bytes of payload and the ICRC, the UDP payload the devices send.
	loBenchDatagram = packet.BTHLen + 4096 + packet.ICRCLen
	loBenchSockBuf  = 4 << 20
	// loBenchRound is the number of WRITEs per round; raw and RDMA rounds
	// alternate so that both see the same machine load.
	loBenchRound = 128
)

var loBenchAddrs = [2]netip.Addr{netip.MustParseAddr("127.0.66.1"), netip.MustParseAddr("127.0.66.2")}

// BenchmarkUDPLoopback measures, in one run, RDMA WRITE bandwidth between
// two devices on UDP links over loopback (64 KiB messages, path MTU 4096,
// loBenchDepth WRITEs posted) and two baselines of raw UDP datagrams of the
// same size between two plain sockets on the same addresses:
//
//   - raw: one datagram per message, batched with sendmmsg/recvmmsg in
//     link.DefaultUDPBatch messages, the baseline issue 4 names;
//   - gso: the same datagrams sent in runs of loBenchGSOSegs with
//     UDP_SEGMENT and received with UDP_GRO, the kernel facilities the link
//     itself uses (link/udp_gso.go, link/udp_gro.go). Beating raw with
//     GSO proves little by itself; this says how much of the best the
//     kernel's UDP can carry the device keeps.
//
// Rounds of the three alternate, each moving the same number of datagrams
// of the same size (a WRITE is 16 packets; a raw round sends 16 datagrams
// per WRITE), so that load from other processes falls on all alike.
// Bytes: rdma-MB/s counts RDMA payload, the baselines whole datagrams
// (BTH and ICRC included), which puts the ratios 0.4% against the device.
//
// b.N counts WRITEs; ns/op and MB/s cover the RDMA rounds only. Metrics:
// rdma-MB/s; raw-MB/s and gso-MB/s; ratio and gso-ratio (rdma-MB/s over
// each baseline's, over the whole run); ratio-median and gso-ratio-median
// (the median of the per-round ratios, each RDMA round against the
// baseline rounds just before it: robust to the stalls a shared CPU puts
// into some rounds); *-cpus (CPU time of the process per second of the
// rounds: what each side got of the machine); raw-lost and gso-lost
// (datagrams the raw sockets lost; such rounds are measured again); and
// retransmits (RDMA packets sent again).
//
// The raw senders may run 512 datagrams ahead of their receivers, four
// times the 128 packets an RC requester may have unacknowledged: the
// baselines are not held back by the window the device has to respect.
func BenchmarkUDPLoopback(b *testing.B) {
	var devs [2]*Device
	for i, a := range loBenchAddrs {
		l, err := link.ListenUDP(link.UDPOptions{Addr: netip.AddrPortFrom(a, loBenchPort), PeerPort: loBenchPort,
			MTU: 9000, SocketBuffer: loBenchSockBuf})
		if err != nil {
			b.Skipf("no UDP socket on %s: %v", a, err)
		}
		d, err := New(Config{Name: fmt.Sprintf("rxe%d", i), Link: l, IPv4: a})
		require.NoError(b, err)
		p, err := d.QueryPort(1)
		require.NoError(b, err)
		require.Equal(b, qp.MTU(4096), p.ActiveMTU, "active MTU on a 9000-byte link")
		require.NoError(b, d.Start())
		b.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	// ACK timeout 1.07 s (code 18) instead of 67 ms: on a CPU shared with
	// other work a stall of the process longer than 67 ms is common, and
	// the go-back-N retransmission it causes is not what is measured.
	// Frames are not lost on loopback; retransmits reports any.
	w := newWriter(b, devs[0], devs[1], 4096, loBenchMsg, loBenchDepth, 18)
	raw := newRawUDP(b, loBenchAddrs[0], loBenchAddrs[1], loBenchRawPort, loBenchDatagram, link.DefaultUDPBatch, 0)
	defer raw.close()
	gso := newRawUDP(b, loBenchAddrs[0], loBenchAddrs[1], loBenchGSOPort, loBenchDatagram, link.DefaultUDPBatch, loBenchGSOSegs)
	defer gso.close()
	// Warm up all (socket buffers, page faults, goroutines).
	w.run(b, loBenchDepth)
	raw.run(b, 256)
	gso.run(b, 256)

	// Datagrams per raw round: as many bytes as the round's WRITEs carry.
	perWrite := (loBenchMsg + loBenchDatagram - 1) / loBenchDatagram
	var rdmaTime, rdmaCPU time.Duration
	rawM, gsoM := newRawMeasure(b.N), newRawMeasure(b.N)
	b.SetBytes(loBenchMsg)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(loBenchRound, b.N-done)
		b.StopTimer()
		rawM.round(b, raw, n*perWrite)
		gsoM.round(b, gso, n*perWrite)
		b.StartTimer()
		t0, c0 := time.Now(), cpuTime()
		w.run(b, n)
		wt := time.Since(t0)
		rdmaCPU += cpuTime() - c0
		rdmaTime += wt
		done += n
		rdmaRate := float64(n*loBenchMsg) / wt.Seconds()
		rawM.pair(rdmaRate)
		gsoM.pair(rdmaRate)
	}
	b.StopTimer()
	rdma := float64(b.N) * loBenchMsg / rdmaTime.Seconds() / 1e6
	b.ReportMetric(rdma, "rdma-MB/s")
	b.ReportMetric(rdmaCPU.Seconds()/rdmaTime.Seconds(), "rdma-cpus")
	rawM.report(b, rdma, "raw", raw.lost)
	gsoM.report(b, rdma, "gso", gso.lost)
	// Retransmissions would mean the links dropped frames: the RDMA figure
	// would then measure timeouts, not throughput.
	b.ReportMetric(float64(devs[0].Counters().Retransmits), "retransmits")
	if devs[0].Counters().Retransmits > 0 {
		for _, d := range devs {
			c := d.Counters()
			b.Logf("%s: retransmits %d, timeouts/NAK retries %d, seq NAKs received %d, out of sequence %d, duplicates %d, link %v",
				d.Name(), c.Retransmits, c.CompleterRetryErr, c.RcvdSeqErr, c.OutOfSeqRequest, c.DuplicateRequest, link.Counters(d.Link()))
		}
	}
}

// rawMeasure accumulates one baseline's rounds: its time, bytes and CPU,
// and the ratios of the RDMA rounds to the baseline round before each.
type rawMeasure struct {
	time, cpu time.Duration
	bytes     int64
	// The median of the pairs' ratios is robust to the stalls a shared
	// CPU puts into some rounds.
	pairs []float64
	rate  float64 // of the last round, bytes/s
}

func newRawMeasure(n int) *rawMeasure {
	return &rawMeasure{pairs: make([]float64, 0, n/loBenchRound+1)}
}

// round moves datagrams through r. A round that lost a datagram waited for
// it: it is measured again (twice at most) rather than counting the wait.
func (m *rawMeasure) round(b *testing.B, r *rawUDP, datagrams int) {
	var rt time.Duration
	for try := 0; ; try++ {
		t0, c0 := time.Now(), cpuTime()
		ok := r.run(b, datagrams)
		rt = time.Since(t0)
		m.cpu += cpuTime() - c0
		if ok || try == 2 {
			break
		}
	}
	m.time += rt
	bytes := int64(datagrams * loBenchDatagram)
	m.bytes += bytes
	m.rate = float64(bytes) / rt.Seconds()
}

// pair records the ratio of an RDMA round's rate to the last round's.
func (m *rawMeasure) pair(rdmaRate float64) {
	m.pairs = append(m.pairs, rdmaRate/m.rate)
}

// report reports the baseline's metrics: for the sendmmsg baseline ("raw")
// raw-MB/s, ratio, ratio-median, raw-lost and raw-cpus; for the others
// NAME-MB/s, NAME-ratio and so on.
func (m *rawMeasure) report(b *testing.B, rdmaMBs float64, name string, lost int) {
	rate := float64(m.bytes) / m.time.Seconds() / 1e6
	ratio := "ratio"
	if name != "raw" {
		ratio = name + "-ratio"
	}
	b.ReportMetric(rate, name+"-MB/s")
	b.ReportMetric(rdmaMBs/rate, ratio)
	slices.Sort(m.pairs)
	b.ReportMetric(m.pairs[len(m.pairs)/2], ratio+"-median")
	b.ReportMetric(float64(lost), name+"-lost")
	b.ReportMetric(m.cpu.Seconds()/m.time.Seconds(), name+"-cpus")
}

// rawUDP moves datagrams of one size between two plain UDP sockets with
// sendmmsg and recvmmsg and nothing else done per datagram: the baseline the
// UDP link and the device are compared with. The sender is held to a window
// of datagrams the receiver has not taken yet (returned as credits, without
// packets), as a QP's window holds the requester, so that the receiving
// socket does not overflow and the sender spends no time on datagrams that
// are then dropped.
type rawUDP struct {
	tx, rx       *gonet.UDPConn
	txRaw, rxRaw syscall.RawConn
	batch        int
	window       int64
	size         int
	// gso is the datagrams per UDP_SEGMENT send, 0 for one per message;
	// with it, the receiver has UDP_GRO and datagrams come coalesced.
	gso    int
	outCtl []byte

	out     []unix.Mmsghdr
	outIov  []unix.Iovec
	dst     unix.RawSockaddrInet4
	payload []byte
	pending []unix.Mmsghdr
	sendErr error
	sendFn  func(uintptr) bool

	in      []unix.Mmsghdr
	inIov   []unix.Iovec
	inBufs  [][]byte
	got     int
	recvErr error
	recvFn  func(uintptr) bool

	credits atomic.Int64 // datagrams the sender may still send
	waiting atomic.Bool  // the sender waits for credits on wake
	wake    chan struct{}
	toSend  chan int // datagrams for the sender's next round
	sent    chan error
	lost    int
	wg      sync.WaitGroup
}

func newRawUDP(b *testing.B, from, to netip.Addr, port uint16, size, batch, gso int) *rawUDP {
	listen := func(a netip.Addr) (*gonet.UDPConn, syscall.RawConn) {
		c, err := gonet.ListenUDP("udp4", gonet.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err != nil {
			b.Skipf("no UDP socket on %s: %v", a, err)
		}
		require.NoError(b, c.SetReadBuffer(loBenchSockBuf))
		require.NoError(b, c.SetWriteBuffer(loBenchSockBuf))
		rc, err := c.SyscallConn()
		require.NoError(b, err)
		// Path-MTU discovery on, as the link has it: DF datagrams from an
		// unconnected socket then get IP ID 0, while the default (WANT)
		// draws an ID per datagram, which would make the baseline slower
		// than the link for a reason that has nothing to do with RDMA.
		require.NoError(b, rc.Control(func(fd uintptr) {
			require.NoError(b, unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO))
		}))
		return c, rc
	}
	r := &rawUDP{batch: batch, window: 4 * 128, wake: make(chan struct{}, 1), size: size, gso: gso,
		toSend: make(chan int), sent: make(chan error, 1), payload: make([]byte, size*max(1, gso))}
	r.tx, r.txRaw = listen(from)
	r.rx, r.rxRaw = listen(to)
	inSize := size + 1
	if gso > 0 {
		require.NoError(b, r.rxRaw.Control(func(fd uintptr) {
			require.NoError(b, unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1))
		}))
		inSize = 0xFFFF + 1
		r.outCtl = make([]byte, batch*unix.CmsgSpace(2))
	}
	r.dst = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: port<<8 | port>>8, Addr: to.As4()}
	r.out = make([]unix.Mmsghdr, batch)
	r.outIov = make([]unix.Iovec, batch)
	for i := range r.out {
		r.outIov[i].Base = &r.payload[0]
		r.outIov[i].SetLen(size)
		h := &r.out[i].Hdr
		h.Iov = &r.outIov[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&r.dst))
		h.Namelen = unix.SizeofSockaddrInet4
		if gso > 0 {
			c := r.outCtl[i*unix.CmsgSpace(2):]
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			ch.Level, ch.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
			ch.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(size)
		}
	}
	r.in = make([]unix.Mmsghdr, batch)
	r.inIov = make([]unix.Iovec, batch)
	r.inBufs = make([][]byte, batch)
	for i := range r.in {
		r.inBufs[i] = make([]byte, inSize)
		r.inIov[i].Base = &r.inBufs[i][0]
		r.inIov[i].SetLen(inSize)
		r.in[i].Hdr.Iov = &r.inIov[i]
		r.in[i].Hdr.SetIovlen(1)
	}
	r.sendFn, r.recvFn = r.sendFD, r.recvFD
	r.wg.Add(1)
	go r.sender()
	return r
}

func (r *rawUDP) close() {
	close(r.toSend)
	r.wg.Wait()
	r.tx.Close()
	r.rx.Close()
}

// run moves n datagrams: the sender goroutine sends them while the calling
// goroutine receives them. Datagrams the kernel drops anyway (it should not,
// within the window) are counted as lost after a quiet 100 ms; run then
// reports false.
func (r *rawUDP) run(b *testing.B, n int) bool {
	r.credits.Store(r.window)
	r.toSend <- n
	for got := 0; got < n; {
		require.NoError(b, r.rx.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		r.got, r.recvErr = 0, nil
		if err := r.rxRaw.Read(r.recvFn); err != nil {
			if nerr, ok := err.(gonet.Error); ok && nerr.Timeout() {
				r.lost += n - got
				r.credits.Add(int64(n - got)) // let the sender finish
				r.wakeSender()
				require.NoError(b, <-r.sent)
				r.drain(b)
				return false
			}
			b.Fatal(err)
		}
		require.NoError(b, r.recvErr)
		k := 0
		for _, h := range r.in[:r.got] {
			// A GRO message holds datagrams of the sent size, all whole.
			if h.Len == 0 || int(h.Len)%r.size != 0 || (r.gso == 0 && int(h.Len) != r.size) {
				b.Fatalf("raw udp: received %d bytes, sent datagrams of %d", h.Len, r.size)
			}
			k += int(h.Len) / r.size
		}
		got += k
		r.credits.Add(int64(k))
		r.wakeSender()
	}
	require.NoError(b, <-r.sent)
	return true
}

// drain discards what the receiving socket holds, after a round that gave
// up on lost datagrams, so that the next round starts empty.
func (r *rawUDP) drain(b *testing.B) {
	for {
		require.NoError(b, r.rx.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
		r.got, r.recvErr = 0, nil
		if err := r.rxRaw.Read(r.recvFn); err != nil {
			return // timed out: empty
		}
		require.NoError(b, r.recvErr)
	}
}

func (r *rawUDP) wakeSender() {
	if r.waiting.Load() && r.waiting.CompareAndSwap(true, false) {
		r.wake <- struct{}{}
	}
}

func (r *rawUDP) sender() {
	defer r.wg.Done()
	for n := range r.toSend {
		var err error
		for n > 0 && err == nil {
			k := int64(min(n, r.batch))
			for r.credits.Load() < k {
				r.waiting.Store(true)
				if r.credits.Load() >= k && r.waiting.CompareAndSwap(true, false) {
					break
				}
				<-r.wake
			}
			r.credits.Add(-k)
			r.pending = r.messages(int(k))
			r.sendErr = nil
			if err = r.txRaw.Write(r.sendFn); err == nil {
				err = r.sendErr
			}
			n -= int(k)
		}
		r.sent <- err
	}
}

// messages prepares the messages for k datagrams: k messages, or with GSO
// runs of r.gso datagrams and a shorter last one.
func (r *rawUDP) messages(k int) []unix.Mmsghdr {
	if r.gso == 0 {
		return r.out[:k]
	}
	m := 0
	for ; k > 0; m++ {
		segs := min(k, r.gso)
		k -= segs
		r.outIov[m].SetLen(segs * r.size)
		h := &r.out[m].Hdr
		h.Control, h.Controllen = nil, 0
		if segs > 1 {
			h.Control = &r.outCtl[m*unix.CmsgSpace(2)]
			h.SetControllen(unix.CmsgSpace(2))
		}
	}
	return r.out[:m]
}

func (r *rawUDP) sendFD(fd uintptr) bool {
	for len(r.pending) > 0 {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&r.pending[0])), uintptr(len(r.pending)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.pending = r.pending[n:]
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			r.sendErr = fmt.Errorf("raw udp: sendmmsg: %w", e)
			return true
		}
	}
	return true
}

func (r *rawUDP) recvFD(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.in[0])), uintptr(len(r.in)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.got = int(n)
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		}
		r.recvErr = fmt.Errorf("raw udp: recvmmsg: %w", e)
		return true
	}
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var u unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
