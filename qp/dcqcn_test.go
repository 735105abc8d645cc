package qp

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const line100G = 100_000_000_000

func TestDCQCNFirstCNPCutsByHalfAlpha(t *testing.T) {
	p := DefaultDCQCN()
	d := newDCQCN(&p, line100G, 0)
	require.True(t, d.Idle())
	d.CNP(1000)
	// α starts at 1023/1024: Rc·(1 - α/2) = line·1025/2048; Rt remembers line.
	assert.Equal(t, int64(line100G-line100G*1023/2048), d.Rate())
	assert.Equal(t, int64(line100G), d.rt)
	assert.False(t, d.Idle())
	assert.Equal(t, Time(1000)+p.RPGTimeReset, d.Deadline())
}

func TestDCQCNOneCutPerMonitorPeriod(t *testing.T) {
	p := DefaultDCQCN()
	d := newDCQCN(&p, line100G, 0)
	d.CNP(0)
	r1 := d.Rate()
	d.CNP(1 * Microsecond) // within rate_reduce_monitor_period: deferred
	d.CNP(2 * Microsecond)
	assert.Equal(t, r1, d.Rate())
	assert.Equal(t, 4*Microsecond, d.Deadline())
	d.Tick(4 * Microsecond)
	r2 := d.Rate()
	assert.Less(t, r2, r1)
	// α decayed for the first period and grew for the periods with CNPs:
	// still close to 1, so the second cut is close to half again.
	assert.InDelta(t, float64(r1)/2, float64(r2), float64(r1)/50)
	assert.Equal(t, 4*Microsecond+p.RPGTimeReset, d.Deadline(), "no cut pending")
}

func TestDCQCNAlphaDecaysWithoutCNPs(t *testing.T) {
	p := DefaultDCQCN()
	d := newDCQCN(&p, line100G, 0)
	d.CNP(0)
	d.advanceAlpha(100 * Microsecond)
	// 100 periods of α·1019/1024 from 1023/1024.
	want := 1023.0 / 1024
	for range 100 {
		want *= 1019.0 / 1024
	}
	assert.InDelta(t, want, d.State().Alpha, 1e-4)
	assert.Equal(t, 101*Microsecond, d.alphaAt)
	d.advanceAlpha(Second) // long idle: decays to 0, in constant work
	assert.Equal(t, int64(0), d.alpha)
	assert.Equal(t, Second+Microsecond, d.alphaAt)
	// A gain of 1024 (g = 0) never decays.
	p.DCETCPG = 1024
	d2 := newDCQCN(&p, line100G, 0)
	d2.CNP(0)
	d2.advanceAlpha(10 * Second)
	assert.Equal(t, int64(1023<<10), d2.alpha)
	// A CNP in a period adds (1024-G)/1024 at its end.
	p = DefaultDCQCN()
	d3 := newDCQCN(&p, line100G, 0)
	d3.CNP(0)
	d3.advanceAlpha(Second)
	d3.CNP(Second + 10) // α ~ 0; this period saw a CNP
	d3.advanceAlpha(Second + 2*Microsecond)
	assert.InDelta(t, 5.0/1024*1019/1024, d3.State().Alpha, 1e-5)
}

func TestDCQCNRecoversToLineRateAndGoesIdle(t *testing.T) {
	p := DefaultDCQCN()
	d := newDCQCN(&p, line100G, 0)
	d.CNP(0)
	now := Time(0)
	stages := 0
	for !d.Idle() {
		now = d.Deadline()
		require.NotEqual(t, Never, now)
		before := d.Rate()
		d.Tick(now)
		assert.GreaterOrEqual(t, d.Rate(), before, "no CNP: the rate never falls")
		stages++
		require.Less(t, stages, 100)
	}
	assert.Equal(t, int64(line100G), d.Rate())
	assert.Equal(t, Never, d.Deadline())
	// Each stage halves the gap to Rt = line: about log2(50 G) stages.
	assert.InDelta(t, 36, stages, 2)
}

func TestDCQCNIncreaseStages(t *testing.T) {
	p := DefaultDCQCN()
	p.RPGThreshold = 2
	tests := []struct {
		name      string
		t, bc     int
		wantRtAdd int64
	}{
		{"fast recovery", 1, 1, 0},
		{"additive by timer", 2, 0, p.RPGAIRate},
		{"additive by bytes", 0, 3, p.RPGAIRate},
		{"hyper", 3, 2, p.RPGHAIRate},
		{"hyper, second stage", 3, 4, 2 * p.RPGHAIRate},
	}
	for _, tt := range tests {
		d := newDCQCN(&p, line100G, 0)
		d.active, d.rc, d.rt = true, 10_000_000_000, 20_000_000_000
		d.t, d.bc = tt.t, tt.bc
		d.increase()
		assert.Equal(t, 20_000_000_000+tt.wantRtAdd, d.rt, tt.name)
		assert.Equal(t, (10_000_000_000+d.rt+1)/2, d.rc, tt.name)
	}
}

func TestDCQCNByteCounter(t *testing.T) {
	p := DefaultDCQCN()
	d := newDCQCN(&p, line100G, 0)
	d.CNP(0)
	r := d.Rate()
	d.Sent(10, p.RPGByteReset-1)
	assert.Equal(t, r, d.Rate())
	d.Sent(20, 1)
	assert.Equal(t, 1, d.bc)
	assert.Greater(t, d.Rate(), r)
	p.RPGByteReset = 0 // off
	d2 := newDCQCN(&p, line100G, 0)
	d2.CNP(0)
	d2.Sent(10, 1<<30)
	assert.Equal(t, 0, d2.bc)
}

func TestDCQCNFirstCNPRateAndFloors(t *testing.T) {
	p := DefaultDCQCN()
	p.RateToSetOnFirstCNP = 2_000_000_000
	d := newDCQCN(&p, line100G, 0)
	d.CNP(0)
	assert.Equal(t, int64(2_000_000_000), d.Rate())

	p = DefaultDCQCN()
	p.RPGMinDecFac = 90 // a cut keeps 90 %
	d = newDCQCN(&p, line100G, 0)
	d.CNP(0)
	assert.Equal(t, int64(line100G*90/100), d.Rate())

	p = DefaultDCQCN()
	p.RPGMinRate = 40_000_000_000
	d = newDCQCN(&p, line100G, 0)
	d.CNP(0)
	assert.Equal(t, int64(line100G-line100G*1023/2048), d.Rate())
	d.Tick(4 * Microsecond)
	d.CNP(5 * Microsecond)
	assert.Equal(t, int64(40_000_000_000), d.Rate(), "never below rpg_min_rate")

	p = DefaultDCQCN()
	p.RPGMaxRate = 25_000_000_000
	d = newDCQCN(&p, line100G, 0)
	assert.Equal(t, int64(25_000_000_000), d.Rate(), "rpg_max_rate caps the line rate")
}

// TestDCQCNInvariants drives the algorithm with random CNPs, sends and
// ticks and checks what must always hold: Rc within [rpg_min_rate, max],
// Rc <= Rt, α within [0, 1024], deadlines never in the past after a Tick.
func TestDCQCNInvariants(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		p := DefaultDCQCN()
		p.RPGThreshold = r.IntN(6)
		p.RPGTimeReset = Time(1+r.IntN(500)) * Microsecond
		p.RPGMinDecFac = r.IntN(101)
		line := int64(1+r.IntN(400)) * 1_000_000_000
		d := newDCQCN(&p, line, 0)
		now := Time(0)
		for range 5000 {
			now += Time(r.IntN(20_000))
			switch r.IntN(3) {
			case 0:
				d.CNP(now)
			case 1:
				d.Sent(now, r.IntN(9000))
			case 2:
				if dl := d.Deadline(); dl != Never {
					now = max(now, dl)
				}
				d.Tick(now)
				assert.Greater(t, d.Deadline(), now)
			}
			require.GreaterOrEqual(t, d.rc, d.minRate(), "seed %d", seed)
			require.LessOrEqual(t, d.rc, line)
			require.LessOrEqual(t, d.rt, line)
			require.True(t, d.alpha >= 0 && d.alpha <= 1<<20)
			if d.active {
				require.LessOrEqual(t, d.rc, d.rt)
			}
		}
	}
}

func TestDCQCNParamsCheck(t *testing.T) {
	good := DefaultDCQCN()
	require.NoError(t, good.Check())
	bad := []func(p *DCQCNParams){
		func(p *DCQCNParams) { p.RPGTimeReset = 0 },
		func(p *DCQCNParams) { p.DCETCPRTT = 0 },
		func(p *DCQCNParams) { p.RPGGD = 9 },
		func(p *DCQCNParams) { p.DCETCPG = 1025 },
		func(p *DCQCNParams) { p.RPGMinRate = 0 },
		func(p *DCQCNParams) { p.RPGMinDecFac = 101 },
		func(p *DCQCNParams) { p.RPGByteReset = -1 },
	}
	for i, mod := range bad {
		p := DefaultDCQCN()
		mod(&p)
		assert.Error(t, p.Check(), "case %d", i)
	}
}
