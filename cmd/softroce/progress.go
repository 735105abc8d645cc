package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress is a one-line progress bar for long runs (sim fuzz): seeds done,
// failures and speed, redrawn in place at most ten times a second. It reads
// the wall clock, which is fine here: it only reports on runs whose results
// do not depend on it.
type progress struct {
	w             io.Writer
	on            bool
	total, n, bad int
	start, last   time.Time
}

// newProgress makes a bar over total steps; mode is "on", "off" or "auto"
// (on when w is a terminal).
func newProgress(w io.Writer, total int, mode string) *progress {
	on := mode == "on"
	if mode == "auto" {
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				on = true
			}
		}
	}
	now := time.Now()
	return &progress{w: w, on: on, total: total, start: now}
}

func (p *progress) step(failed bool) {
	p.n++
	if failed {
		p.bad++
	}
	if !p.on {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond || p.n == p.total {
		p.last = now
		p.draw(now)
	}
}

func (p *progress) draw(now time.Time) {
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = p.n * width / p.total
	}
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = '.'
		if i < fill {
			bar[i] = '#'
		}
	}
	rate := float64(p.n) / max(now.Sub(p.start).Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r[%s] %d/%d seeds, %d failed, %.1f seeds/s ", bar, p.n, p.total, p.bad, rate)
}

func (p *progress) done() {
	if p.on && p.n > 0 {
		if p.n != p.total {
			p.draw(time.Now())
		}
		fmt.Fprintln(p.w)
	}
}
