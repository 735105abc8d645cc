package link

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
)

// Faulty returns l with m's faults applied to the frames it sends: drops,
// duplicates, delays (which reorder frames when they differ) and corruption.
// Corruption flips bits of a copy of the frame within its RoCE part (BTH to
// ICRC), so the receiver's ICRC check rejects it; the IP and UDP headers are
// left alone so the frame still reaches its destination. Delayed frames are
// copied and sent by a timer goroutine in due-time order (ties in send
// order), in real time; the simulator uses fault.Model directly with its
// virtual clock instead. Received frames pass through untouched.
//
// m must not be used elsewhere while the link is open.
func Faulty(l Link, m *fault.Model) *FaultyLink {
	f := &FaultyLink{inner: l, m: m, wake: make(chan struct{}, 1), done: make(chan struct{})}
	f.pool.New = func() any { b := make([]byte, 0, l.MTU()+maxL2Header); return &b }
	go f.delayLoop()
	return f
}

// FaultyLink is a link with injected faults on its sending side.
type FaultyLink struct {
	inner Link
	pool  sync.Pool // *[]byte frame copies

	// sendMu serialises sends to the inner link (from Send and the timer)
	// and guards batch and owned; mu guards the model and the queue. Send
	// takes sendMu then mu; the timer never holds both.
	sendMu sync.Mutex
	batch  []Frame
	owned  []*[]byte // copies in batch to return to the pool after sending

	mu      sync.Mutex
	m       *fault.Model
	queue   delayHeap
	seq     uint64
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	closeMu sync.Once

	delayed, sendErrors, discarded atomic.Uint64
}

// Send applies the model to each frame. Frames that pass undelayed are sent
// at once, in one batch; delayed ones later. Dropped frames count as sent.
func (f *FaultyLink) Send(frames []Frame) (int, error) {
	f.sendMu.Lock()
	defer f.sendMu.Unlock()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return 0, ErrClosed
	}
	now := time.Now()
	f.batch = f.batch[:0]
	f.owned = f.owned[:0]
	queued := false
	var pf packet.Frame
	for i := range frames {
		data := frames[i].Data
		off, n := 0, 0
		if packet.ParseFrame(data, &pf) == nil {
			n = len(pf.Transport)
			off = len(pf.Eth) + len(pf.IP) + len(pf.UDP)
		}
		d := f.m.Decide(n)
		for _, c := range d.Copies {
			if c.Delay == 0 && c.FlipBits == nil {
				f.batch = append(f.batch, frames[i])
				continue
			}
			bp := f.pool.Get().(*[]byte)
			b := append((*bp)[:0], data...)
			*bp = b
			if c.FlipBits != nil {
				fault.FlipBits(b[off:off+n], c.FlipBits)
			}
			fr := Frame{Data: b, IPIDUnknown: frames[i].IPIDUnknown}
			if c.Delay == 0 {
				f.batch = append(f.batch, fr)
				f.owned = append(f.owned, bp)
				continue
			}
			f.seq++
			f.queue.push(delayed{due: now.Add(c.Delay), seq: f.seq, frame: fr, buf: bp})
			f.delayed.Add(1)
			queued = true
		}
	}
	f.mu.Unlock()
	var err error
	if len(f.batch) > 0 {
		_, err = f.inner.Send(f.batch)
	}
	for _, bp := range f.owned {
		f.pool.Put(bp)
	}
	if queued {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return 0, err
	}
	return len(frames), nil
}

// delayLoop sends delayed frames when they fall due.
func (f *FaultyLink) delayLoop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []delayed
	var out []Frame
	for {
		f.mu.Lock()
		now := time.Now()
		due = due[:0]
		for f.queue.len() > 0 && !f.queue.peek().due.After(now) {
			due = append(due, f.queue.pop())
		}
		var wait time.Duration = -1
		if f.queue.len() > 0 {
			wait = f.queue.peek().due.Sub(now)
		}
		closed := f.closed
		f.mu.Unlock()
		if len(due) > 0 && !closed {
			out = out[:0]
			for _, d := range due {
				out = append(out, d.frame)
			}
			f.sendMu.Lock()
			if _, err := f.inner.Send(out); err != nil {
				f.sendErrors.Add(uint64(len(out)))
			}
			f.sendMu.Unlock()
		}
		for i := range due {
			f.pool.Put(due[i].buf)
			due[i] = delayed{}
		}
		if closed {
			return
		}
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-f.done:
		case <-f.wake:
		case <-timer.C:
		}
	}
}

// Recv receives from the wrapped link.
func (f *FaultyLink) Recv(frames []Frame) (int, error) { return f.inner.Recv(frames) }

// MTU returns the wrapped link's MTU.
func (f *FaultyLink) MTU() int { return f.inner.MTU() }

// MAC returns the wrapped link's MAC.
func (f *FaultyLink) MAC() [6]byte { return f.inner.MAC() }

// Close discards frames still delayed (counted) and closes the wrapped link.
func (f *FaultyLink) Close() error {
	first := false
	f.closeMu.Do(func() {
		first = true
		f.mu.Lock()
		f.closed = true
		f.discarded.Add(uint64(f.queue.len()))
		for f.queue.len() > 0 {
			f.pool.Put(f.queue.pop().buf)
		}
		f.mu.Unlock()
		close(f.done)
	})
	if !first {
		return ErrClosed
	}
	return f.inner.Close()
}

// Unwrap returns the wrapped link.
func (f *FaultyLink) Unwrap() Link { return f.inner }

// FaultyStats are what a FaultyLink did.
type FaultyStats struct {
	fault.Stats
	Delayed    uint64 // copies sent later
	SendErrors uint64 // delayed frames the wrapped link refused
	Discarded  uint64 // delayed frames dropped by Close
}

// Stats returns the counts of what the link did.
func (f *FaultyLink) Stats() FaultyStats {
	f.mu.Lock()
	ms := f.m.Stats()
	f.mu.Unlock()
	return FaultyStats{Stats: ms, Delayed: f.delayed.Load(), SendErrors: f.sendErrors.Load(), Discarded: f.discarded.Load()}
}

// AppendCounters implements Counting.
func (f *FaultyLink) AppendCounters(dst []Counter) []Counter {
	s := f.Stats()
	return append(dst,
		Counter{"fault_frames", s.Frames}, Counter{"fault_lost", s.Lost},
		Counter{"fault_burst_lost", s.BurstLost}, Counter{"fault_duplicated", s.Duplicated},
		Counter{"fault_reordered", s.Reordered}, Counter{"fault_corrupted", s.Corrupted},
		Counter{"fault_delayed", s.Delayed}, Counter{"fault_send_errors", s.SendErrors},
		Counter{"fault_discarded", s.Discarded})
}

// delayed is a frame copy waiting for its time.
type delayed struct {
	due   time.Time
	seq   uint64
	frame Frame
	buf   *[]byte
}

// delayHeap is a binary min-heap on (due, seq), written out to avoid the
// interface boxing of container/heap.
type delayHeap struct{ h []delayed }

func (q *delayHeap) len() int       { return len(q.h) }
func (q *delayHeap) peek() *delayed { return &q.h[0] }
func (q *delayHeap) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return a.seq < b.seq
}

func (q *delayHeap) push(d delayed) {
	q.h = append(q.h, d)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *delayHeap) pop() delayed {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = delayed{}
	q.h = q.h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q.h) && q.less(l, m) {
			m = l
		}
		if r < len(q.h) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
