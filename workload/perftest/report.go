package perftest

// perf_report.go: perftest's printing (perftest_parameters.c,
// perftest_communication.c) and its bandwidth and latency arithmetic, with
// nanoseconds where perftest counts CPU cycles.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/softroce/softroce/oob"
)

// perfResultLine is perftest's RESULT_LINE.
const perfResultLine = "---------------------------------------------------------------------------------------\n"

// Result table headers (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT).
const (
	perfBWHeader    = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	perfBWHeaderG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	perfLatHeader   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	perfSecondNanos = 1e9
)

// cHex formats v as C's "%#0<width>x": zero-padded to width including the
// "0x", which C leaves out for 0.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// printTestInfo is ctx_print_test_info.
func (p *perf) printTestInfo() {
	o := p.o
	var b strings.Builder
	b.WriteString(perfResultLine)
	b.WriteString("                    ")
	b.WriteString(perfVerbNames[o.Verb] + " ")
	if o.Verb == VerbAtomic {
		b.WriteString(o.AtomicType + " ")
	}
	b.WriteString(p.tst() + " Test\n")
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", p.ctx.Name())
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", o.QPs)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : OFF\n", strings.ToUpper(o.Conn))
	// There is no PCIe to relax and no ibv_wr_* API underneath.
	b.WriteString(" PCIe relax order: OFF\n")
	b.WriteString(" ibv_wr* API     : OFF\n")
	if p.client {
		fmt.Fprintf(&b, " TX depth        : %d\n", o.TxDepth)
	}
	if o.Verb == VerbSend && !p.client {
		fmt.Fprintf(&b, " RX depth        : %d\n", o.RxDepth)
	}
	if !o.Lat {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", o.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", int(p.mtu))
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&b, " GID index       : %d\n", o.GIDIndex)
	if o.Verb != VerbRead && o.Verb != VerbAtomic {
		b.WriteString(" Max inline data : 0[B]\n")
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", o.OutReads)
	}
	b.WriteString(" rdma_cm QPs\t : OFF\n")
	b.WriteString(" Data ex. method : Ethernet\n")
	b.WriteString(perfResultLine)
	fmt.Fprint(p.out, b.String())
}

// printDest is ctx_print_pingpong_data.
func (p *perf) printDest(side string, d oob.PerftestDest) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	switch p.o.Verb {
	case VerbRead:
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, g := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", g)
	}
	b.WriteString("\n")
	fmt.Fprint(p.out, b.String())
}

// bwHeader prints the result table header.
func (p *perf) bwHeader() {
	h := perfBWHeader
	if p.o.Gbits {
		h = perfBWHeaderG
	}
	fmt.Fprint(p.out, perfResultLine+h)
}

// bwReport is print_report_bw's arithmetic on one run: posted and completed
// times (ns) of every message, in post order; with noPeak only [0] counts,
// and must be the first post and the last completion.
func bwReport(size uint64, iters int, posted, completed []int64, cqMod int, noPeak, gbits bool) oob.BWReport {
	format := float64(0x100000)
	if gbits {
		format = 125000000
	}
	rep := oob.BWReport{Size: size, Iters: uint64(iters)}
	last := iters - 1
	if noPeak {
		last = 0
	}
	total := float64(completed[last] - posted[0])
	if total <= 0 {
		total = 1
	}
	rep.BWAvg = float64(size) * float64(iters) * perfSecondNanos / (total * format)
	rep.MsgRate = float64(iters) * perfSecondNanos / (total * 1e6)
	if !noPeak {
		// The shortest time per message over any run of messages ending
		// at a signaled completion.
		opt := total
		for i := 0; i < iters; i++ {
			j := (i+1+cqMod-1)/cqMod*cqMod - 1
			for ; j < iters; j += cqMod {
				if t := float64(completed[j]-posted[i]) / float64(j-i+1); t < opt {
					opt = t
				}
			}
			if iters%cqMod != 0 {
				j = iters - 1
				if t := float64(completed[j]-posted[i]) / float64(j-i+1); t < opt {
					opt = t
				}
			}
		}
		if opt <= 0 {
			opt = 1
		}
		rep.BWPeak = float64(size) * perfSecondNanos / (opt * format)
	}
	return rep
}

// printBWReport is print_full_bw_report (REPORT_FMT, or REPORT_FMT_EXT for
// small Gbit/s figures).
func (p *perf) printBWReport(r oob.BWReport) {
	if p.o.Gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(p.out, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	fmt.Fprintf(p.out, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// latStats is print_report_lat's arithmetic: samples are the times
// between successive posts (ns), divided by rtt (2 for ping-pong tests, 1
// for READ and atomics); the two largest are dropped.
type latStats struct {
	min, max, typical, avg, stdev, p99, p999 float64
}

func latReport(posted []int64, rtt float64) latStats {
	n := len(posted) - 1
	delta := make([]float64, n)
	for i := range delta {
		delta[i] = float64(posted[i+1]-posted[i]) / 1e3 / rtt
	}
	slices.Sort(delta)
	const tail = 2
	m := n - tail
	var s latStats
	var median float64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += d
	}
	s.avg = sum / float64(m)
	var vs float64
	for _, d := range delta[:m] {
		vs += (s.avg - d) * (s.avg - d)
	}
	s.min, s.max, s.typical = delta[0], delta[m], median
	s.stdev = math.Sqrt(vs / float64(m))
	s.p99 = delta[int(math.Ceil(float64(m)*0.99))]
	s.p999 = delta[int(math.Ceil(float64(m)*0.999))]
	return s
}

// printLatReport is REPORT_FMT_LAT.
func (p *perf) printLatReport(size uint64, iters int, s latStats) {
	fmt.Fprintf(p.out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999)
}
