package rxe

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// startPair returns two running devices joined by an in-memory link.
func startPair(t testing.TB, mtu int) (*Device, *Device) {
	t.Helper()
	la, lb := link.NewMemPair(mtu)
	da, err := New(Config{Name: "rxe0", Link: la, IPv4: ipA})
	require.NoError(t, err)
	db, err := New(Config{Name: "rxe1", Link: lb, IPv4: ipB})
	require.NoError(t, err)
	require.NoError(t, da.Start())
	require.NoError(t, db.Start())
	t.Cleanup(func() {
		assert.NoError(t, da.Close())
		assert.NoError(t, db.Close())
	})
	return da, db
}

// waitWC blocks on c's notification channel until a completion arrives.
// The timeout only keeps a broken stack from hanging the test run.
func waitWC(t testing.TB, c *CQ) qp.WC {
	t.Helper()
	wc := make([]qp.WC, 1)
	deadline := time.After(20 * time.Second)
	for {
		if c.Poll(wc) == 1 {
			return wc[0]
		}
		require.NoError(t, c.Arm(false))
		if c.Poll(wc) == 1 { // arrived between Poll and Arm
			return wc[0]
		}
		select {
		case <-c.C():
		case <-deadline:
			t.Fatal("no completion")
		}
	}
}

func TestRuntimeRC(t *testing.T) {
	da, db := startPair(t, 4096+128)
	p, err := da.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, qp.MTU(4096), p.ActiveMTU)
	a, b := connect(t, da, db, qp.RC, 64, 4096)
	const size = 1 << 20
	src, dst := make([]byte, size), make([]byte, size)
	pattern(src, 11)
	am, err := da.RegMR(a.pd, src, rwAll)
	require.NoError(t, err)
	bm, err := db.RegMR(b.pd, dst, rwAll)
	require.NoError(t, err)

	for i := 0; i < 4; i++ {
		off := uint64(i * size / 4)
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: uint64(i), Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: am.Addr() + off, Length: size / 4, LKey: am.LKey()}},
			RemoteAddr: bm.Addr() + off, RKey: bm.RKey()}))
	}
	for i := 0; i < 4; i++ {
		wc := waitWC(t, a.scq)
		require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
		assert.Equal(t, uint64(i), wc.ID)
	}
	assert.Equal(t, src, dst)

	// SEND the other way, received through the notification channel.
	require.NoError(t, a.qp.PostRecv(&qp.RecvWR{ID: 9, SGL: []qp.SGE{{Addr: am.Addr(), Length: 4096, LKey: am.LKey()}}}))
	require.NoError(t, b.qp.PostSend(&qp.SendWR{ID: 10, Opcode: qp.WRSend, Flags: qp.SendSignaled | qp.SendInline,
		Inline: []byte("over the runtime")}))
	wc := waitWC(t, a.rcq)
	require.Equal(t, qp.WCSuccess, wc.Status)
	assert.Equal(t, "over the runtime", string(src[:wc.ByteLen]))
	assert.Equal(t, qp.WCSuccess, waitWC(t, b.scq).Status)

	c := da.Counters()
	assert.NotZero(t, c.SentPkts)
	assert.Zero(t, c.BadICRC+c.Malformed+c.UnknownQP+c.TxLinkErrors+c.RxLinkErrors)
	assert.NotZero(t, da.Now())
}

// dropLink drops the frames whose send sequence numbers are in drop.
type dropLink struct {
	link.Link
	mu   sync.Mutex
	n    int
	drop map[int]bool
	lost int
}

func (l *dropLink) Send(frames []link.Frame) (int, error) {
	l.mu.Lock()
	keep := frames[:0:0]
	for _, f := range frames {
		l.n++
		if l.drop[l.n] {
			l.lost++
			continue
		}
		keep = append(keep, f)
	}
	l.mu.Unlock()
	if _, err := l.Link.Send(keep); err != nil {
		return 0, err
	}
	return len(frames), nil
}

func TestRuntimeRetransmitsAfterLoss(t *testing.T) {
	// Frames lost on the way (requests from a, ACKs from b) are repaired
	// by NAK-driven and timer-driven retransmission.
	la, lb := link.NewMemPair(1500)
	dla := &dropLink{Link: la, drop: map[int]bool{10: true, 11: true, 200: true, 1500: true}}
	dlb := &dropLink{Link: lb, drop: map[int]bool{1: true, 3: true}}
	da, err := New(Config{Link: dla, IPv4: ipA})
	require.NoError(t, err)
	db, err := New(Config{Link: dlb, IPv4: ipB})
	require.NoError(t, err)
	a := newSide(t, da, qp.RC, 8)
	a.timeout = 12 // 4.096us*2^12 ~ 17ms: short, yet not fired by scheduling delays
	a, b := connectSides(t, a, newSide(t, db, qp.RC, 8), 1024)
	src, dst := make([]byte, 2<<20), make([]byte, 2<<20)
	pattern(src, 3)
	am, _ := da.RegMR(a.pd, src, 0)
	bm, _ := db.RegMR(b.pd, dst, rwAll)
	require.NoError(t, da.Start())
	defer da.Close()
	require.NoError(t, db.Start())
	defer db.Close()
	require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: uint32(len(src)), LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wc := waitWC(t, a.scq)
	require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, src, dst)
	assert.Equal(t, 4, dla.lost)
	assert.NotZero(t, da.Counters().Retransmits)
}

func TestStartErrors(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	assert.ErrorIs(t, d.Start(), ErrNoLink)
	la, _ := link.NewMemPair(1500)
	d2, err := New(Config{Link: la, IPv4: ipA})
	require.NoError(t, err)
	require.NoError(t, d2.Start())
	assert.ErrorIs(t, d2.Start(), ErrAlreadyStart)
	require.NoError(t, d2.Close())
	assert.Zero(t, d2.Now(), "stopped")
	// A device promised one caller at a time has no lock for the
	// runtime's goroutines to share.
	lc, _ := link.NewMemPair(1500)
	d3, err := New(Config{Link: lc, IPv4: ipA, SingleThreaded: true})
	require.NoError(t, err)
	assert.ErrorIs(t, d3.Start(), ErrInvalid)
}

func TestRuntimeHub(t *testing.T) {
	// Three devices on an in-memory switch: the device leaves the
	// destination MAC zero and the hub delivers by destination IP.
	hub := link.NewMemHub(link.MemOptions{MTU: 1500})
	ips := []netip.Addr{ipA, ipB, netip.MustParseAddr("10.77.0.4")}
	var devs []*Device
	for i, ip := range ips {
		mac := [6]byte{2, 0, 0, 0, 1, byte(i)}
		d, err := New(Config{Name: fmt.Sprintf("rxe%d", i), Link: hub.Attach(mac, ip), IPv4: ip})
		require.NoError(t, err)
		require.NoError(t, d.Start())
		devs = append(devs, d)
	}
	defer func() {
		for _, d := range devs {
			assert.NoError(t, d.Close())
		}
	}()
	for _, peer := range devs[1:] {
		a, b := connect(t, devs[0], peer, qp.RC, 16, 1024)
		src, dst := make([]byte, 100000), make([]byte, 100000)
		pattern(src, uint64(peer.mac[5]))
		am, _ := devs[0].RegMR(a.pd, src, 0)
		bm, _ := peer.RegMR(b.pd, dst, rwAll)
		require.NoError(t, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: uint32(len(src)), LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
		wc := waitWC(t, a.scq)
		require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
		assert.Equal(t, src, dst, "to %s", peer.Name())
	}
}

// fixedPortLink is a link that, like a UDP socket, sends from one port.
type fixedPortLink struct {
	link.Link
	port uint16
}

func (l *fixedPortLink) FixedSourcePort() (uint16, bool) { return l.port, true }

func TestFixedSourcePortLink(t *testing.T) {
	la, lb := link.NewMemPair(1500)
	da, err := New(Config{Link: &fixedPortLink{la, 4791}, IPv4: ipA})
	require.NoError(t, err)
	db, err := New(Config{Link: lb, IPv4: ipB})
	require.NoError(t, err)
	a, b := connect(t, da, db, qp.RC, 8, 1024)
	buf := make([]byte, 3000)
	am, _ := da.RegMR(a.pd, buf, 0)
	bm, _ := db.RegMR(b.pd, make([]byte, 3000), rwAll)
	require.NoError(t, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: am.Addr(), Length: 3000, LKey: am.LKey()}},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	frames := newNet().frames
	k, _ := da.Output(0, frames)
	require.Equal(t, 3, k)
	for _, f := range frames[:k] {
		var fr packetFrame
		require.NoError(t, parse(f.Data, &fr))
		ad := fr.Addressing()
		assert.Equal(t, uint16(4791), ad.SrcPort, "the link's port, not the QP's")
		assert.Zero(t, ad.IPID, "ID 0, as the kernel writes for the socket")
		assert.True(t, ad.DF)
		assert.True(t, fr.ICRCOK())
	}
	// Without the fixed port, the QP's port and a counting ID.
	db2, err := New(Config{Link: lb, IPv4: ipB})
	require.NoError(t, err)
	c, _ := connect(t, db2, da, qp.RC, 8, 1024)
	cm, _ := db2.RegMR(c.pd, buf, 0)
	require.NoError(t, c.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: cm.Addr(), Length: 3000, LKey: cm.LKey()}},
		RemoteAddr: 1, RKey: 1}))
	k, _ = db2.Output(0, frames)
	require.Equal(t, 3, k)
	var ids []uint16
	for _, f := range frames[:k] {
		var fr packetFrame
		require.NoError(t, parse(f.Data, &fr))
		ad := fr.Addressing()
		assert.Equal(t, c.qp.SrcPort(), ad.SrcPort)
		ids = append(ids, ad.IPID)
	}
	assert.Equal(t, []uint16{ids[0], ids[0] + 1, ids[0] + 2}, ids)
}

func TestRuntimeConcurrentQPs(t *testing.T) {
	// Several goroutines drive their own QP pairs at once, posting, polling
	// and querying through the same two devices (run with -race).
	da, db := startPair(t, 4096+128)
	const pairs, msgs = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for p := 0; p < pairs; p++ {
		typ := []qp.Type{qp.RC, qp.UC}[p%2]
		a, b := connect(t, da, db, typ, 16, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := make([]byte, 8192), make([]byte, 8192)
			am, _ := da.RegMR(a.pd, src, 0)
			bm, _ := db.RegMR(b.pd, dst, rwAll)
			wc := make([]qp.WC, 16)
			for i := 0; i < msgs; i++ {
				pattern(src, uint64(i))
				if err := b.qp.PostRecv(&qp.RecvWR{ID: uint64(i), SGL: []qp.SGE{{Addr: bm.Addr(), Length: 8192, LKey: bm.LKey()}}}); err != nil {
					errs <- err
					return
				}
				if err := a.qp.PostSend(&qp.SendWR{ID: uint64(i), Opcode: qp.WRSendImm, Imm: uint32(i), Flags: qp.SendSignaled,
					SGL: []qp.SGE{{Addr: am.Addr(), Length: 5000, LKey: am.LKey()}}}); err != nil {
					errs <- err
					return
				}
				got, err := waitWCErr(b.rcq)
				if err != nil {
					errs <- err
					return
				}
				if got.Status != qp.WCSuccess || got.Imm != uint32(i) || string(dst[:5000]) != string(src[:5000]) {
					errs <- fmt.Errorf("qp %d message %d: %s imm %d", a.qp.QPN(), i, got.Status, got.Imm)
					return
				}
				if s, err := waitWCErr(a.scq); err != nil || s.Status != qp.WCSuccess {
					errs <- fmt.Errorf("qp %d send %d: %s %v", a.qp.QPN(), i, s.Status, err)
					return
				}
				_ = a.scq.Poll(wc)
				_ = da.Counters()
				_ = da.QPs()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Zero(t, db.Counters().BadICRC+da.Counters().BadICRC)
}

// waitWCErr is waitWC for goroutines other than the test's.
func waitWCErr(c *CQ) (qp.WC, error) {
	wc := make([]qp.WC, 1)
	deadline := time.After(20 * time.Second)
	for {
		if c.Poll(wc) == 1 {
			return wc[0], nil
		}
		if err := c.Arm(false); err != nil {
			return qp.WC{}, err
		}
		if c.Poll(wc) == 1 {
			return wc[0], nil
		}
		select {
		case <-c.C():
		case <-deadline:
			return qp.WC{}, fmt.Errorf("no completion on cq %d", c.Handle())
		}
	}
}
