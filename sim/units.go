package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/softroce/softroce/sim/netsim"
)

// Duration is a span of simulated time, written in JSON as a Go duration
// string ("1.5ms", "100us") or a number of nanoseconds.
type Duration netsim.Time

// UnmarshalJSON reads "1ms" or 1000000.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("duration %d is negative", n)
		}
		*d = Duration(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"1ms\" or nanoseconds, got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// Bandwidth is a link rate in bits per second, written as "10Gbps",
// "100Mbps", "1.5Gbps", "800kbps" or a number of bits per second.
type Bandwidth int64

// UnmarshalJSON reads a rate.
func (bw *Bandwidth) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("bandwidth %d is negative", n)
		}
		*bw = Bandwidth(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("bandwidth: want a string like \"10Gbps\", got %s", b)
	}
	v, err := parseScaled(s, "bps", 1000)
	if err != nil {
		return fmt.Errorf("bandwidth: %w", err)
	}
	*bw = Bandwidth(v)
	return nil
}

// ByteSize is a size in bytes, written as a number or "64KiB", "1MB",
// "1500B".
type ByteSize int64

// UnmarshalJSON reads a size.
func (bs *ByteSize) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("size %d is negative", n)
		}
		*bs = ByteSize(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("size: want a number or a string like \"64KiB\", got %s", b)
	}
	var v int64
	var err error
	if strings.HasSuffix(s, "iB") {
		v, err = parseScaled(strings.TrimSuffix(s, "iB")+"B", "B", 1024)
	} else {
		v, err = parseScaled(s, "B", 1000)
	}
	if err != nil {
		return fmt.Errorf("size: %w", err)
	}
	*bs = ByteSize(v)
	return nil
}

// parseScaled reads a decimal with an optional k/K, M, G, T prefix before
// unit (and the unit itself optional).
func parseScaled(s, unit string, base int64) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(t, unit)
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = base
		case 'M':
			mult = base * base
		case 'G':
			mult = base * base * base
		case 'T':
			mult = base * base * base * base
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("%q is not a non-negative quantity", s)
	}
	return int64(f*float64(mult) + 0.5), nil
}
