package rxe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// Runtime sizes.
const (
	rxBatch = 64
	txBatch = 64
	// rxBufLen is the receive buffer per frame: a jumbo Ethernet frame.
	rxBufLen = 9216 + 64
	// closeBatches bounds the output Close still sends.
	closeBatches = 4
)

// runtime drives a device with the real clock: see Start.
type runtime struct {
	d     *Device
	start time.Time
	txC   chan struct{} // output may be pending
	tmC   chan struct{} // a deadline may have moved earlier
	done  chan struct{}
	wg    sync.WaitGroup
	armed qp.Time // deadline the timer goroutine sleeps until (under armMu)
	armMu sync.Mutex

	// txMu is held by the goroutine that moves output to the link: the
	// transmit goroutine, or the receive goroutine sending what a batch of
	// frames caused (see rxLoop). txFrames are its frames.
	txMu     sync.Mutex
	txFrames []link.Frame
}

// Start runs the device on its link with the real clock: a receive
// goroutine reads frames in batches, hands them to the core and sends a
// batch of what they caused (ACKs, responses, requests the ACKs let into the
// window), a transmit goroutine sends the rest and whatever posted work or
// timers produce, and a timer goroutine runs the QPs' timers at their
// deadlines. Time is nanoseconds on the monotonic clock since Start.
func (d *Device) Start() error {
	if d.link == nil {
		return fmt.Errorf("start %s: %w", d.name, ErrNoLink)
	}
	if d.mu.off {
		return fmt.Errorf("start %s: the device was made SingleThreaded, and its runtime has goroutines of its own: %w", d.name, ErrInvalid)
	}
	r := newRuntime(d)
	if !d.rt.CompareAndSwap(nil, r) {
		return fmt.Errorf("start %s: %w", d.name, ErrAlreadyStart)
	}
	if !d.rnrRateSet {
		d.mu.Lock()
		d.rnrInterval = rnrInterval(DefaultRNRRetryRate)
		d.mu.Unlock()
	}
	r.wg.Add(3)
	go r.rxLoop()
	go r.txLoop()
	go r.timerLoop()
	r.kick()
	return nil
}

// newRuntime returns d's runtime, its goroutines not started.
func newRuntime(d *Device) *runtime {
	r := &runtime{
		d:     d,
		start: time.Now(),
		txC:   make(chan struct{}, 1),
		tmC:   make(chan struct{}, 1),
		done:  make(chan struct{}),
		armed: qp.Never,
	}
	r.txFrames = make([]link.Frame, txBatch)
	for i := range r.txFrames {
		r.txFrames[i].Data = make([]byte, 0, MaxFrameLen)
	}
	return r
}

// Close stops the runtime and closes the link (which is how a blocked
// receive is woken). The device's objects stay usable as a core. What the
// device still owes goes out first, a few batches at most: above all the
// ACKs of QPs destroyed just before (DestroyQP), for messages their
// programs saw complete, which an RNIC would have sent already; a device
// closed at once when its last program exits (softroce run's own) would
// leave their peers retrying.
func (d *Device) Close() error {
	r := d.rt.Load()
	if r == nil || !d.rt.CompareAndSwap(r, nil) {
		if d.link != nil {
			return d.link.Close()
		}
		return nil
	}
	r.txMu.Lock()
	for range closeBatches {
		if !r.sendBatch() {
			break
		}
	}
	r.txMu.Unlock()
	close(r.done)
	err := d.link.Close()
	r.wg.Wait()
	if err != nil {
		return fmt.Errorf("close %s: %w", d.name, err)
	}
	return nil
}

// Now returns the runtime's current time (nanoseconds since Start), or 0
// when the runtime is not running.
func (d *Device) Now() qp.Time {
	if r := d.rt.Load(); r != nil {
		return r.now()
	}
	return 0
}

func (r *runtime) now() qp.Time { return qp.Time(time.Since(r.start)) }

// kick wakes the transmit goroutine, and the timer goroutine when a deadline
// moved before the one it sleeps until. Never blocks.
func (r *runtime) kick() {
	select {
	case r.txC <- struct{}{}:
	default:
	}
	r.kickTimerIfEarlier()
}

func (r *runtime) closing() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *runtime) rxLoop() {
	defer r.wg.Done()
	d := r.d
	// Links that read into the caller's buffers get these; links with their
	// own buffers (Mem) replace Data with theirs.
	bufs := make([][]byte, rxBatch)
	frames := make([]link.Frame, rxBatch)
	for i := range bufs {
		bufs[i] = make([]byte, rxBufLen)
	}
	for {
		for i := range frames {
			frames[i] = link.Frame{Data: bufs[i]}
		}
		n, err := d.link.Recv(frames)
		if err != nil {
			if r.closing() || errors.Is(err, link.ErrClosed) {
				return
			}
			d.mu.Lock()
			d.cnt.RxLinkErrors++
			d.mu.Unlock()
			// A failing link must not spin the CPU.
			select {
			case <-r.done:
				return
			case <-time.After(time.Millisecond):
			}
			continue
		}
		d.handleFrames(r.now(), frames[:n])
		r.sendCaused()
	}
}

// sendCaused sends what a batch of received frames caused: typically ACKs
// on the responder, or, on the requester, the next packets that ACKs let
// into the window. One batch goes out from the receive goroutine itself,
// which saves waking the transmit goroutine on every round trip (four
// goroutine wake-ups per round trip become two); anything beyond one batch
// is left to the transmit goroutine, so that the receive goroutine goes
// back to reading, and the ACKs that keep the window open are not held up
// behind a long send.
func (r *runtime) sendCaused() {
	if !r.txMu.TryLock() {
		r.kick() // the transmit goroutine is sending; it will look again
		return
	}
	more := r.sendBatch()
	r.txMu.Unlock()
	if more {
		r.kick()
	} else {
		r.kickTimerIfEarlier()
	}
}

// sendBatch sends one batch of output and reports whether more remains.
// Called with txMu held.
func (r *runtime) sendBatch() bool {
	d := r.d
	n, more := d.Output(r.now(), r.txFrames)
	if n > 0 {
		if _, err := d.link.Send(r.txFrames[:n]); err != nil && !r.closing() {
			d.mu.Lock()
			d.cnt.TxLinkErrors++
			d.mu.Unlock()
		}
	}
	return more
}

func (r *runtime) txLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.done:
			return
		case <-r.txC:
		}
		r.txMu.Lock()
		for r.sendBatch() && !r.closing() {
		}
		r.txMu.Unlock()
		r.kickTimerIfEarlier()
	}
}

func (r *runtime) kickTimerIfEarlier() {
	r.armMu.Lock()
	armed := r.armed
	r.armMu.Unlock()
	if r.d.Deadline() < armed {
		select {
		case r.tmC <- struct{}{}:
		default:
		}
	}
}

func (r *runtime) timerLoop() {
	defer r.wg.Done()
	d := r.d
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		// While the deadlines are scanned, armed is Never so that any kick
		// in the meantime wakes the loop again instead of being lost.
		r.armMu.Lock()
		r.armed = qp.Never
		r.armMu.Unlock()
		dl := d.Deadline()
		r.armMu.Lock()
		r.armed = dl
		r.armMu.Unlock()
		var tc <-chan time.Time
		if dl != qp.Never {
			wait := time.Duration(dl - r.now())
			if wait < 0 {
				wait = 0
			}
			t.Reset(wait)
			tc = t.C
		}
		select {
		case <-r.done:
			t.Stop()
			return
		case <-r.tmC:
			t.Stop()
		case <-tc:
		}
		if now := r.now(); now >= dl {
			d.Tick(now) // kicks the transmitter via notify
		}
	}
}

// Flush waits until the running device has handed its link everything its
// QPs had to send (ACKs still owed, responses, requests in the window), or
// until ctx is done. Call it before Close when the peer must still hear
// from this device: a responder closing as soon as it sees its last
// completion would otherwise take that message's ACK with it, and the
// requester would retry into the void. On a device without a runtime (the
// simulator's) it returns at once: whoever drives Output flushes.
func (d *Device) Flush(ctx context.Context) error {
	r := d.rt.Load()
	if r == nil {
		return nil
	}
	for d.HasOutput() {
		r.kick()
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush %s: %w", d.name, ctx.Err())
		case <-r.done:
			return nil
		case <-time.After(100 * time.Microsecond):
		}
	}
	// A batch taken from Output before the last check is sent under txMu:
	// once the lock is free, it is on the link.
	r.txMu.Lock()
	r.txMu.Unlock() //nolint:staticcheck // an empty critical section is the point
	return nil
}
