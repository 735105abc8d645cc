package perftest

// perf_bw.go: the bandwidth tests (run_iter_bw, run_iter_bw_server and the
// main sequences of write_bw.c, read_bw.c, atomic_bw.c and send_bw.c).

import (
	"fmt"
	"time"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/verbsapi"
)

// sizes is the list of message sizes the run covers: -s, or with -a
// 2 .. 2^23 (atomics: 8 only).
func (p *perf) sizes() []uint64 {
	if !p.o.All || p.o.Verb == VerbAtomic {
		return []uint64{p.o.Size}
	}
	var s []uint64
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

func (p *perf) runBW() error {
	o := p.o
	p.bwHeader()
	if o.Verb == VerbSend {
		return p.runSendBW()
	}
	if !p.client {
		// Half duplex: the server waits for the client to finish, then
		// prints the client's report.
		if err := p.barrier(); err != nil {
			return err
		}
		rem, err := p.oob.ExchangeBWReports(oob.BWReport{})
		if err != nil {
			return err
		}
		p.printBWReport(rem)
		if err := p.closeConn(); err != nil {
			return err
		}
		fmt.Fprint(p.out, perfResultLine)
		return nil
	}
	var last oob.BWReport
	for _, size := range p.sizes() {
		r, err := p.clientBW(size)
		if err != nil {
			return err
		}
		p.printBWReport(r)
		last = r
	}
	fmt.Fprint(p.out, perfResultLine)
	if err := p.barrier(); err != nil {
		return err
	}
	if _, err := p.oob.ExchangeBWReports(last); err != nil {
		return err
	}
	return p.closeConn()
}

// runSendBW is send_bw.c's regular and -a loops: the server posts its
// receives, a barrier, then the client sends and the server counts.
func (p *perf) runSendBW() error {
	for _, size := range p.sizes() {
		if !p.client {
			if err := p.postRecvs(int(size), p.o.RxDepth); err != nil {
				return err
			}
		}
		if err := p.barrier(); err != nil {
			return err
		}
		var r oob.BWReport
		var err error
		if p.client {
			r, err = p.clientBW(size)
		} else {
			r, err = p.serverSendBW(size)
		}
		if err != nil {
			return err
		}
		p.printBWReport(r)
		if p.o.All {
			if err := p.barrier(); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(p.out, perfResultLine)
	return p.closeConn()
}

// postRecvs posts n receives of size bytes on every QP, into its remote
// half.
func (p *perf) postRecvs(size, n int) error {
	for i, q := range p.qps {
		for k := 0; k < n; k++ {
			if err := q.PostRecv(&verbsapi.RecvWR{ID: uint64(i), SGL: []verbsapi.SGE{p.remoteHalf(i, size)}}); err != nil {
				return fmt.Errorf("couldn't post receive: %w", err)
			}
		}
	}
	return nil
}

// sendWR builds the work request the verb posts on QP i.
func (p *perf) sendWR(i int, size uint64) verbsapi.SendWR {
	rem := p.rem[i]
	wr := verbsapi.SendWR{SGL: []verbsapi.SGE{p.local(i, int(size))}}
	switch p.o.Verb {
	case VerbSend:
		wr.Opcode = verbsapi.WRSend
	case VerbWrite:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbsapi.WRWrite, rem.VAddr, rem.RKey
	case VerbRead:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbsapi.WRRead, rem.VAddr, rem.RKey
	case VerbAtomic:
		wr.Opcode, wr.RemoteAddr, wr.RKey = p.atomic, rem.VAddr, rem.RKey
		wr.SGL[0].Length = 8
		if p.atomic == verbsapi.WRFetchAdd {
			wr.CompareAdd = 1
		}
	}
	return wr
}

// clientBW is run_iter_bw: every QP posts iters requests, at most tx-depth
// outstanding each, signaling every cq-mod-th and the last; posted and
// completed times feed the report.
func (p *perf) clientBW(size uint64) (oob.BWReport, error) {
	o := p.o
	total := o.Iters * len(p.qps)
	// With NoPeak (perftest's -N, and every run over 20,000 iterations)
	// only the first post and the last completion count, as in perftest:
	// one slot each, so even 100,000,000 iterations cost no memory.
	slots, slot := total, func(i int) int { return i }
	if o.NoPeak {
		slots, slot = 1, func(int) int { return 0 }
	}
	posted := make([]int64, slots)
	completed := make([]int64, slots)
	scnt := make([]int, len(p.qps))
	ccnt := make([]int, len(p.qps))
	wrs := make([]verbsapi.SendWR, len(p.qps))
	for i := range p.qps {
		wrs[i] = p.sendWR(i, size)
	}
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	totS, totC := 0, 0
	wc := make([]verbsapi.WC, 16)
	for totC < total {
		for i, q := range p.qps {
			for scnt[i] < o.Iters && scnt[i]-ccnt[i] < o.TxDepth {
				wr := &wrs[i]
				wr.ID = uint64(scnt[i] + 1) // completions report how far the QP got
				wr.Flags = 0
				if scnt[i]%o.CQMod == o.CQMod-1 || scnt[i] == o.Iters-1 {
					wr.Flags = verbsapi.SendSignaled
				}
				if !o.NoPeak || totS == 0 {
					posted[slot(totS)] = now()
				}
				if err := q.PostSend(wr); err != nil {
					return oob.BWReport{}, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt[i], err)
				}
				scnt[i]++
				totS++
			}
		}
		n, err := p.poll(p.scq, wc)
		if err != nil {
			return oob.BWReport{}, err
		}
		t := now()
		for _, c := range wc[:n] {
			i, ok := p.qpIdx[c.QPN]
			if !ok {
				return oob.BWReport{}, fmt.Errorf("completion for unknown QP 0x%x", c.QPN)
			}
			done := int(c.ID) - ccnt[i]
			ccnt[i] = int(c.ID)
			totC += done
			completed[slot(min(totC, total)-1)] = t
		}
	}
	return bwReport(size, total, posted, completed, o.CQMod, o.NoPeak, o.Gbits), nil
}

// serverSendBW is run_iter_bw_server: count the iterations' receives,
// reposting while more are due. The server's own report covers first to
// last receive, without a peak (perftest's send server runs noPeak).
func (p *perf) serverSendBW(size uint64) (oob.BWReport, error) {
	o := p.o
	total := o.Iters * len(p.qps)
	posted := make([]int, len(p.qps))
	for i := range posted {
		posted[i] = o.RxDepth
	}
	var first, last time.Time
	wc := make([]verbsapi.WC, 16)
	for rcnt := 0; rcnt < total; {
		n, err := p.poll(p.rcq, wc)
		if err != nil {
			return oob.BWReport{}, err
		}
		t := time.Now()
		if rcnt == 0 {
			first = t
		}
		for _, c := range wc[:n] {
			if c.ByteLen != uint32(size) {
				return oob.BWReport{}, fmt.Errorf("received %d bytes, want %d", c.ByteLen, size)
			}
			rcnt++
			i := int(c.ID)
			if posted[i] < o.Iters {
				if err := p.qps[i].PostRecv(&verbsapi.RecvWR{ID: uint64(i), SGL: []verbsapi.SGE{p.remoteHalf(i, int(size))}}); err != nil {
					return oob.BWReport{}, fmt.Errorf("couldn't post receive: %w", err)
				}
				posted[i]++
			}
		}
		last = t
	}
	ns := []int64{0}
	done := []int64{int64(last.Sub(first))}
	if n := last.Sub(first); n <= 0 {
		done[0] = 1
	}
	r := bwReport(size, total, ns, done, 1, true, o.Gbits)
	return r, nil
}
