package rxe

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/qp"
)

// Congestion is a device's congestion control, as a ConnectX port's ECN
// settings: whether its RoCE packets are sent ECN-capable, whether it
// answers CE marks with CNPs (the notification point) and cuts its QPs'
// rates on CNPs (the reaction point, DCQCN), and their parameters. Kernel
// rxe has none of it; with all of it off (the default) the device sends
// and answers exactly as rxe does, except that it counts CE marks and CNPs.
type Congestion struct {
	// ECN sends RoCE packets ECT(0) unless the address vector's traffic
	// class already sets the ECN bits (mlx5's per-priority roce_np/roce_rp
	// enable, which makes the NIC mark its packets ECN-capable).
	ECN bool
	// CNPDSCP is the DSCP of the CNPs the device sends (np_cnp_dscp).
	CNPDSCP uint8
	// Engine is what the QPs run: NP, RP, the line rate and DCQCN's
	// parameters.
	Engine qp.Congestion
}

// DefaultCongestion returns the settings of a device nobody configured:
// ECN, NP and RP off, mlx5's parameters ready for when they are turned on,
// and the port's line rate.
func DefaultCongestion() Congestion {
	return Congestion{
		CNPDSCP: 48,
		Engine: qp.Congestion{
			MinTimeBetweenCNPs: qp.DefaultMinTimeBetweenCNPs,
			LineRate:           100_000_000_000, // the port reports EDR 4X
			DCQCN:              qp.DefaultDCQCN(),
		},
	}
}

// Enable turns ECN, the notification point and the reaction point on.
func (c *Congestion) Enable() { c.ECN, c.Engine.NP, c.Engine.RP = true, true, true }

// Congestion returns the device's congestion control settings.
func (d *Device) Congestion() Congestion {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cc
}

// SetCongestion replaces the device's congestion control settings; every QP
// uses the new ones from its next packet on, as a ConnectX does when its
// cc_params change.
func (d *Device) SetCongestion(c Congestion) error {
	if err := c.Engine.DCQCN.Check(); err != nil {
		return fmt.Errorf("set congestion control on %s: %w: %w", d.name, err, ErrInvalid)
	}
	if c.Engine.LineRate <= 0 || c.Engine.MinTimeBetweenCNPs < 0 || c.Engine.Burst < 0 || c.CNPDSCP > 63 {
		return fmt.Errorf("set congestion control on %s: line rate must be positive, times not negative, cnp dscp 0..63: %w", d.name, ErrInvalid)
	}
	d.mu.Lock()
	d.cc = c
	d.mu.Unlock()
	return nil
}

// QPRate reports the reaction point of QP qpn: its current and target
// rates and α, and whether it has one (none: it sends at line rate).
func (d *Device) QPRate(qpn uint32) (qp.RateState, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if x := d.qps.get(qpn); x != nil {
		return x.q.RateState()
	}
	return qp.RateState{}, false
}

// congestionParam is one setting under its mlx5 name.
type congestionParam struct {
	name string
	doc  string
	ptr  func(c *Congestion) any // *bool, *uint8, *int, *int64 (bit/s) or *qp.Time
	unit string                  // "", "us", "Mbps", "B", "%", "/1024"
}

// congestionParams lists the settings under mlx5's names and units (debugfs
// cc_params, plus the enables of sysfs ecn/roce_np and roce_rp).
var congestionParams = []congestionParam{
	{"ecn", "send RoCE packets ECT(0)", func(c *Congestion) any { return &c.ECN }, ""},
	{"roce_np", "answer CE marks with CNPs", func(c *Congestion) any { return &c.Engine.NP }, ""},
	{"roce_rp", "cut QP rates on CNPs (DCQCN)", func(c *Congestion) any { return &c.Engine.RP }, ""},
	{"line_rate", "port rate, where DCQCN starts", func(c *Congestion) any { return &c.Engine.LineRate }, "Mbps"},
	{"pace_burst", "time a paced QP may send ahead after idling", func(c *Congestion) any { return &c.Engine.Burst }, "us"},
	{"np_min_time_between_cnps", "", func(c *Congestion) any { return &c.Engine.MinTimeBetweenCNPs }, "us"},
	{"np_cnp_dscp", "", func(c *Congestion) any { return &c.CNPDSCP }, ""},
	{"rp_time_reset", "rate-increase timer", func(c *Congestion) any { return &c.Engine.DCQCN.RPGTimeReset }, "us"},
	{"rp_byte_reset", "bytes per byte-counter stage", func(c *Congestion) any { return &c.Engine.DCQCN.RPGByteReset }, "B"},
	{"rp_threshold", "fast-recovery stages", func(c *Congestion) any { return &c.Engine.DCQCN.RPGThreshold }, ""},
	{"rp_ai_rate", "additive increase", func(c *Congestion) any { return &c.Engine.DCQCN.RPGAIRate }, "Mbps"},
	{"rp_hai_rate", "hyper increase", func(c *Congestion) any { return &c.Engine.DCQCN.RPGHAIRate }, "Mbps"},
	{"rp_max_rate", "ceiling (0: line rate)", func(c *Congestion) any { return &c.Engine.DCQCN.RPGMaxRate }, "Mbps"},
	{"rp_min_rate", "floor", func(c *Congestion) any { return &c.Engine.DCQCN.RPGMinRate }, "Mbps"},
	{"rp_gd", "cut = Rc*alpha/2^(gd-10)", func(c *Congestion) any { return &c.Engine.DCQCN.RPGGD }, ""},
	{"rp_min_dec_fac", "a cut keeps at least this", func(c *Congestion) any { return &c.Engine.DCQCN.RPGMinDecFac }, "%"},
	{"rp_dce_tcp_g", "alpha gain G", func(c *Congestion) any { return &c.Engine.DCQCN.DCETCPG }, "/1024"},
	{"rp_dce_tcp_rtt", "alpha update period", func(c *Congestion) any { return &c.Engine.DCQCN.DCETCPRTT }, "us"},
	{"rp_rate_reduce_monitor_period", "at most one cut per period", func(c *Congestion) any { return &c.Engine.DCQCN.RateReduceMonitorPeriod }, "us"},
	{"rp_initial_alpha_value", "", func(c *Congestion) any { return &c.Engine.DCQCN.InitialAlphaValue }, "/1024"},
	{"rp_rate_to_set_on_first_cnp", "0: cut from the current rate", func(c *Congestion) any { return &c.Engine.DCQCN.RateToSetOnFirstCNP }, "Mbps"},
	{"rp_clamp_tgt_rate", "", func(c *Congestion) any { return &c.Engine.DCQCN.ClampTgtRate }, ""},
	{"rp_clamp_tgt_rate_after_time_inc", "", func(c *Congestion) any { return &c.Engine.DCQCN.ClampTgtRateAfterTimeInc }, ""},
}

// CongestionParamNames lists the settings Set and Params know, in order.
func CongestionParamNames() []string {
	names := make([]string, len(congestionParams))
	for i, p := range congestionParams {
		names[i] = p.name
	}
	return names
}

// Params returns the settings as name, value (in the setting's unit) and
// unit, in mlx5's order and names.
func (c *Congestion) Params() [][3]string {
	out := make([][3]string, 0, len(congestionParams))
	for _, p := range congestionParams {
		out = append(out, [3]string{p.name, formatParam(p.ptr(c), p.unit), p.unit})
	}
	return out
}

func formatParam(v any, unit string) string {
	switch v := v.(type) {
	case *bool:
		if *v {
			return "1"
		}
		return "0"
	case *uint8:
		return strconv.Itoa(int(*v))
	case *int:
		return strconv.Itoa(*v)
	case *int64: // bit/s shown in Mb/s, as mlx5
		return strconv.FormatFloat(float64(*v)/1e6, 'f', -1, 64)
	case *qp.Time: // shown in us
		return strconv.FormatFloat(float64(*v)/1e3, 'f', -1, 64)
	}
	return "?"
}

// Set changes one setting from "name=value" (value in the setting's unit:
// rates in Mb/s, times in microseconds, booleans 0/1), as a write to the
// mlx5 debugfs file of that name does.
func (c *Congestion) Set(kv string) error {
	name, val, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("congestion setting %q: want name=value (names: %s)", kv, strings.Join(CongestionParamNames(), ", "))
	}
	i := slices.IndexFunc(congestionParams, func(p congestionParam) bool { return p.name == name })
	if i < 0 {
		return fmt.Errorf("congestion setting %q: unknown name (names: %s)", name, strings.Join(CongestionParamNames(), ", "))
	}
	p := congestionParams[i]
	bad := func(err error) error { return fmt.Errorf("congestion setting %s=%q (%s): %w", name, val, p.unit, err) }
	switch v := p.ptr(c).(type) {
	case *bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return bad(err)
		}
		*v = b
	case *uint8:
		n, err := strconv.ParseUint(val, 10, 8)
		if err != nil {
			return bad(err)
		}
		*v = uint8(n)
	case *int:
		n, err := strconv.ParseInt(val, 10, 32)
		if err != nil {
			return bad(err)
		}
		*v = int(n)
	case *int64:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f < 0 || f > 1e7 {
			return bad(fmt.Errorf("want 0..10000000 Mb/s"))
		}
		*v = int64(f * 1e6)
	case *qp.Time:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f < 0 || f > float64(time.Hour/time.Microsecond) {
			return bad(fmt.Errorf("want 0..3600000000 us"))
		}
		*v = qp.Time(f * 1e3)
	}
	return nil
}
