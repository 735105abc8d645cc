package fault

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Prob is a probability in units of 1e-9: 0 is never, One is always.
// Integer units keep parsing, printing and deciding exact.
type Prob uint64

// One is probability 1 (100%).
const One Prob = 1_000_000_000

// Percent returns the probability pct/100, rounded to 1e-9.
func Percent(pct float64) Prob { return Prob(pct*1e7 + 0.5) }

// Float returns p as a fraction in [0, 1].
func (p Prob) Float() float64 { return float64(p) / float64(One) }

// threshold returns t such that a uniform 64-bit value is below t with
// probability p (p < One).
func (p Prob) threshold() uint64 {
	q, _ := bits.Div64(uint64(p), 0, uint64(One))
	return q
}

// String writes p as a percentage ("2%", "0.1%").
func (p Prob) String() string { return formatFixed(uint64(p), 7) + "%" }

// fraction writes p as a decimal fraction ("0.01").
func (p Prob) fraction() string { return formatFixed(uint64(p), 9) }

// formatFixed writes v / 10^scale in decimal without trailing zeros.
func formatFixed(v uint64, scale int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	whole, frac := s[:len(s)-scale], strings.TrimRight(s[len(s)-scale:], "0")
	if frac == "" {
		return whole
	}
	return whole + "." + frac
}

// parseFixed reads a non-negative decimal as an integer count of 10^-scale.
func parseFixed(s string, scale int) (uint64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && (!dot || frac == "") {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > scale {
		return 0, fmt.Errorf("%q has more precision than 1e-%d", s, scale)
	}
	digits := whole + frac + strings.Repeat("0", scale-len(frac))
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return v, nil
}

// ParseProb reads "2%", "0.02" or "1".
func ParseProb(s string) (Prob, error) {
	var v uint64
	var err error
	if num, ok := strings.CutSuffix(s, "%"); ok {
		v, err = parseFixed(num, 7)
	} else {
		v, err = parseFixed(s, 9)
	}
	if err != nil {
		return 0, err
	}
	if v > uint64(One) {
		return 0, fmt.Errorf("%q is more than 100%%", s)
	}
	return Prob(v), nil
}

// Gilbert is a Gilbert-Elliott burst-loss channel (see the package doc).
// The zero value is off.
type Gilbert struct {
	P, R      Prob // good->bad and bad->good transition probabilities
	Bad, Good Prob // loss probability in each state
}

// Enabled reports whether the channel ever enters the bad state.
func (g Gilbert) Enabled() bool { return g.P > 0 }

// DefaultReorderDelay is the reorder_delay used when a spec sets none.
const DefaultReorderDelay = 500 * time.Microsecond

// MaxFlipBits is the most bits one corruption flips.
const MaxFlipBits = 8

// Spec says which faults a Model injects. The zero Spec injects none.
type Spec struct {
	Loss         Prob
	Dup          Prob
	Reorder      Prob
	ReorderDelay time.Duration // 0: DefaultReorderDelay
	Corrupt      Prob
	Bits         int // bits flipped per corruption, at most; 0 means 1
	Delay        time.Duration
	Jitter       time.Duration
	Burst        Gilbert
	Seed         uint64
	SeedSet      bool // the spec names a seed
}

// IsZero reports whether s injects no fault.
func (s Spec) IsZero() bool {
	return s.Loss == 0 && s.Dup == 0 && s.Reorder == 0 && s.Corrupt == 0 &&
		s.Delay == 0 && s.Jitter == 0 && !s.Burst.Enabled()
}

// String writes the canonical form of s, which Parse reads back.
func (s Spec) String() string {
	var items []string
	add := func(k, v string) { items = append(items, k+"="+v) }
	if s.Loss != 0 {
		add("loss", s.Loss.String())
	}
	if s.Burst != (Gilbert{}) {
		b := "gilbert:p=" + s.Burst.P.fraction() + ":r=" + s.Burst.R.fraction()
		if s.Burst.Bad != One {
			b += ":bad=" + s.Burst.Bad.fraction()
		}
		if s.Burst.Good != 0 {
			b += ":good=" + s.Burst.Good.fraction()
		}
		add("burst", b)
	}
	if s.Dup != 0 {
		add("dup", s.Dup.String())
	}
	if s.Reorder != 0 {
		add("reorder", s.Reorder.String())
	}
	if s.ReorderDelay != 0 {
		add("reorder_delay", formatDuration(s.ReorderDelay))
	}
	if s.Corrupt != 0 {
		add("corrupt", s.Corrupt.String())
	}
	if s.Bits != 0 {
		add("bits", strconv.Itoa(s.Bits))
	}
	if s.Delay != 0 {
		add("delay", formatDuration(s.Delay))
	}
	if s.Jitter != 0 {
		add("jitter", formatDuration(s.Jitter))
	}
	if s.SeedSet {
		add("seed", strconv.FormatUint(s.Seed, 10))
	}
	return strings.Join(items, ",")
}

// formatDuration writes d in the largest of s, ms, us, ns that is exact,
// in ASCII (time.Duration.String writes "µs").
func formatDuration(d time.Duration) string {
	units := []struct {
		n    time.Duration
		name string
	}{{time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}
	for _, u := range units {
		if d%u.n == 0 {
			return strconv.FormatInt(int64(d/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// Parse reads a spec in the grammar of the package doc. Errors name the
// offending item.
func Parse(str string) (Spec, error) {
	var s Spec
	seen := map[string]bool{}
	if strings.TrimSpace(str) == "" {
		return s, nil
	}
	for _, item := range strings.Split(str, ",") {
		item = strings.TrimSpace(item)
		key, val, ok := strings.Cut(item, "=")
		if !ok || key == "" {
			return Spec{}, fmt.Errorf("fault spec: item %q is not key=value", item)
		}
		if seen[key] {
			return Spec{}, fmt.Errorf("fault spec: %s given twice", key)
		}
		seen[key] = true
		if err := s.set(key, val); err != nil {
			return Spec{}, fmt.Errorf("fault spec: %s: %w", key, err)
		}
	}
	return s, nil
}

func (s *Spec) set(key, val string) error {
	var err error
	switch key {
	case "loss":
		s.Loss, err = ParseProb(val)
	case "dup":
		s.Dup, err = ParseProb(val)
	case "reorder":
		s.Reorder, err = ParseProb(val)
	case "corrupt":
		s.Corrupt, err = ParseProb(val)
	case "reorder_delay":
		s.ReorderDelay, err = parseDuration(val)
	case "delay":
		s.Delay, err = parseDuration(val)
	case "jitter":
		s.Jitter, err = parseDuration(val)
	case "bits":
		s.Bits, err = strconv.Atoi(val)
		if err == nil && (s.Bits < 1 || s.Bits > MaxFlipBits) {
			err = fmt.Errorf("%q is not in 1..%d", val, MaxFlipBits)
		}
	case "seed":
		s.Seed, err = strconv.ParseUint(val, 0, 64)
		s.SeedSet = true
	case "burst":
		s.Burst, err = parseGilbert(val)
	default:
		return fmt.Errorf("unknown item (want loss, dup, reorder, reorder_delay, corrupt, bits, delay, jitter, burst or seed)")
	}
	return err
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 100us", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v)
	}
	return d, nil
}

func parseGilbert(v string) (Gilbert, error) {
	parts := strings.Split(v, ":")
	if parts[0] != "gilbert" {
		return Gilbert{}, fmt.Errorf("%q: the only burst model is gilbert:p=P:r=R", v)
	}
	g := Gilbert{Bad: One}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, pv, ok := strings.Cut(p, "=")
		if !ok {
			return Gilbert{}, fmt.Errorf("%q is not key=value", p)
		}
		if seen[k] {
			return Gilbert{}, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		var dst *Prob
		switch k {
		case "p":
			dst = &g.P
		case "r":
			dst = &g.R
		case "bad":
			dst = &g.Bad
		case "good":
			dst = &g.Good
		default:
			return Gilbert{}, fmt.Errorf("unknown gilbert parameter %q (want p, r, bad, good)", k)
		}
		x, err := ParseProb(pv)
		if err != nil {
			return Gilbert{}, fmt.Errorf("gilbert %s: %w", k, err)
		}
		*dst = x
	}
	if !seen["p"] || !seen["r"] {
		return Gilbert{}, fmt.Errorf("%q: gilbert needs both p and r", v)
	}
	if g.P > 0 && g.R == 0 {
		return Gilbert{}, fmt.Errorf("%q: r=0 would never leave the bad state", v)
	}
	return g, nil
}
