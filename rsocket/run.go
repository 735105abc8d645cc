package rsocket

// run.go: a connection's goroutine: its completions and rdma_cm's word
// that the peer went away.

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

func (c *Conn) run(ctx context.Context) {
	defer close(c.done)
	go func() {
		select {
		case <-c.cm.Done():
			// The peer's DREQ: answer it now (the kernel's rdma_cm
			// does), whenever this side gets round to Close. The QP is
			// flushed; the completion goroutine takes what came before
			// the DREQ first and ends the connection at the first
			// flushed receive, so no data is lost to the race.
			c.mu.Lock()
			if c.state&stConnected != 0 && !c.dreq {
				c.dreq = true
				_ = c.qp.Modify(&verbsapi.QPAttr{State: verbsapi.QPSErr}, verbsapi.QPAttrState)
			}
			answer := !c.cmDone
			c.cmDone = true
			c.mu.Unlock()
			if answer {
				disconnect(c.cm)
			}
		case <-ctx.Done():
		}
	}()
	wc := make([]verbsapi.WC, 32)
	for {
		n, err := c.cq.PollWait(ctx, wc)
		c.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("rsocket: completion queue: %w", err))
			}
			c.mu.Unlock()
			return
		}
		used := 0
		for i := range wc[:n] {
			used += c.complete(&wc[i])
		}
		if c.state&stConnected != 0 {
			for range used {
				if err := c.qp.PostRecv(&verbsapi.RecvWR{ID: recvID}); err != nil {
					c.fail(err)
					break
				}
			}
		}
		c.updateCredits()
		c.notify()
		c.mu.Unlock()
	}
}

// peerGone: the peer disconnected (its DISCONNECT message, or rdma_cm's
// DREQ once what came before it is taken: it closed, or its program
// died). What it sent before stays readable. Called with mu held.
func (c *Conn) peerGone() {
	c.state = 0
	c.notify()
}

// complete takes one completion; it returns 1 for a receive used up.
// Called with mu held.
func (c *Conn) complete(wc *verbsapi.WC) int {
	if wc.ID&recvID == 0 {
		m := uint32(wc.ID)
		switch msgOp(m) {
		case opSGL, opCtrl:
			c.ctrlMax++
		case opIOMap:
			c.sqeAvail++
			c.sbufAvail += 24
		default:
			c.sqeAvail++
			c.sbufAvail += int(msgData(m))
		}
		// (Sends flushed after the peer's DREQ are no failure.)
		if wc.Status != verbsapi.WCSuccess && c.state&stConnected != 0 && !c.dreq {
			err := syscall.ECONNRESET
			if wc.Status == verbsapi.WCRetryExcErr {
				err = syscall.ETIMEDOUT
			}
			c.fail(err)
		}
		return 0
	}
	if wc.Status != verbsapi.WCSuccess {
		// A receive flushed while we think we are connected: after
		// the peer's DREQ, everything before it is taken; otherwise the
		// QP went to error (the peer wrote where it may not, say).
		if c.state&stConnected != 0 {
			if c.dreq {
				c.peerGone()
			} else {
				c.fail(syscall.ECONNRESET)
			}
		}
		return 0
	}
	if wc.Flags&verbsapi.WCWithImm == 0 {
		c.fail(fmt.Errorf("%w: a message without an immediate", ErrProtocol))
		return 1
	}
	c.recvMsg(wc.Imm, wc.ByteLen)
	return 1
}

// recvMsg acts on the peer's immediate; n is the bytes its write carried.
// Called with mu held.
func (c *Conn) recvMsg(m, n uint32) {
	data := msgData(m)
	switch msgOp(m) {
	case opData:
		next := (c.rtail + 1) % len(c.rmsg)
		if int(data) > c.rmr.Len()/2 || next == c.rhead {
			c.fail(fmt.Errorf("%w: %d bytes of data beyond its buffer or credits", ErrProtocol, data))
			return
		}
		if data == 0 || c.readShut {
			return
		}
		c.rmsg[c.rtail] = int(data)
		c.rtail = next
	case opSGL:
		c.sseqComp = uint16(data)
		// A credit message that carries an entry wrote the next one of
		// our target SGL (the peer writes them in turn, from entry 1);
		// read that one only: the peer may be writing the other.
		if n >= sgeLen {
			i := c.tgtNext
			c.tgt[i] = getSGE(c.tmr.Bytes()[i*sgeLen:], binary.NativeEndian)
			c.tgtNext = (i + 1) % sglEntries
		}
	case opIOMap:
	case opCtrl:
		switch data {
		case ctrlDisconnect:
			c.peerGone()
		case ctrlShutdown:
			if c.state&stWritable != 0 {
				c.state &^= stReadable
			} else {
				c.peerGone()
			}
		}
	default:
		c.fail(fmt.Errorf("%w: message type %d", ErrProtocol, msgOp(m)))
	}
}
