package rxe

import (
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// ccPair is two devices with a connected RC pair and registered buffers.
type ccPair struct {
	da, db *Device
	a, b   *side
	n      *net
	am, bm *MR
}

func newCCPair(t *testing.T, ca, cb *Congestion) *ccPair {
	t.Helper()
	mk := func(name string, mac [6]byte, ip string, c *Congestion) *Device {
		cfg := Config{Name: name, MAC: mac, MTU: 1500, Seed: 3 + uint64(mac[5]), Congestion: c}
		cfg.IPv4 = ipA
		if name == "rxe1" {
			cfg.IPv4 = ipB
		}
		d, err := New(cfg)
		require.NoError(t, err)
		return d
	}
	p := &ccPair{da: mk("rxe0", macA, "a", ca), db: mk("rxe1", macB, "b", cb)}
	p.a, p.b = connect(t, p.da, p.db, qp.RC, 64, 1024)
	p.n = newNet(p.da, p.db)
	var err error
	p.am, err = p.da.RegMR(p.a.pd, make([]byte, 1<<20), rwAll)
	require.NoError(t, err)
	p.bm, err = p.db.RegMR(p.b.pd, make([]byte, 1<<20), rwAll)
	require.NoError(t, err)
	return p
}

func (p *ccPair) write(t *testing.T, id uint64, n int) {
	t.Helper()
	require.NoError(t, p.a.qp.PostSend(&qp.SendWR{ID: id, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: p.am.Addr(), Length: uint32(n), LKey: p.am.LKey()}},
		RemoteAddr: p.bm.Addr(), RKey: p.bm.RKey()}))
}

func enabled() *Congestion {
	c := DefaultCongestion()
	c.Enable()
	return &c
}

// TestECNToCNPToRateCut follows one congestion signal end to end: the
// sender's packets leave ECT(0), a switch (the filter) marks them CE, the
// receiver counts the marks and answers with one CNP per QP per
// np_min_time_between_cnps, byte-exact with ConnectX's, and the sender's
// reaction point cuts the QP's rate.
func TestECNToCNPToRateCut(t *testing.T) {
	p := newCCPair(t, enabled(), enabled())
	var cnps [][]byte
	data := 0
	var st qp.RateState
	var stOK bool
	p.n.filter = func(from, to *Device, f []byte) bool {
		if len(cnps) == 1 && !stOK {
			// The frame after the CNP: the sender has taken it.
			st, stOK = p.da.QPRate(p.a.qp.QPN())
		}
		var fr packet.Frame
		require.NoError(t, packet.ParseFrame(f, &fr))
		ecn, _ := packet.FrameECN(f)
		if fr.Transport[0] == byte(packet.CNP) {
			cnps = append(cnps, append([]byte(nil), f...))
			assert.Equal(t, uint8(packet.ECNNotECT), ecn, "a CNP is Not-ECT")
			return true
		}
		assert.Equal(t, uint8(packet.ECNECT0), ecn, "RoCE packets leave ECT(0)")
		if from == p.da {
			data++
			assert.True(t, packet.MarkCE(f))
		}
		return true
	}
	// 64 KiB at path MTU 1024: 64 packets, all at time 0 in this network,
	// so one CNP.
	p.write(t, 1, 64<<10)
	wc := p.n.poll(t, p.a.scq, 1)[0]
	require.Equal(t, qp.WCSuccess, wc.Status)

	cb, ca := p.db.Counters(), p.da.Counters()
	assert.Equal(t, uint64(data), cb.NpECNMarkedRocePackets)
	assert.Equal(t, uint64(64), cb.NpECNMarkedRocePackets)
	require.Len(t, cnps, 1)
	assert.Equal(t, uint64(1), cb.NpCNPSent)
	assert.Equal(t, uint64(1), ca.RpCNPHandled)
	assert.Zero(t, ca.RpCNPIgnored)

	// The CNP as ConnectX sends it (Mellanox "RoCEv2 CNP Packet Format
	// Example"): 74 bytes, DSCP 48, BTH 81 00 ff ff 40 <sender QPN> 00 00 00 00,
	// 16 zero bytes, a valid ICRC.
	f := cnps[0]
	assert.Len(t, f, 74)
	assert.Equal(t, byte(48<<2), f[packet.EthernetLen+1], "TOS: DSCP 48 (CS6), Not-ECT")
	tr := f[packet.EthernetLen+packet.IPv4Len+packet.UDPLen:]
	qpn := p.a.qp.QPN()
	assert.Equal(t, "8100ffff40"+hex.EncodeToString([]byte{byte(qpn >> 16), byte(qpn >> 8), byte(qpn)})+"00000000",
		hex.EncodeToString(tr[:12]))
	assert.Equal(t, make([]byte, 16), tr[12:28])
	var fr packet.Frame
	require.NoError(t, packet.ParseFrame(f, &fr))
	assert.True(t, fr.ICRCOK())

	require.True(t, stOK, "the sender's QP has a reaction point")
	assert.True(t, st.Active)
	assert.Less(t, st.Rate, int64(60_000_000_000), "cut by about half from 100 Gb/s")
	assert.Equal(t, int64(100_000_000_000), st.Target)

	// With no more CNPs the rate recovers to line rate (the test network
	// ran the timers until nothing was due) and the QP drops its reaction
	// point; another burst, later than np_min_time_between_cnps, brings one
	// more CNP.
	_, active := p.da.QPRate(qpn)
	assert.False(t, active)
	p.n.now += 10 * qp.Microsecond
	p.write(t, 2, 4096)
	p.n.poll(t, p.a.scq, 1)
	assert.Len(t, cnps, 2)
}

// TestCNPIgnoredWithoutReactionPoint: a device whose reaction point is off
// counts CNPs in rp_cnp_ignored and keeps sending at line rate, as a
// ConnectX with roce_rp disabled does; a device with ECN off sends
// Not-ECT, as kernel rxe does.
func TestCNPIgnoredWithoutReactionPoint(t *testing.T) {
	p := newCCPair(t, nil, enabled())
	p.n.filter = func(from, to *Device, f []byte) bool {
		if from == p.da {
			ecn, _ := packet.FrameECN(f)
			assert.Equal(t, uint8(packet.ECNNotECT), ecn)
			f[packet.EthernetLen+1] |= packet.ECNECT0 // an ECN-capable path, as if TC said so
			fixIPv4Checksum(f)
			packet.MarkCE(f)
		}
		return true
	}
	p.write(t, 1, 8192)
	p.n.poll(t, p.a.scq, 1)
	assert.Equal(t, uint64(1), p.db.Counters().NpCNPSent)
	assert.Equal(t, uint64(1), p.da.Counters().RpCNPIgnored)
	assert.Equal(t, uint64(1), p.da.Counters().CNP)
	_, ok := p.da.QPRate(p.a.qp.QPN())
	assert.False(t, ok)
}

// TestPacingHoldsTheRate: after a CNP sets the QP's rate to 1 Gb/s
// (rate_to_set_on_first_cnp, no increase timer in the way), the
// requester's packets leave no faster than that rate, measured on the
// test network's clock.
func TestPacingHoldsTheRate(t *testing.T) {
	ca := enabled()
	ca.Engine.DCQCN.RateToSetOnFirstCNP = 1_000_000_000
	ca.Engine.DCQCN.RPGTimeReset = qp.Second
	ca.Engine.DCQCN.RPGByteReset = 0
	p := newCCPair(t, ca, enabled())
	p.da.mu.Lock()
	x := p.da.qps.get(p.a.qp.QPN())
	x.q.ReceiveCNP(0)
	p.da.mu.Unlock()
	var times []qp.Time
	var lens []int
	p.n.filter = func(from, to *Device, f []byte) bool {
		if from == p.da {
			times = append(times, p.n.now)
			lens = append(lens, len(f))
		}
		return true
	}
	p.write(t, 1, 32<<10)
	p.n.poll(t, p.a.scq, 1)
	require.Len(t, times, 32)
	for i := 1; i < len(times); i++ {
		gap := times[i] - times[i-1]
		want := qp.Time((lens[i-1] + 24) * 8) // ns at 1 Gb/s, with preamble, FCS and gap
		assert.GreaterOrEqual(t, gap, want, "packet %d", i)
		assert.Less(t, gap, want+qp.Microsecond, "packet %d: paced, not stalled", i)
	}
}

func TestCongestionParams(t *testing.T) {
	c := DefaultCongestion()
	for _, kv := range []string{"roce_rp=1", "rp_ai_rate=20", "rp_time_reset=55", "np_min_time_between_cnps=2",
		"line_rate=25000", "rp_dce_tcp_g=1008", "rp_clamp_tgt_rate=true"} {
		require.NoError(t, c.Set(kv), kv)
	}
	assert.True(t, c.Engine.RP)
	assert.Equal(t, int64(20_000_000), c.Engine.DCQCN.RPGAIRate)
	assert.Equal(t, 55*qp.Microsecond, c.Engine.DCQCN.RPGTimeReset)
	assert.Equal(t, 2*qp.Microsecond, c.Engine.MinTimeBetweenCNPs)
	assert.Equal(t, int64(25_000_000_000), c.Engine.LineRate)
	assert.Equal(t, 1008, c.Engine.DCQCN.DCETCPG)
	assert.True(t, c.Engine.DCQCN.ClampTgtRate)
	got := map[string]string{}
	for _, kv := range c.Params() {
		got[kv[0]] = kv[1]
	}
	assert.Equal(t, "20", got["rp_ai_rate"])
	assert.Equal(t, "55", got["rp_time_reset"])
	assert.Equal(t, "1", got["roce_rp"])
	assert.Len(t, got, len(CongestionParamNames()))
	for _, bad := range []string{"nope=1", "rp_ai_rate", "rp_ai_rate=-1", "rp_gd=x", "roce_np=maybe"} {
		assert.Error(t, c.Set(bad), bad)
	}
	d := newDev(t, "rxe9", macA, ipA, netip.Addr{}, 1500)
	c.Engine.DCQCN.RPGGD = 3
	assert.ErrorIs(t, d.SetCongestion(c), ErrInvalid)
}

// TestPacingWithBurstNeverOutrunsTheRate: with a Burst (real links: 1 ms)
// the requester may send up to Burst ahead of its slots and make up slots
// a late caller missed, but over any stretch it never sends more than the
// rate allows plus Burst's worth; and it makes up for a caller that comes
// late (here the test network ticks only every 2.5 ms, later than Burst).
func TestPacingWithBurstNeverOutrunsTheRate(t *testing.T) {
	const rate = 1_000_000_000
	ca := enabled()
	ca.Engine.Burst = qp.Millisecond
	ca.Engine.DCQCN.RateToSetOnFirstCNP = rate
	ca.Engine.DCQCN.RPGTimeReset = qp.Second
	ca.Engine.DCQCN.RPGByteReset = 0
	p := newCCPair(t, ca, enabled())
	p.da.mu.Lock()
	p.da.qps.get(p.a.qp.QPN()).q.ReceiveCNP(0)
	p.da.mu.Unlock()
	var sent int64
	var last qp.Time
	p.n.filter = func(from, to *Device, f []byte) bool {
		if from == p.da {
			sent += int64(len(f) + 24)
			last = p.n.now
			allowed := int64(rate/8) * int64(p.n.now+qp.Millisecond) / int64(qp.Second)
			require.LessOrEqual(t, sent, allowed+int64(len(f)+24), "at %d ns", p.n.now)
		}
		return true
	}
	for i := range 4 {
		p.write(t, uint64(i), 256<<10)
	}
	p.n.pumpStep = 2500 * qp.Microsecond
	p.n.poll(t, p.a.scq, 4)
	// 1 MiB and headers at 1 Gb/s take 8.6 ms; late ticks cost nothing.
	assert.InDelta(t, float64(sent*8)/rate*1e9, float64(last), float64(3*qp.Millisecond))
}

// FuzzCongestionSet: any NAME=VALUE string sets a valid setting or is
// refused; a device refuses, never panics on, the settings that result.
func FuzzCongestionSet(f *testing.F) {
	for _, s := range []string{"rp_ai_rate=20", "roce_np=1", "np_min_time_between_cnps=2.5", "rp_gd=99", "x", "line_rate=1e7", "pace_burst=-1"} {
		f.Add(s)
	}
	d, err := New(Config{Name: "fz", IPv4: ipA})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, s string) {
		c := DefaultCongestion()
		if c.Set(s) != nil {
			return
		}
		_ = d.SetCongestion(c)
		for _, p := range c.Params() {
			if p[0] == "" {
				t.Fatal("a setting without a name")
			}
		}
	})
}

// TestPacedQPAsksForACKsWithinItsTimeout: a QP that DCQCN holds at 5 Mb/s
// needs 110 ms for a 64 KiB message, longer than its 67 ms retransmit
// timeout (code 14). rxe would ask for an ACK only with the last packet,
// and the timer armed by the first would fire although nothing was lost;
// a paced QP also asks in between, at least every quarter of the timeout,
// so the answers keep moving the timer and nothing is resent.
func TestPacedQPAsksForACKsWithinItsTimeout(t *testing.T) {
	const rate = 5_000_000
	ca := enabled()
	ca.Engine.DCQCN.RateToSetOnFirstCNP = rate
	ca.Engine.DCQCN.RPGTimeReset = 10 * qp.Second
	ca.Engine.DCQCN.RPGByteReset = 0
	p := newCCPair(t, ca, enabled())
	p.da.mu.Lock()
	p.da.qps.get(p.a.qp.QPN()).q.ReceiveCNP(0)
	p.da.mu.Unlock()
	period := qp.Time(4096) << 14
	var asked []qp.Time
	sent := 0
	p.n.filter = func(from, to *Device, f []byte) bool {
		if from == p.da {
			var fr packet.Frame
			require.NoError(t, packet.ParseFrame(f, &fr))
			var pk packet.Packet
			require.NoError(t, pk.Decode(fr.Transport))
			sent++
			if pk.BTH.AckReq {
				asked = append(asked, p.n.now)
			}
		}
		return true
	}
	p.write(t, 1, 64<<10)
	p.n.pumpStep = qp.Millisecond
	wc := p.n.poll(t, p.a.scq, 1)[0]
	require.Equal(t, qp.WCSuccess, wc.Status)
	assert.Equal(t, 64, sent, "nothing resent")
	assert.Zero(t, p.da.Counters().Retransmits)
	require.Greater(t, len(asked), 2, "asked in the middle of the message too")
	for i := 1; i < len(asked); i++ {
		assert.LessOrEqual(t, asked[i]-asked[i-1], period/4+qp.Millisecond, "ask %d", i)
	}
	assert.Greater(t, p.n.now, period, "the message took longer than the timeout")
}
