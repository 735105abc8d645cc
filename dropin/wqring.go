package dropin

// wqring.go: a QP's send and receive queues in memory the daemon shares
// with the program (struct sr_wq_ring in proto.h), the way a kernel
// provider maps its queues. ibv_post_send and ibv_post_recv write a WR
// into the next slot and publish it; the daemon's ring poller (one per
// connection) takes it into the QP. The poller may keep looking for a
// while after each WR it takes (Server.RingSpin), and sleeps on the context's
// doorbell (an eventfd) otherwise, having said so in every send ring: a
// program rings the doorbell only when the poller sleeps, so a stream of
// posts costs no system call and a lone post one write, never a round
// trip. A receive ring asks for no doorbell at all while its QP works:
// the device takes its WRs when a message needs one (recvRefill), as an
// RNIC reads its receive queue, so ibv_post_recv makes no system call, as
// with mlx5, whose receive doorbell is a word in host memory. Only a QP in
// the error state, which must flush what is posted to it, has its receive
// ring ask, and the poller is woken (kickPoller) whenever a QP may have
// entered that state while it slept: after a modify, a WR the daemon
// refused, a completion in error, or a QP's asynchronous event.
//
// The library posts through a ring only what cannot fail there: a QP in
// a state that takes the WR, SGE and inline counts within the QP's caps,
// and room by the daemon's own count of WRs the QP has finished with
// (done), and for READ and atomics an RC QP whose max_rd_atomic the last
// modify or query set above 0 (and an 8-byte, aligned atomic). Anything
// else (binds, local invalidation, a full queue) is a call, which
// takes what waits in the rings first, so the order of a QP's WRs is the
// order they were posted. The program is not trusted here either: each
// slot is copied before it is read, checked as a POST_* body is, and a WR
// the QP refuses moves the QP to the error state, as a malformed WQE does
// on an RNIC; the program's counts only bound how much is read.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// The ring header's layout (proto.h).
const (
	wqRingProd     = 0   // WRs the program wrote
	wqRingCons     = 64  // WRs the daemon took
	wqRingDone     = 128 // of those, finished with (completed, flushed)
	wqRingSleeping = 192 // the poller sleeps: ring the doorbell
	wqRingSlots    = 196
	wqRingSlotSize = 200
	wqRingHeader   = 256
)

// wireWQRing is struct sr_wq_ring's header, for the size check.
type wireWQRing struct {
	Prod            uint32
	_               [wqRingCons - wqRingProd - 4]byte
	Cons            uint32
	_               [wqRingDone - wqRingCons - 4]byte
	Done            uint32
	_               [wqRingSleeping - wqRingDone - 4]byte
	Sleeping        uint32
	Slots, SlotSize uint32
	_               [wqRingHeader - wqRingSlotSize - 4]byte
}

// wqRing is the daemon's side of one ring.
type wqRing struct {
	mem      []byte // header and slots: a window of the QP's mapping
	slots    uint32
	slotSize int
	// cons counts the WRs taken, the daemon's own count: for a send
	// ring the poller adds to it under the connection's lock and the
	// queue watch reads it under the device's, hence atomic.
	cons atomic.Uint32
	// done counts the WRs finished with, as last published: by the
	// queue watch under the device's lock, and by the poller after it
	// took some (a WR can finish before it is counted taken).
	done atomic.Uint32
}

func (r *wqRing) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// pending reports whether the program has published WRs not taken yet.
func (r *wqRing) pending() bool { return atomic.LoadUint32(r.word(wqRingProd)) != r.cons.Load() }

func (r *wqRing) slot(k uint32) []byte {
	off := wqRingHeader + int(k%r.slots)*r.slotSize
	return r.mem[off : off+r.slotSize]
}

// finish publishes done for a queue holding out WRs: those taken and no
// longer held are finished. It runs as the QP's queue watch, under the
// device's lock, before the completions of the WRs that left are pushed,
// and after the poller takes WRs. The count only moves forward, and never
// past the WRs taken: out counts WRs posted by calls too, and a WR being
// taken is in the queue before it is counted taken, which both make done
// smaller, never larger.
func (r *wqRing) finish(out int) {
	cons := r.cons.Load()
	d := cons - uint32(out)
	for {
		cur := r.done.Load()
		if int32(d-cur) <= 0 || int32(cons-d) < 0 {
			return
		}
		if r.done.CompareAndSwap(cur, d) {
			atomic.StoreUint32(r.word(wqRingDone), d)
			return
		}
	}
}

// qpRings is a QP's shared mapping: the send ring, then the receive ring
// (none with an SRQ).
type qpRings struct {
	mem    []byte
	sq, rq *wqRing
}

// ringBytes is the size of a ring of n slots of size each.
func ringBytes(n uint32, size int) int { return wqRingHeader + int(n)*size }

// ringSlot rounds a slot up to 16 bytes, so that every slot's records are
// aligned as the library writes them.
func ringSlot(n int) int { return (n + 15) &^ 15 }

// sendSlot is the slot for a send WR of the QP's caps: struct sr_send_wr,
// then its SGEs or its inline data.
func sendSlot(maxSGE, maxInline int) int {
	return ringSlot(sizeSendWR + max(maxSGE*sizeSGE, maxInline))
}

// recvSlot is the slot for a receive WR: struct sr_recv_wr and its SGEs.
func recvSlot(maxSGE int) int { return ringSlot(sizeRecvWR + maxSGE*sizeSGE) }

// qpRingLayout returns the offsets and total size of a QP's rings.
func qpRingLayout(sqN uint32, sqSlot int, rqN uint32, rqSlot int) (rqOff, total int) {
	rqOff = ringSlot(ringBytes(sqN, sqSlot))
	total = rqOff
	if rqN > 0 {
		total += ringBytes(rqN, rqSlot)
	}
	return rqOff, total
}

// newQPRings maps a QP's rings in a sealed memfd and returns them with the
// memfd to hand the program (the caller closes it once sent). rqN is 0
// for a QP on an SRQ.
func newQPRings(sqN uint32, sqSlot int, rqN uint32, rqSlot int, sleeping bool) (*qpRings, int, error) {
	rqOff, size := qpRingLayout(sqN, sqSlot, rqN, rqSlot)
	mem, fd, err := sharedMemfd("softroce-qp", size)
	if err != nil {
		return nil, -1, fmt.Errorf("qp rings of %d and %d slots: %w", sqN, rqN, err)
	}
	q := &qpRings{mem: mem}
	ring := func(m []byte, n uint32, slot int) *wqRing {
		r := &wqRing{mem: m, slots: n, slotSize: slot}
		*r.word(wqRingSlots), *r.word(wqRingSlotSize) = n, uint32(slot)
		return r
	}
	q.sq = ring(mem[:ringBytes(sqN, sqSlot)], sqN, sqSlot)
	if rqN > 0 {
		q.rq = ring(mem[rqOff:], rqN, rqSlot) // a new QP is not in the error state
	}
	if sleeping {
		*q.sq.word(wqRingSleeping) = 1
	}
	return q, fd, nil
}

// unmap releases the daemon's mapping; nil-safe.
func (q *qpRings) unmap() {
	if q != nil && q.mem != nil {
		unix.Munmap(q.mem)
		q.mem, q.sq, q.rq = nil, nil, nil
	}
}

// setSleeping says in the rings whether a post there must ring the
// doorbell: sq for the send ring, rq for the receive ring.
func (q *qpRings) setSleeping(sq, rq uint32) {
	atomic.StoreUint32(q.sq.word(wqRingSleeping), sq)
	if q.rq != nil {
		atomic.StoreUint32(q.rq.word(wqRingSleeping), rq)
	}
}

// kickPoller notes that a QP may have entered the error state, and wakes
// a sleeping poller to say afresh in each receive ring whether to ring.
// Any goroutine may call it (a completion's, under the device's lock).
// The note (errSeen) comes first: a poller going to sleep stores asleep
// and then reads it, so either it sees the note or this sees it asleep.
func (c *conn) kickPoller() {
	c.errSeen.Store(true)
	if !c.asleep.Load() {
		return
	}
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	if c.bellFD >= 0 {
		ringBell(c.bellFD)
	}
}

// ringBell adds one to the doorbell eventfd fd, as the library does.
func ringBell(fd int) {
	var one [8]byte
	one[0] = 1
	unix.Write(fd, one[:]) // a full eventfd is rung already
}

// drainRingsLocked takes what the program published in its QPs' rings
// into the QPs. Called with c.mu held:
// by every call before it runs (so that a call sees the QPs as the
// program posted to them) and by the poller. Receive rings go first, so
// that a WR posted before a send is in its queue before the send goes
// out. It reports whether it took anything, and whether some send WRs
// wait for room in their QP.
func (c *conn) drainRingsLocked() (worked, blocked bool) {
	for _, s := range c.srqs {
		if s.ring != nil && s.ring.pending() {
			s.srq.RefillRecv()
		}
	}
	for _, q := range c.ringQPs {
		if rq := q.rings.rq; rq != nil && rq.pending() {
			from := rq.cons.Load()
			q.qp.RefillRecv()
			worked = worked || rq.cons.Load() != from
		}
	}
	for _, q := range c.ringQPs {
		took, full := c.drainSend(q)
		worked, blocked = worked || took, blocked || full
		if took {
			// A WR may have finished before it was counted taken.
			s, _ := q.qp.Outstanding()
			q.rings.sq.finish(s)
		}
	}
	return worked, blocked
}

// available returns how many published WRs to look at: at most a ring's
// worth, whatever the program's count says.
func (r *wqRing) available() uint32 {
	return min(atomic.LoadUint32(r.word(wqRingProd))-r.cons.Load(), r.slots)
}

// take copies slot k into the connection's scratch, so that the program
// cannot change a WR while it is read.
func (c *conn) take(r *wqRing) []byte {
	if cap(c.slotBuf) < r.slotSize {
		c.slotBuf = make([]byte, r.slotSize)
	}
	b := c.slotBuf[:r.slotSize]
	copy(b, r.slot(r.cons.Load()))
	return b
}

// drainSend posts the QP's published send WRs; it reports whether it took
// any, and whether some wait because the QP's queue is full.
func (c *conn) drainSend(q *connQP) (took, full bool) {
	r := q.rings.sq
	n := r.available()
	for ; n > 0; n-- {
		b := c.take(r)
		errno := syscall.EINVAL
		sges, extra := sendRecord(b)
		if l := uint64(sizeSendWR) + sges*sizeSGE + extra; l <= uint64(len(b)) &&
			getSendWR(b).Opcode != uint32(verbsapi.WRBindMW) {
			_, errno = c.postSendWRs(q, b[:l], 1)
		}
		if errno == syscall.ENOMEM {
			full = true // the WR waits in the ring for room
			break
		}
		if errno != 0 {
			c.ringRefused(q, "send", errno)
		}
		atomic.StoreUint32(r.word(wqRingCons), r.cons.Add(1))
		took = true
	}
	return took, full
}

// queueWatch returns the QP's queue watch (verbsapi.QP.SetQueueWatch):
// it publishes how many of the rings' WRs the QP has finished with.
func queueWatch(rings *qpRings) func(send, recv int) {
	sq, rq := rings.sq, rings.rq
	return func(send, recv int) {
		sq.finish(send)
		if rq != nil {
			rq.finish(recv)
		}
	}
}

// recvRefill returns the function a QP or SRQ calls when it needs a
// receive WR (verbsapi.QP.SetRecvRefill, verbsapi.SRQ.SetRecvRefill): it
// moves ring r's published WRs into the queue, so the device finds a WR
// the program posted before a message arrived, as an RNIC reads its
// receive queue. It runs under the device's lock, with scratch of its
// own; a WR the queue refuses is dropped and logged (the library never
// writes one). what names the queue in the log.
func (c *conn) recvRefill(r *wqRing, what string) func(post func(*verbsapi.RecvWR) error) {
	buf := make([]byte, r.slotSize)
	sges := make([]verbsapi.SGE, (r.slotSize-sizeRecvWR)/sizeSGE)
	var wr verbsapi.RecvWR
	d, pid := c.d, c.pid
	return func(post func(*verbsapi.RecvWR) error) {
		for n := r.available(); n > 0; n-- {
			copy(buf, r.slot(r.cons.Load()))
			w := getRecvWR(buf)
			var err error = syscall.EINVAL
			if int(w.NumSGE) <= len(sges) {
				s := sges[:w.NumSGE]
				for i := range s {
					g := getSGE(buf[sizeRecvWR+i*sizeSGE:])
					s[i] = verbsapi.SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey}
				}
				wr = verbsapi.RecvWR{ID: w.WRID, SGL: s}
				err = post(&wr)
			}
			if errors.Is(err, verbsapi.ErrQueueFull) {
				break
			}
			if err != nil {
				d.logf("program pid %d: %s: a WR in its receive ring refused and dropped: %v", pid, what, err)
			}
			atomic.StoreUint32(r.word(wqRingCons), r.cons.Add(1))
		}
	}
}

// newSRQRing makes an SRQ's ring of n slots for WRs of up to maxSGE SGEs
// in a sealed shared memfd, and returns it with the memfd to send. The
// device takes from it on every take from the SRQ, so its poller never
// sleeps on it: sleeping stays clear and the library rings no doorbell.
func newSRQRing(n uint32, maxSGE int) (*wqRing, int, error) {
	slot := recvSlot(maxSGE)
	mem, fd, err := sharedMemfd("softroce-srq", ringBytes(n, slot))
	if err != nil {
		return nil, -1, fmt.Errorf("srq ring of %d slots: %w", n, err)
	}
	r := &wqRing{mem: mem, slots: n, slotSize: slot}
	*r.word(wqRingSlots), *r.word(wqRingSlotSize) = n, uint32(slot)
	return r, fd, nil
}

// ringRefused handles a WR from a ring that the QP refused: there is no
// call to fail, so the QP goes to the error state (its WRs flush, the
// program sees why in its completions) and the log says what happened.
func (c *conn) ringRefused(q *connQP, queue string, errno syscall.Errno) {
	c.d.logf("program pid %d: QP %d: a WR in its %s ring refused (%v); the QP goes to the error state",
		c.pid, q.qp.QPN(), queue, errno)
	q.qp.Modify(&verbsapi.QPAttr{State: verbsapi.QPSErr}, verbsapi.QPAttrState)
	c.kickPoller()
}

// doorbell answers SR_OP_DOORBELL: the context's doorbell eventfd, made
// (and the poller started) on first use.
func (c *conn) doorbellFD(b []byte) syscall.Errno {
	if len(b) != 0 {
		return syscall.EINVAL
	}
	if c.bell == nil {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return c.errnoOf(fmt.Errorf("doorbell: %w", err))
		}
		c.bell = os.NewFile(uintptr(fd), "softroce-doorbell")
		c.bellMu.Lock()
		c.bellFD = fd
		c.bellMu.Unlock()
		c.pollStop = make(chan struct{})
		c.pollDone = make(chan struct{})
		go c.pollRings()
	}
	c.bellMu.Lock()
	c.outFD = c.bellFD // borrowed: the connection keeps its doorbell
	c.bellMu.Unlock()
	return 0
}

// pollRings is the connection's ring poller: see the file's comment.
func (c *conn) pollRings() {
	defer close(c.pollDone)
	defer func() {
		// A daemon bug costs the program its poller, not the daemon its
		// life: the rings are still drained by every call.
		if p := recover(); p != nil {
			c.d.logf("program pid %d: ring poller stopped: panic: %v", c.pid, p)
		}
	}()
	var buf [8]byte
	last := time.Now()
	for {
		select {
		case <-c.pollStop:
			return
		default:
		}
		worked, blocked := c.drainRings(false)
		if worked {
			last = time.Now()
			continue
		}
		if blocked {
			// Send WRs wait for room that completions will make: look
			// again shortly rather than spin or sleep on the doorbell.
			time.Sleep(20 * time.Microsecond)
			continue
		}
		if time.Since(last) < c.d.RingSpin {
			runtime.Gosched()
			continue
		}
		// Say so, then look once more: a post published before the
		// program could see the flag is found here, one published after
		// rings the doorbell.
		if worked, blocked := c.drainRings(true); !worked && !blocked {
			c.bell.Read(buf[:])
		}
		c.wake()
		last = time.Now()
	}
}

// drainRings is drainRingsLocked under c.mu; with sleep it first says in
// every ring that the poller sleeps, so that a post published after this
// look rings the doorbell.
func (c *conn) drainRings(sleep bool) (worked, blocked bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sleep {
		c.asleep.Store(true)
		// A receive ring asks for the doorbell only if its QP is in the
		// error state, where a posted WR must be flushed rather than wait
		// for a message to take it. The states (each a take of the
		// device's lock) are asked only after a note that a QP may have
		// failed, and the note stays while one has.
		check, failed := c.errSeen.Swap(false), false
		for _, q := range c.ringQPs {
			var rq uint32
			if check && q.rings.rq != nil && q.qp.State() == verbsapi.QPSErr {
				rq, failed = 1, true
			}
			q.rings.setSleeping(1, rq)
		}
		if failed {
			c.errSeen.Store(true)
		}
	}
	return c.drainRingsLocked()
}

// wake says in every ring that the poller looks again.
func (c *conn) wake() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asleep.Store(false)
	for _, q := range c.ringQPs {
		q.rings.setSleeping(0, 0)
	}
}

// stopPoller ends the ring poller, if any; called without c.mu.
func (c *conn) stopPoller() {
	if c.bell == nil {
		return
	}
	c.bellMu.Lock()
	fd := c.bellFD
	c.bellFD = -1 // closed below: no kick may write to the number after
	c.bellMu.Unlock()
	close(c.pollStop)
	ringBell(fd)
	<-c.pollDone
	c.bell.Close()
	c.bell = nil
}

// dropRingQP forgets a destroyed QP's rings.
func (c *conn) dropRingQP(q *connQP) {
	for i, r := range c.ringQPs {
		if r == q {
			c.ringQPs = append(c.ringQPs[:i], c.ringQPs[i+1:]...)
			break
		}
	}
	q.qp.SetRecvRefill(nil)
	q.qp.SetQueueWatch(nil)
	q.rings.unmap()
	q.rings = nil
}
