package dropin

import (
	"sync"
	"time"
)

// A program that sends a stream of bad requests must not turn the server's
// log into a stream too: lines are let through by a token bucket of
// logBurst lines refilled at logRate a second, and the ones held back are
// counted and reported with the next line let through.
const (
	logBurst = 20
	logRate  = 5
)

type logLimiter struct {
	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed uint64
}

// allow reports whether a line may be written now, and how many lines
// were held back since the last one written.
func (l *logLimiter) allow() (suppressed uint64, ok bool) {
	return l.allowAt(time.Now())
}

func (l *logLimiter) allowAt(now time.Time) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = logBurst
	} else {
		l.tokens = min(logBurst, l.tokens+now.Sub(l.last).Seconds()*logRate)
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return 0, false
	}
	l.tokens--
	n := l.suppressed
	l.suppressed = 0
	return n, true
}
