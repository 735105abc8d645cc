package qp

import "fmt"

// DCQCNParams are the reaction point's parameters under mlx5's names (the
// firmware's rpg_* and dce_tcp_* here; upstream debugfs cc_params, and
// rxe.Congestion.Set, call them rp_*), in their units converted to bit/s
// and Time. DefaultDCQCN gives mlx5's defaults.
type DCQCNParams struct {
	RPGTimeReset             Time  // rpg_time_reset: rate-increase timer period
	RPGByteReset             int   // rpg_byte_reset: bytes sent per byte-counter stage; 0: no byte counter
	RPGThreshold             int   // rpg_threshold: stages of fast recovery (F)
	RPGAIRate                int64 // rpg_ai_rate: additive increase, bit/s
	RPGHAIRate               int64 // rpg_hai_rate: hyper increase, bit/s
	RPGMaxRate               int64 // rpg_max_rate: ceiling, bit/s; 0: the line rate
	RPGMinRate               int64 // rpg_min_rate: floor, bit/s
	RPGGD                    int   // rpg_gd: a cut is Rc·α/2^(gd-10)
	RPGMinDecFac             int   // rpg_min_dec_fac: a cut keeps at least this percent of Rc
	DCETCPG                  int   // dce_tcp_g: α' = α·G/1024 (+ (1024-G) after a CNP)
	DCETCPRTT                Time  // dce_tcp_rtt: α update period
	RateReduceMonitorPeriod  Time  // rate_reduce_monitor_period: at most one cut per period
	InitialAlphaValue        int   // initial_alpha_value: α on the first CNP, of 1024
	RateToSetOnFirstCNP      int64 // rate_to_set_on_first_cnp: bit/s; 0: cut from the current rate
	ClampTgtRate             bool  // clamp_tgt_rate: every cut sets Rt = Rc
	ClampTgtRateAfterTimeInc bool  // clamp_tgt_rate_after_time_inc: a cut after an increase sets Rt = Rc
}

// DefaultDCQCN returns mlx5's DCQCN defaults (NVIDIA's DCQCN parameter
// page; ../shared/reference/congestion.md §1.5).
func DefaultDCQCN() DCQCNParams {
	return DCQCNParams{
		RPGTimeReset:             300 * Microsecond,
		RPGByteReset:             32767,
		RPGThreshold:             1,
		RPGAIRate:                5_000_000,
		RPGHAIRate:               50_000_000,
		RPGMinRate:               1_000_000,
		RPGGD:                    11,
		RPGMinDecFac:             50,
		DCETCPG:                  1019,
		DCETCPRTT:                1 * Microsecond,
		RateReduceMonitorPeriod:  4 * Microsecond,
		InitialAlphaValue:        1023,
		ClampTgtRateAfterTimeInc: true,
	}
}

// Check reports a parameter set the algorithm cannot run with.
func (p *DCQCNParams) Check() error {
	switch {
	case p.RPGTimeReset <= 0:
		return fmt.Errorf("rp_time_reset %d: must be positive", p.RPGTimeReset)
	case p.DCETCPRTT <= 0:
		return fmt.Errorf("rp_dce_tcp_rtt %d: must be positive", p.DCETCPRTT)
	case p.RateReduceMonitorPeriod < 0:
		return fmt.Errorf("rp_rate_reduce_monitor_period %d: must not be negative", p.RateReduceMonitorPeriod)
	case p.RPGByteReset < 0:
		return fmt.Errorf("rp_byte_reset %d: must not be negative", p.RPGByteReset)
	case p.RPGThreshold < 0 || p.RPGThreshold > 31:
		return fmt.Errorf("rp_threshold %d: must be 0..31", p.RPGThreshold)
	case p.RPGAIRate < 0 || p.RPGHAIRate < 0 || p.RPGMaxRate < 0 || p.RPGMinRate <= 0 || p.RateToSetOnFirstCNP < 0:
		return fmt.Errorf("rates must not be negative, and rp_min_rate must be positive")
	case p.RPGGD < 10 || p.RPGGD > 20:
		return fmt.Errorf("rp_gd %d: must be 10..20", p.RPGGD)
	case p.RPGMinDecFac < 0 || p.RPGMinDecFac > 100:
		return fmt.Errorf("rp_min_dec_fac %d: must be 0..100", p.RPGMinDecFac)
	case p.DCETCPG < 0 || p.DCETCPG > 1024:
		return fmt.Errorf("rp_dce_tcp_g %d: must be 0..1024", p.DCETCPG)
	case p.InitialAlphaValue < 0 || p.InitialAlphaValue > 1024:
		return fmt.Errorf("rp_initial_alpha_value %d: must be 0..1024", p.InitialAlphaValue)
	}
	return nil
}

// dcqcn is one QP's reaction point (Zhu et al., SIGCOMM 2015, as ConnectX
// runs it): a current rate Rc and a target rate Rt; α, the estimate of how
// congested the path is, decays every dce_tcp_rtt and grows in periods that
// saw a CNP; a CNP cuts Rc by α/2 at most once per monitor period; then a
// timer and a byte counter each count stages of increase: fast recovery
// (Rc halfway to Rt) for the first rpg_threshold stages, then additive
// increase of Rt, then hyper increase once both counters pass the
// threshold. All arithmetic is on integers, so a run is the same on every
// machine: α is kept with 20 fractional bits (the parameters give it in
// 1/1024; 10 bits alone would round a slowly decaying α to zero within a
// few microseconds between CNPs).
type dcqcn struct {
	p      *DCQCNParams
	max    int64 // ceiling: rpg_max_rate or the line rate
	rc, rt int64

	alpha   int64 // of 1<<20
	alphaAt Time  // end of the current α period
	cnpSeen bool  // the current α period saw a CNP

	cutAt      Time // the last cut
	cutPending bool // a CNP waits for the monitor period to end
	timerAt    Time // next rate-increase timer stage
	t, bc      int  // timer and byte-counter stages since the last cut
	bytes      int  // bytes towards the next byte-counter stage
	increased  bool // Rc rose since the last cut
	active     bool
}

func newDCQCN(p *DCQCNParams, line int64, now Time) *dcqcn {
	m := line
	if p.RPGMaxRate > 0 && (m <= 0 || p.RPGMaxRate < m) {
		m = p.RPGMaxRate
	}
	if m <= 0 {
		m = 100_000_000_000 // the port's EDR 4X, when nobody said
	}
	return &dcqcn{p: p, max: m, rc: m, rt: m}
}

func (d *dcqcn) Rate() int64 { return d.rc }

func (d *dcqcn) Idle() bool { return !d.active }

func (d *dcqcn) minRate() int64 { return min(max(d.p.RPGMinRate, 1), d.max) }

// CNP starts the algorithm on the first notification, and cuts the rate,
// at once or when the monitor period since the last cut ends.
func (d *dcqcn) CNP(now Time) {
	if !d.active {
		d.active = true
		d.alpha = int64(d.p.InitialAlphaValue) << 10
		d.alphaAt = now + d.p.DCETCPRTT
		d.cnpSeen = false
		d.rt = d.rc
		if r := d.p.RateToSetOnFirstCNP; r > 0 {
			d.rc, d.rt = max(min(r, d.max), d.minRate()), max(min(r, d.max), d.minRate())
			d.restart(now)
			return
		}
		d.cut(now)
		return
	}
	d.advanceAlpha(now)
	d.cnpSeen = true
	if now-d.cutAt >= d.p.RateReduceMonitorPeriod {
		d.cut(now)
	} else {
		d.cutPending = true
	}
}

// cut is the rate decrease: Rt remembers Rc (when the clamp rules say so),
// and Rc falls by α/2^(gd-10), but by no more than rpg_min_dec_fac allows
// and not below rpg_min_rate.
func (d *dcqcn) cut(now Time) {
	d.advanceAlpha(now)
	if d.p.ClampTgtRate || (d.p.ClampTgtRateAfterTimeInc && d.increased) {
		d.rt = d.rc
	}
	dec := d.rc * d.alpha >> (d.p.RPGGD + 10) // α · 1/2^(gd-10)
	floor := d.rc * int64(d.p.RPGMinDecFac) / 100
	d.rc = max(d.rc-dec, floor, d.minRate())
	d.restart(now)
}

// restart begins a new round of increase stages after a cut.
func (d *dcqcn) restart(now Time) {
	d.cutAt, d.cutPending = now, false
	d.t, d.bc, d.bytes = 0, 0, 0
	d.timerAt = now + d.p.RPGTimeReset
	d.increased = false
}

// advanceAlpha applies the α updates of every period that ended by now:
// α·G/1024, plus (1024-G)/1024 for a period that saw a CNP. Only the
// first of them can have seen one (a CNP brings α up to date first), so
// the rest are one multiplication by (G/1024)^k, in constant work however
// long the QP was quiet.
func (d *dcqcn) advanceAlpha(now Time) {
	if d.alphaAt > now {
		return
	}
	per := d.p.DCETCPRTT
	ended := (now-d.alphaAt)/per + 1
	d.alphaAt += ended * per
	g := int64(d.p.DCETCPG) << 10 // G/1024 with 20 fractional bits
	if d.cnpSeen {
		d.alpha = d.alpha*g>>20 + (1<<20 - g)
		d.cnpSeen = false
		ended--
	}
	d.alpha = d.alpha * powQ20(g, int64(ended)) >> 20
}

// powQ20 returns x^k for x a fraction with 20 fractional bits (x <= 1).
func powQ20(x, k int64) int64 {
	r := int64(1 << 20)
	for ; k > 0; k >>= 1 {
		if k&1 != 0 {
			r = r * x >> 20
		}
		x = x * x >> 20
	}
	return r
}

// Sent counts bytes towards the byte counter's next stage.
func (d *dcqcn) Sent(now Time, n int) {
	if !d.active || d.p.RPGByteReset <= 0 {
		return
	}
	d.bytes += n
	for d.bytes >= d.p.RPGByteReset && d.active {
		d.bytes -= d.p.RPGByteReset
		d.bc++
		d.increase()
	}
}

// Tick runs a pending cut and the increase timer.
func (d *dcqcn) Tick(now Time) {
	if !d.active {
		return
	}
	if d.cutPending && now-d.cutAt >= d.p.RateReduceMonitorPeriod {
		d.cut(now)
	}
	for d.active && d.timerAt <= now {
		d.timerAt += d.p.RPGTimeReset
		d.t++
		d.increase()
	}
}

// increase is one stage of rate increase.
func (d *dcqcn) increase() {
	f := d.p.RPGThreshold
	lo, hi := min(d.t, d.bc), max(d.t, d.bc)
	switch {
	case hi < f: // fast recovery
	case lo < f: // additive
		d.rt += d.p.RPGAIRate
	default: // hyper
		d.rt += d.p.RPGHAIRate * int64(lo-f+1)
	}
	d.rt = min(d.rt, d.max)
	d.rc = min((d.rc+d.rt+1)/2, d.max)
	d.increased = true
	if d.rc == d.max && d.rt == d.max && !d.cutPending {
		d.active = false
	}
}

// Deadline is the pending cut or the next timer stage.
func (d *dcqcn) Deadline() Time {
	if !d.active {
		return Never
	}
	dl := d.timerAt
	if d.cutPending {
		dl = min(dl, d.cutAt+d.p.RateReduceMonitorPeriod)
	}
	return dl
}

// State reports the reaction point's variables, for traces and reports.
func (d *dcqcn) State() RateState {
	return RateState{Rate: d.rc, Target: d.rt, Alpha: float64(d.alpha) / (1 << 20), Active: d.active}
}

// RateState is a reaction point's variables at one moment.
type RateState struct {
	Rate, Target int64   // Rc and Rt, bit/s
	Alpha        float64 // α, 0..1
	Active       bool    // below line rate or recovering
}
