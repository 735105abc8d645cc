package perftest

// perf_lat.go: the latency tests (run_iter_lat_write, run_iter_lat_send,
// run_iter_lat for READ and atomics, and their main sequences).

import (
	"context"
	"fmt"
	"time"

	"github.com/softroce/softroce/verbsapi"
)

func (p *perf) runLat() error {
	o := p.o
	readLike := o.Verb == VerbRead || o.Verb == VerbAtomic
	fmt.Fprint(p.out, perfResultLine+perfLatHeader)
	if readLike && !p.client {
		// ib_read_lat and ib_atomic_lat: the server only waits for the
		// client to close (which both sides of read_lat.c and
		// atomic_lat.c do: a hang-up instead is a dead client).
		if err := p.closeConnAs(true); err != nil {
			return err
		}
		fmt.Fprint(p.out, perfResultLine)
		return nil
	}
	rtt := 2.0
	if readLike {
		rtt = 1
	}
	for _, size := range p.sizes() {
		var posted []int64
		var err error
		switch o.Verb {
		case VerbWrite:
			posted, err = p.latWrite(size)
		case VerbSend:
			posted, err = p.latSend(size)
		default:
			posted, err = p.latRead(size)
		}
		if err != nil {
			return err
		}
		p.printLatReport(size, o.Iters, latReport(posted, rtt))
	}
	fmt.Fprint(p.out, perfResultLine)
	if o.Verb == VerbWrite {
		// write_lat.c ends without ctx_close_connection: each side knows
		// the other is done from the last write landing in its buffer.
		return nil
	}
	return p.closeConn()
}

// waitSent polls the send CQ for the one signaled completion of the last
// post.
func (p *perf) waitSent() error {
	var wc [1]verbsapi.WC
	_, err := p.poll(p.scq, wc[:])
	return err
}

// latWrite is run_iter_lat_write: each side writes its counter into the
// last byte of the peer's buffer and spins on the last byte of its own
// until the peer's write lands; the server writes first.
func (p *perf) latWrite(size uint64) ([]int64, error) {
	o := p.o
	posted := make([]int64, o.Iters)
	wr := p.sendWR(0, size)
	wr.Flags = verbsapi.SendSignaled
	buf := p.mr.Bytes()
	postBuf := int(size) - 1
	pollBuf := o.QPs*p.buffSz + int(size) - 1
	base := time.Now()
	for scnt, rcnt := 0, 0; scnt < o.Iters || rcnt < o.Iters; {
		if rcnt < o.Iters && !(scnt < 1 && !p.client) {
			rcnt++
			if err := p.waitWrite(pollBuf, byte(rcnt)); err != nil {
				return nil, err
			}
		}
		if scnt < o.Iters {
			posted[scnt] = int64(time.Since(base))
			scnt++
			buf[postBuf] = byte(scnt)
			if err := p.qps[0].PostSend(&wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if err := p.waitSent(); err != nil {
				return nil, err
			}
		}
	}
	return posted, nil
}

// waitWrite waits until byte i of the buffer is v, the peer's RDMA WRITE
// having landed, as perftest spins on a volatile byte (verbsapi's
// MR.WaitByte, which reads under the device lock). 30 s without the write
// is an error.
func (p *perf) waitWrite(i int, v byte) error {
	parent := p.runCtx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	if err := p.mr.WaitByte(ctx, i, v); err != nil {
		if cause := context.Cause(parent); cause != nil {
			err = cause
		}
		return fmt.Errorf("no write from the peer (waiting for %d at byte %d): %w", v, i, err)
	}
	return nil
}

// latSend is send_lat.c's loop body for one size: ctx_set_recv_wqes, a
// hand shake (so that the peer sends only once our receives are posted),
// then run_iter_lat_send: SEND against RECV, the client first, a receive
// reposted after each one consumed until the iterations are covered.
func (p *perf) latSend(size uint64) ([]int64, error) {
	o := p.o
	posted := make([]int64, o.Iters)
	depth := min(o.RxDepth, o.Iters)
	if err := p.postRecvs(int(size), depth); err != nil {
		return nil, err
	}
	if err := p.barrier(); err != nil {
		return nil, err
	}
	recvPosted := depth
	wr := p.sendWR(0, size)
	wr.Flags = verbsapi.SendSignaled
	var wc [1]verbsapi.WC
	base := time.Now()
	for scnt, rcnt := 0, 0; scnt < o.Iters || rcnt < o.Iters; {
		if rcnt < o.Iters && !(scnt < 1 && p.client) {
			if _, err := p.poll(p.rcq, wc[:]); err != nil {
				return nil, err
			}
			rcnt++
			if recvPosted < o.Iters {
				if err := p.qps[0].PostRecv(&verbsapi.RecvWR{SGL: []verbsapi.SGE{p.remoteHalf(0, int(size))}}); err != nil {
					return nil, fmt.Errorf("couldn't post receive: %w", err)
				}
				recvPosted++
			}
		}
		if scnt < o.Iters {
			posted[scnt] = int64(time.Since(base))
			scnt++
			if err := p.qps[0].PostSend(&wr); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if err := p.waitSent(); err != nil {
				return nil, err
			}
		}
	}
	return posted, nil
}

// latRead is run_iter_lat for READ and atomics: post one, wait for its
// completion, again.
func (p *perf) latRead(size uint64) ([]int64, error) {
	o := p.o
	posted := make([]int64, o.Iters)
	wr := p.sendWR(0, size)
	wr.Flags = verbsapi.SendSignaled
	base := time.Now()
	for scnt := 0; scnt < o.Iters; scnt++ {
		posted[scnt] = int64(time.Since(base))
		if err := p.qps[0].PostSend(&wr); err != nil {
			return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
		}
		if err := p.waitSent(); err != nil {
			return nil, err
		}
	}
	return posted, nil
}
