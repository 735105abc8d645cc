package rxe

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// pattern fills b with bytes derived from seed.
func pattern(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

type e2eCase struct {
	name   string
	v6     bool
	mtu    qp.MTU
	linkMT int
	loss   []int // frame numbers to drop (requests, responses, ACKs alike)
}

func e2eDevices(t *testing.T, c e2eCase) (*Device, *Device, uint8) {
	mtu := c.linkMT
	if c.v6 {
		return newDev(t, "rxe0", macA, netip.Addr{}, ip6A, mtu), newDev(t, "rxe1", macB, netip.Addr{}, ip6B, mtu), 1
	}
	return newDev(t, "rxe0", macA, ipA, netip.Addr{}, mtu), newDev(t, "rxe1", macB, ipB, netip.Addr{}, mtu), 1
}

func TestEndToEndRC(t *testing.T) {
	cases := []e2eCase{
		{name: "ipv4 mtu1024", mtu: 1024, linkMT: 1500},
		{name: "ipv6 mtu4096", v6: true, mtu: 4096, linkMT: 9000},
		{name: "ipv4 mtu256 lossy", mtu: 256, linkMT: 1500, loss: []int{3, 50, 51, 120, 256, 257, 300, 333, 400, 555}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			da, db, _ := e2eDevices(t, c)
			a, b := connect(t, da, db, qp.RC, 64, c.mtu)
			n := newNet(da, db)
			if len(c.loss) > 0 {
				drop := map[int]bool{}
				for _, k := range c.loss {
					drop[k] = true
				}
				k := 0
				n.filter = func(_, _ *Device, _ []byte) bool { k++; return !drop[k] }
			}
			const size = 64 << 10
			abuf, bbuf := make([]byte, size), make([]byte, size)
			am, err := da.RegMR(a.pd, abuf, rwAll)
			require.NoError(t, err)
			bm, err := db.RegMR(b.pd, bbuf, rwAll)
			require.NoError(t, err)
			sge := func(m *MR, off, n int) []qp.SGE {
				return []qp.SGE{{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}}
			}

			// RDMA WRITE a -> b, with several SGEs.
			pattern(abuf, 1)
			wr := qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
				SGL: []qp.SGE{
					{Addr: am.Addr(), Length: 1000, LKey: am.LKey()},
					{Addr: am.Addr() + 1000, Length: 30000, LKey: am.LKey()},
					{Addr: am.Addr() + 31000, Length: size - 31000, LKey: am.LKey()},
				},
				RemoteAddr: bm.Addr(), RKey: bm.RKey()}
			require.NoError(t, a.qp.PostSend(&wr))
			wc := n.poll(t, a.scq, 1)[0]
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, qp.WCRDMAWrite, wc.Opcode)
			assert.Equal(t, uint64(1), wc.ID)
			assert.Equal(t, abuf, bbuf, "written bytes")

			// RDMA READ b -> a, into the second half.
			pattern(bbuf[:size/2], 2)
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRRead, Flags: qp.SendSignaled,
				SGL: sge(am, size/2, size/2), RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
			wc = n.poll(t, a.scq, 1)[0]
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
			assert.Equal(t, qp.WCRDMARead, wc.Opcode)
			assert.Equal(t, uint32(size/2), wc.ByteLen)
			assert.Equal(t, bbuf[:size/2], abuf[size/2:], "read bytes")

			// SEND with immediate b -> a.
			pattern(bbuf[:5000], 3)
			require.NoError(t, a.qp.PostRecv(&qp.RecvWR{ID: 30, SGL: sge(am, 0, 8192)}))
			require.NoError(t, b.qp.PostSend(&qp.SendWR{ID: 3, Opcode: qp.WRSendImm, Flags: qp.SendSignaled,
				Imm: 0xdeadbeef, SGL: sge(bm, 0, 5000)}))
			swc := n.poll(t, b.scq, 1)[0]
			require.Equal(t, qp.WCSuccess, swc.Status, swc.Status.String())
			rwc := n.poll(t, a.rcq, 1)[0]
			require.Equal(t, qp.WCSuccess, rwc.Status, rwc.Status.String())
			assert.Equal(t, qp.WCRecv, rwc.Opcode)
			assert.Equal(t, uint64(30), rwc.ID)
			assert.Equal(t, uint32(5000), rwc.ByteLen)
			assert.Equal(t, uint32(0xdeadbeef), rwc.Imm)
			assert.NotZero(t, rwc.Flags&qp.WCWithImm)
			assert.Equal(t, bbuf[:5000], abuf[:5000], "sent bytes")

			// Atomics on an 8-byte word of b.
			binary.LittleEndian.PutUint64(bbuf[64:], 100)
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 4, Opcode: qp.WRFetchAdd, Flags: qp.SendSignaled,
				SGL: sge(am, 128, 8), RemoteAddr: bm.Addr() + 64, RKey: bm.RKey(), CompareAdd: 23}))
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 5, Opcode: qp.WRCmpSwap, Flags: qp.SendSignaled,
				SGL: sge(am, 136, 8), RemoteAddr: bm.Addr() + 64, RKey: bm.RKey(), CompareAdd: 123, Swap: 7}))
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 6, Opcode: qp.WRCmpSwap, Flags: qp.SendSignaled,
				SGL: sge(am, 144, 8), RemoteAddr: bm.Addr() + 64, RKey: bm.RKey(), CompareAdd: 999, Swap: 1}))
			wcs := n.poll(t, a.scq, 3)
			for i, w := range wcs {
				require.Equal(t, qp.WCSuccess, w.Status, w.Status.String())
				assert.Equal(t, uint64(4+i), w.ID)
			}
			assert.Equal(t, qp.WCFetchAdd, wcs[0].Opcode)
			assert.Equal(t, qp.WCCompSwap, wcs[1].Opcode)
			assert.Equal(t, uint64(100), binary.LittleEndian.Uint64(abuf[128:]), "fetch-add original")
			assert.Equal(t, uint64(123), binary.LittleEndian.Uint64(abuf[136:]), "cmp-swap original (swapped)")
			assert.Equal(t, uint64(7), binary.LittleEndian.Uint64(abuf[144:]), "cmp-swap original (not swapped)")
			assert.Equal(t, uint64(7), binary.LittleEndian.Uint64(bbuf[64:]), "final value")

			// A bad rkey completes with a remote access error and errors the QP.
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 7, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
				SGL: sge(am, 0, 16), RemoteAddr: bm.Addr(), RKey: bm.RKey() ^ 0x80}))
			wc = n.poll(t, a.scq, 1)[0]
			assert.Equal(t, qp.WCRemAccessErr, wc.Status, wc.Status.String())

			cnt := da.Counters()
			assert.NotZero(t, cnt.SentPkts)
			assert.Zero(t, cnt.BadICRC+cnt.AddrMismatch+cnt.UnknownQP+cnt.Malformed)
			if len(c.loss) > 0 {
				assert.NotZero(t, cnt.Retransmits+db.Counters().Retransmits, "losses were repaired by retransmission")
			}
		})
	}
}

func TestEndToEndUD(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		da, db, gidx := e2eDevices(t, e2eCase{v6: v6, linkMT: 1500})
		a, b := newSide(t, da, qp.UD, 16), newSide(t, db, qp.UD, 16)
		for _, s := range []*side{a, b} {
			toInit(t, s.qp)
			toRTS(t, s, nil, 0)
		}
		abuf, bbuf := make([]byte, 2048), make([]byte, 2048)
		am, _ := da.RegMR(a.pd, abuf, qp.AccessLocalWrite)
		bm, _ := db.RegMR(b.pd, bbuf, qp.AccessLocalWrite)
		dgid, err := db.QueryGID(int(gidx))
		require.NoError(t, err)
		ah, err := da.CreateAH(a.pd, qp.AddressVector{DGID: dgid, SGIDIndex: gidx, HopLimit: 1})
		require.NoError(t, err)
		n := newNet(da, db)

		pattern(abuf[:1000], 9)
		require.NoError(t, b.qp.PostRecv(&qp.RecvWR{ID: 1, SGL: []qp.SGE{{Addr: bm.Addr(), Length: 40 + 1024, LKey: bm.LKey()}}}))
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: 1000, LKey: am.LKey()}},
			AH:  ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey}))
		// A datagram with the wrong QKey is dropped by the receiver.
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 3, Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: 10, LKey: am.LKey()}},
			AH:  ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey + 1}))
		swcs := n.poll(t, a.scq, 2)
		for _, w := range swcs {
			assert.Equal(t, qp.WCSuccess, w.Status)
		}
		rwc := n.poll(t, b.rcq, 1)[0]
		require.Equal(t, qp.WCSuccess, rwc.Status, rwc.Status.String())
		assert.Equal(t, uint32(1040), rwc.ByteLen, "payload plus the 40-byte GRH area")
		assert.Equal(t, a.qp.QPN(), rwc.SrcQP)
		assert.Equal(t, abuf[:1000], bbuf[40:1040])
		if !v6 {
			assert.Equal(t, make([]byte, 20), bbuf[:20], "IPv4: 20 zero bytes, then the IPv4 header")
			assert.Equal(t, byte(0x45), bbuf[20])
		} else {
			assert.Equal(t, byte(0x60), bbuf[0]&0xF0)
		}
		assert.Equal(t, uint64(1), db.Counters().BadQKey)
	}
}

func TestLoopback(t *testing.T) {
	d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	a, b := connect(t, d, d, qp.RC, 16, 1024)
	buf := make([]byte, 10000)
	dst := make([]byte, 10000)
	pattern(buf, 5)
	am, _ := d.RegMR(a.pd, buf, rwAll)
	bm, _ := d.RegMR(b.pd, dst, rwAll)
	n := newNet(d)
	require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: 10000, LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wc := n.poll(t, a.scq, 1)[0]
	require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
	assert.Equal(t, buf, dst)
	assert.Zero(t, n.moved, "no frame left the device")
	assert.NotZero(t, d.Counters().LoopbackPackets)
}

func TestFairness(t *testing.T) {
	// Two QPs with long writes share the output: neither waits for the
	// other to finish.
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 1500)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
	a1, b1 := connect(t, da, db, qp.RC, 4, 1024)
	a2, b2 := connect(t, da, db, qp.RC, 4, 1024)
	buf := make([]byte, 256<<10)
	m1, _ := da.RegMR(a1.pd, buf, 0)
	m2, _ := da.RegMR(a2.pd, buf, 0)
	r1, _ := db.RegMR(b1.pd, make([]byte, len(buf)), rwAll)
	r2, _ := db.RegMR(b2.pd, make([]byte, len(buf)), rwAll)
	require.NoError(t, a1.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: m1.Addr(), Length: uint32(len(buf)), LKey: m1.LKey()}},
		RemoteAddr: r1.Addr(), RKey: r1.RKey(), Flags: qp.SendSignaled}))
	require.NoError(t, a2.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, SGL: []qp.SGE{{Addr: m2.Addr(), Length: uint32(len(buf)), LKey: m2.LKey()}},
		RemoteAddr: r2.Addr(), RKey: r2.RKey(), Flags: qp.SendSignaled}))
	frames := newNet().frames
	k, more := da.Output(0, frames)
	require.Equal(t, len(frames), k)
	assert.True(t, more)
	per := map[uint16]int{}
	for _, f := range frames[:k] {
		var fr packetFrame
		require.NoError(t, parse(f.Data, &fr))
		per[fr.Addressing().SrcPort]++
	}
	assert.Len(t, per, 2, "both QPs sent in the first batch")
	for _, c := range per {
		assert.Equal(t, qpBurst, c, "a burst each")
	}
}

func TestDataPathDoesNotAllocate(t *testing.T) {
	da := newDev(t, "rxe0", macA, ipA, netip.Addr{}, 9000)
	db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 9000)
	a, b := connect(t, da, db, qp.RC, 16, 4096)
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	am, _ := da.RegMR(a.pd, src, rwAll)
	bm, _ := db.RegMR(b.pd, dst, rwAll)
	n := newNet(da, db)
	write := qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: am.Addr(), Length: uint32(len(src)), LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}
	read := write
	read.Opcode = qp.WRRead
	send := qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: []qp.SGE{{Addr: am.Addr(), Length: 4000, LKey: am.LKey()}}}
	recv := qp.RecvWR{SGL: []qp.SGE{{Addr: bm.Addr(), Length: 4096, LKey: bm.LKey()}}}
	wcs := make([]qp.WC, 4)
	round := func() {
		require.NoError(t, a.qp.PostSend(&write))
		require.NoError(t, a.qp.PostSend(&read))
		require.NoError(t, b.qp.PostRecv(&recv))
		require.NoError(t, a.qp.PostSend(&send))
		n.pump(t, 1000, 1000)
		require.Equal(t, 3, a.scq.Poll(wcs))
		require.Equal(t, 1, b.rcq.Poll(wcs))
	}
	round() // warm up: frame buffers grow to full size
	assert.Zero(t, testing.AllocsPerRun(20, round), "WRITE, READ and SEND through two devices")
}

// TestDeadlineAndTick follows one WRITE, lost twice, through the device's
// timers. The first loss is the first the requester hears of, so only the
// local ACK timeout (timeout 14: 4.096us << 14, about 67 ms) resends it, as
// kernel rxe's would. After that, by default the timeout resends it
// again; with FastRecovery the early retry does, an eighth of the timeout later
// (no round trip measured yet).
func TestDeadlineAndTick(t *testing.T) {
	timeout := qp.Time(4096 << 14)
	for _, tc := range []struct {
		name        string
		kernelRetry bool
		again       qp.Time
		early       uint64
	}{
		{"kernel retry", true, timeout, 0},
		{"early retry", false, timeout / 8, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, err := New(Config{Name: "rxe0", MAC: macA, IPv4: ipA, MTU: 1500, Seed: 2, FastRecovery: !tc.kernelRetry})
			require.NoError(t, err)
			db := newDev(t, "rxe1", macB, ipB, netip.Addr{}, 1500)
			a, b := connect(t, da, db, qp.RC, 8, 1024)
			am, _ := da.RegMR(a.pd, make([]byte, 100), 0)
			bm, _ := db.RegMR(b.pd, make([]byte, 100), rwAll)
			assert.Equal(t, qp.Never, da.Deadline(), "idle: no timer")
			require.NoError(t, a.qp.PostSend(&qp.SendWR{Opcode: qp.WRWrite, Flags: qp.SendSignaled,
				SGL: []qp.SGE{{Addr: am.Addr(), Length: 100, LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
			frames := newNet().frames
			const t0 = qp.Time(1e9)
			k, more := da.Output(t0, frames)
			require.Equal(t, 1, k)
			assert.False(t, more)
			dl := da.Deadline()
			assert.Equal(t, t0+timeout, dl, "retransmit timer armed")

			// The frame is lost. Before the deadline Tick does nothing; at it the
			// request goes again.
			da.Tick(dl - 1)
			k, _ = da.Output(dl-1, frames)
			assert.Zero(t, k)
			da.Tick(dl)
			k, _ = da.Output(dl, frames)
			require.Equal(t, 1, k, "retransmitted")
			assert.Equal(t, uint64(1), da.Counters().Retransmits)

			// Lost again: the next resend comes at the timeout, or early.
			dl2 := da.Deadline()
			assert.Equal(t, dl+tc.again, dl2, "next resend")
			da.Tick(dl2)
			k, _ = da.Output(dl2, frames)
			require.Equal(t, 1, k, "retransmitted again")
			assert.Equal(t, uint64(2), da.Counters().Retransmits)
			assert.Equal(t, tc.early, da.Counters().EarlyRetries)

			db.HandleFrame(dl2, frames[0])
			k, _ = db.Output(dl2, frames)
			require.Equal(t, 1, k, "ACK")
			da.HandleFrame(dl2, frames[0])
			assert.Equal(t, qp.Never, da.Deadline(), "acknowledged: timer stopped")
			wcs := make([]qp.WC, 2)
			require.Equal(t, 1, a.scq.Poll(wcs))
			assert.Equal(t, qp.WCSuccess, wcs[0].Status)
		})
	}
}
