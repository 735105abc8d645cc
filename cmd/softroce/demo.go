package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newDemoCmd) }

const demoLong = `demo runs two softroce devices in this process, joined by an in-memory link
that loses and reorders packets (seeded, so --seed picks the faults), and
exercises the whole stack between them through the verbs API: RC SEND/RECV,
RDMA WRITE with immediate, RDMA READ, atomic compare-and-swap and
fetch-and-add, and a UD SEND (resent by the demo when the link loses it, as
UD applications do). Every byte received is checked against what was sent.

The report lists each operation (ok or FAILED, bytes, time from post to
completion), then the devices' counters: packets sent and received,
retransmissions, NAKs, sequence errors and duplicates, and what the link's
fault injection did. Both directions of the traffic are captured, as device
rxe0 sees it, to a pcapng file (--pcap, or a file in the system's temporary
directory whose path is printed): frames are written before faults apply on
the sending side, so the capture holds every packet sent, including those
the link then lost, and every frame has a good ICRC. Look at it with
'softroce decode FILE' or Wireshark.

Exit status: 0 when every operation succeeded and every captured frame is
good; 1 otherwise; 2 when the demo cannot run.`

// demoOptions are the demo's flags.
type demoOptions struct {
	loss, reorder string
	seed          uint64
	pcap          string
	size          int
	mtu           int
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run two devices over a lossy in-memory link and exercise every RDMA operation",
		Long:  demoLong,
		Example: `  softroce demo
  softroce demo --loss 10% --reorder 5% --seed 7 --pcap demo.pcapng
  softroce decode demo.pcapng`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.loss, "loss", "2%", "probability that the link loses a packet (each direction)")
	f.StringVar(&o.reorder, "reorder", "1%", "probability that the link delays a packet behind later ones")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the fault injection and of the data")
	f.StringVar(&o.pcap, "pcap", "", "capture file to write (default: softroce-demo.pcapng in a new temporary directory)")
	f.IntVar(&o.size, "size", 64<<10, "bytes per SEND, WRITE and READ")
	f.IntVar(&o.mtu, "mtu", 0, "link MTU, the largest IP packet (0: 1500, a 1024-byte path MTU)")
	return cmd
}

// demoHost is one device's side of the demo.
type demoHost struct {
	ctx  *verbsapi.Context
	pd   *verbsapi.PD
	cq   *verbsapi.CQ
	rc   *verbsapi.QP
	ud   *verbsapi.QP
	mr   *verbsapi.MR
	addr string
}

// demoResult is one line of the report.
type demoResult struct {
	name   string
	bytes  int
	took   time.Duration
	detail string
	err    error
}

// demoWait bounds every wait for a completion: with the default faults an
// operation takes milliseconds; a lost completion must fail, not hang.
const demoWait = 30 * time.Second

func runDemo(out io.Writer, o demoOptions) error {
	if o.size < 1 || o.size > 1<<24 {
		return usageError{fmt.Errorf("--size %d: want 1 .. 16777216 bytes", o.size)}
	}
	spec := []string{}
	for _, kv := range [][2]string{{"loss", o.loss}, {"reorder", o.reorder}} {
		if v := strings.TrimSpace(kv[1]); v != "" && v != "0" && v != "0%" {
			spec = append(spec, kv[0]+"="+v)
		}
	}
	pcapPath := o.pcap
	if pcapPath == "" {
		dir, err := os.MkdirTemp("", "softroce-demo-")
		if err != nil {
			return exitError{exitTrouble, err}
		}
		pcapPath = filepath.Join(dir, "softroce-demo.pcapng")
	}
	lf := linkFlags{Link: "mem", Addr: "10.0.0.1", Pcap: pcapPath, Fault: strings.Join(spec, ","),
		MTU: o.mtu, Seed: o.seed, FaultSeed: o.seed}
	a, b, closePair, err := openDevicePair(lf, "rxe0", "rxe1")
	if err != nil {
		return exitError{exitTrouble, err}
	}
	results, setupErr := runDemoOps(a, b, o)
	ca, cb := a.Counters(), b.Counters()
	linkA, linkB := link.Counters(a.Device().Link()), link.Counters(b.Device().Link())
	port, _ := a.QueryPort(1)
	if err := closePair(); err != nil && setupErr == nil {
		setupErr = err
	}
	if setupErr != nil {
		return exitError{exitTrouble, fmt.Errorf("demo: %w", setupErr)}
	}
	capt, capErr := checkCapture(pcapPath)

	faults := lf.Fault
	if faults == "" {
		faults = "no faults"
	}
	fmt.Fprintf(out, "softroce demo: rxe0 (10.0.0.1) <-> rxe1 (10.0.0.2), in-memory link, %s, seed %d, path MTU %d\n\n",
		faults, o.seed, port.ActiveMTU)
	failed := 0
	for _, r := range results {
		status := "ok"
		if r.err != nil {
			status = "FAILED"
			failed++
		}
		fmt.Fprintf(out, "  %-22s %-6s %8d bytes %10s", r.name, status, r.bytes, r.took.Round(time.Microsecond))
		switch {
		case r.err != nil:
			fmt.Fprintf(out, "  %v", r.err)
		case r.detail != "":
			fmt.Fprintf(out, "  %s", r.detail)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "\n  %-22s %10s %10s\n", "counters", "rxe0", "rxe1")
	rows := []struct {
		name string
		a, b uint64
	}{
		{"sent_pkts", ca.SentPkts, cb.SentPkts},
		{"rcvd_pkts", ca.RcvdPkts, cb.RcvdPkts},
		{"retransmits", ca.Retransmits, cb.Retransmits},
		{"naks_sent", ca.NAKsSent, cb.NAKsSent},
		{"rcvd_seq_err", ca.RcvdSeqErr, cb.RcvdSeqErr},
		{"out_of_seq_request", ca.OutOfSeqRequest, cb.OutOfSeqRequest},
		{"duplicate_request", ca.DuplicateRequest, cb.DuplicateRequest},
		{"link: frames lost", linkCounter(linkA, "fault_lost"), linkCounter(linkB, "fault_lost")},
		{"link: frames reordered", linkCounter(linkA, "fault_reordered"), linkCounter(linkB, "fault_reordered")},
		{"link: queue drops", linkCounter(linkA, "mem_queue_drop"), linkCounter(linkB, "mem_queue_drop")},
	}
	for _, r := range rows {
		fmt.Fprintf(out, "  %-22s %10d %10d\n", r.name, r.a, r.b)
	}
	fmt.Fprintln(out)
	switch {
	case capErr != nil:
		fmt.Fprintf(out, "  capture %s: %v\n", pcapPath, capErr)
	default:
		fmt.Fprintf(out, "  capture %s: %d frames, %d RoCE, %d good, %d bad\n", pcapPath, capt.frames, capt.roce, capt.good, capt.bad)
	}
	if failed > 0 || capErr != nil || capt.bad > 0 {
		fmt.Fprintf(out, "  result: FAILED (%d of %d operations failed, %d bad frames)\n", failed, len(results), capt.bad)
		return exitError{exitFailed, nil}
	}
	fmt.Fprintf(out, "  result: all %d operations ok, every byte verified\n", len(results))
	return nil
}

func linkCounter(cs []link.Counter, name string) uint64 {
	var v uint64
	for _, c := range cs {
		if c.Name == name {
			v += c.Value
		}
	}
	return v
}

// setupDemoHost creates a host's PD, CQ, QPs and memory.
func setupDemoHost(ctx *verbsapi.Context, size int) (*demoHost, error) {
	h := &demoHost{ctx: ctx}
	var err error
	if h.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if h.cq, err = ctx.CreateCQ(256, nil); err != nil {
		return nil, err
	}
	caps := verbsapi.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	if h.rc, err = h.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq, QPType: verbsapi.RC, Cap: caps}); err != nil {
		return nil, err
	}
	if h.ud, err = h.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: h.cq, RecvCQ: h.cq, QPType: verbsapi.UD, Cap: caps}); err != nil {
		return nil, err
	}
	// Layout: [0, size) send/receive data, [size, 2size) RDMA target,
	// then 64 bytes for atomics, then 8 KiB for UD.
	if h.mr, err = h.pd.RegMR(make([]byte, 2*size+64+8192), verbsapi.AccessAll); err != nil {
		return nil, err
	}
	return h, nil
}

// runDemoOps sets up both hosts and runs the operations. The error is a
// setup failure; operation failures are in the results.
func runDemoOps(ca, cb *verbsapi.Context, o demoOptions) ([]demoResult, error) {
	a, err := setupDemoHost(ca, o.size)
	if err != nil {
		return nil, err
	}
	b, err := setupDemoHost(cb, o.size)
	if err != nil {
		return nil, err
	}
	// A short ACK timeout (4 ms) so that a lost last packet costs little;
	// the rest are ibv_rc_pingpong's settings.
	conn := &verbsapi.ConnOptions{Timeout: 10}
	ea, err := a.rc.Endpoint(1, uint32(o.seed*7919))
	if err != nil {
		return nil, err
	}
	eb, err := b.rc.Endpoint(1, uint32(o.seed*104729))
	if err != nil {
		return nil, err
	}
	if err := a.rc.Connect(ea.PSN, eb, conn); err != nil {
		return nil, err
	}
	if err := b.rc.Connect(eb.PSN, ea, conn); err != nil {
		return nil, err
	}
	for _, h := range []*demoHost{a, b} {
		if err := h.ud.Connect(0, verbsapi.Endpoint{}, nil); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x736f6674726f6365))
	d := &demo{a: a, b: b, size: o.size, rng: rng}
	ops := []struct {
		name string
		run  func() (int, string, error)
	}{
		{"RC SEND/RECV", d.send},
		{"RC RDMA WRITE with imm", d.writeImm},
		{"RC RDMA READ", d.read},
		{"RC ATOMIC CMP_AND_SWP", d.cmpSwap},
		{"RC ATOMIC FETCH_ADD", d.fetchAdd},
		{"UD SEND", d.udSend},
	}
	var results []demoResult
	for _, op := range ops {
		start := time.Now()
		n, detail, err := op.run()
		results = append(results, demoResult{name: op.name, bytes: n, took: time.Since(start), detail: detail, err: err})
	}
	return results, nil
}

// demo holds the state the operations share.
type demo struct {
	a, b *demoHost
	size int
	rng  *rand.Rand
	swap uint64 // value the CAS leaves for FETCH_ADD
}

// fill writes random bytes to p.
func (d *demo) fill(p []byte) {
	for i := 0; i < len(p); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], d.rng.Uint64())
		copy(p[i:], w[:])
	}
}

// expect waits for the next completion of h's CQ and checks it.
func expect(h *demoHost, who string, op verbsapi.WCOpcode, id uint64) (verbsapi.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), demoWait)
	defer cancel()
	wc := make([]verbsapi.WC, 1)
	if _, err := h.cq.PollWait(ctx, wc); err != nil {
		return verbsapi.WC{}, fmt.Errorf("%s: waiting for %s completion: %w", who, op, err)
	}
	w := wc[0]
	if w.Status != verbsapi.WCSuccess {
		// An error completion's opcode is undefined (verbs): name the
		// one expected.
		return w, fmt.Errorf("%s: %s completion %d: status %s", who, op, w.ID, w.Status)
	}
	if w.Opcode != op || w.ID != id {
		return w, fmt.Errorf("%s: got %s completion %d, want %s %d", who, w.Opcode, w.ID, op, id)
	}
	return w, nil
}

func compare(what string, got, want []byte) error {
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("%s: byte %d is %#02x, sent %#02x", what, i, got[i], want[i])
		}
	}
	return nil
}

func (d *demo) send() (int, string, error) {
	a, b, n := d.a, d.b, d.size
	clear(b.mr.Bytes()[:n])
	if err := b.rc.PostRecv(&verbsapi.RecvWR{ID: 1, SGL: []verbsapi.SGE{b.mr.SGE(0, n)}}); err != nil {
		return 0, "", err
	}
	d.fill(a.mr.Bytes()[:n])
	if err := a.rc.PostSend(&verbsapi.SendWR{ID: 2, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, n)}}); err != nil {
		return 0, "", err
	}
	if _, err := expect(a, "rxe0", verbsapi.WCSend, 2); err != nil {
		return 0, "", err
	}
	wc, err := expect(b, "rxe1", verbsapi.WCRecv, 1)
	if err != nil {
		return 0, "", err
	}
	if int(wc.ByteLen) != n {
		return 0, "", fmt.Errorf("rxe1 received %d bytes, sent %d", wc.ByteLen, n)
	}
	return n, "", compare("received data", b.mr.Bytes()[:n], a.mr.Bytes()[:n])
}

func (d *demo) writeImm() (int, string, error) {
	a, b, n := d.a, d.b, d.size
	// WRITE with immediate consumes a receive; it needs no buffer.
	if err := b.rc.PostRecv(&verbsapi.RecvWR{ID: 3}); err != nil {
		return 0, "", err
	}
	d.fill(a.mr.Bytes()[:n])
	imm := uint32(d.rng.Uint64())
	if err := a.rc.PostSend(&verbsapi.SendWR{ID: 4, Opcode: verbsapi.WRWriteImm, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr() + uint64(n), RKey: b.mr.RKey(), Imm: imm}); err != nil {
		return 0, "", err
	}
	if _, err := expect(a, "rxe0", verbsapi.WCRDMAWrite, 4); err != nil {
		return 0, "", err
	}
	wc, err := expect(b, "rxe1", verbsapi.WCRecvRDMAImm, 3)
	if err != nil {
		return 0, "", err
	}
	if wc.Flags&verbsapi.WCWithImm == 0 || wc.Imm != imm {
		return 0, "", fmt.Errorf("rxe1 got immediate %#x (flags %#x), sent %#x", wc.Imm, wc.Flags, imm)
	}
	return n, fmt.Sprintf("imm 0x%08x", imm), compare("written data", b.mr.Bytes()[n:2*n], a.mr.Bytes()[:n])
}

func (d *demo) read() (int, string, error) {
	a, b, n := d.a, d.b, d.size
	d.fill(b.mr.Bytes()[n : 2*n])
	clear(a.mr.Bytes()[n : 2*n])
	if err := a.rc.PostSend(&verbsapi.SendWR{ID: 5, Opcode: verbsapi.WRRead, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{a.mr.SGE(n, n)}, RemoteAddr: b.mr.Addr() + uint64(n), RKey: b.mr.RKey()}); err != nil {
		return 0, "", err
	}
	if _, err := expect(a, "rxe0", verbsapi.WCRDMARead, 5); err != nil {
		return 0, "", err
	}
	return n, "", compare("read data", a.mr.Bytes()[n:2*n], b.mr.Bytes()[n:2*n])
}

// atomicWord returns the offset of the 8-byte word the atomics use.
func (d *demo) atomicWord() int { return 2 * d.size }

func (d *demo) cmpSwap() (int, string, error) {
	a, b, off := d.a, d.b, d.atomicWord()
	word := b.mr.Bytes()[off : off+8]
	old, swap := d.rng.Uint64(), d.rng.Uint64()
	binary.LittleEndian.PutUint64(word, old)
	if err := a.rc.PostSend(&verbsapi.SendWR{ID: 6, Opcode: verbsapi.WRCmpSwap, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(off, 8)},
		RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey(), CompareAdd: old, Swap: swap}); err != nil {
		return 0, "", err
	}
	if _, err := expect(a, "rxe0", verbsapi.WCCompSwap, 6); err != nil {
		return 0, "", err
	}
	got, now := binary.LittleEndian.Uint64(a.mr.Bytes()[off:]), binary.LittleEndian.Uint64(word)
	if got != old || now != swap {
		return 0, "", fmt.Errorf("returned %#x (want %#x), memory %#x (want %#x)", got, old, now, swap)
	}
	d.swap = swap
	return 8, fmt.Sprintf("%#x -> %#x", old, swap), nil
}

func (d *demo) fetchAdd() (int, string, error) {
	a, b, off := d.a, d.b, d.atomicWord()
	word := b.mr.Bytes()[off : off+8]
	old := binary.LittleEndian.Uint64(word)
	add := d.rng.Uint64() >> 32
	if err := a.rc.PostSend(&verbsapi.SendWR{ID: 7, Opcode: verbsapi.WRFetchAdd, Flags: verbsapi.SendSignaled,
		SGL:        []verbsapi.SGE{a.mr.SGE(off, 8)},
		RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey(), CompareAdd: add}); err != nil {
		return 0, "", err
	}
	if _, err := expect(a, "rxe0", verbsapi.WCFetchAdd, 7); err != nil {
		return 0, "", err
	}
	got, now := binary.LittleEndian.Uint64(a.mr.Bytes()[off:]), binary.LittleEndian.Uint64(word)
	if got != old || now != old+add {
		return 0, "", fmt.Errorf("returned %#x (want %#x), memory %#x (want %#x)", got, old, now, old+add)
	}
	return 8, fmt.Sprintf("%#x + %#x", old, add), nil
}

// udSend sends one datagram of a path MTU, resending it (up to 20 times)
// when it does not arrive within udWait: UD is unreliable, and the link
// loses packets.
func (d *demo) udSend() (int, string, error) {
	const (
		udWait   = 200 * time.Millisecond
		attempts = 20
	)
	a, b := d.a, d.b
	port, err := a.ctx.QueryPort(1)
	if err != nil {
		return 0, "", err
	}
	n := int(port.ActiveMTU)
	src := 2*d.size + 64
	dst := src + 40 // the receive buffer starts with 40 bytes of GRH
	// Two receives: a datagram presumed lost may still arrive late.
	for i := range 2 {
		if err := b.ud.PostRecv(&verbsapi.RecvWR{ID: uint64(10 + i), SGL: []verbsapi.SGE{b.mr.SGE(src, 40+n)}}); err != nil {
			return 0, "", err
		}
	}
	d.fill(a.mr.Bytes()[src : src+n])
	dgid, err := b.ctx.QueryGID(1, 1)
	if err != nil {
		return 0, "", err
	}
	ah, err := a.pd.CreateAH(verbsapi.AHAttr{DGID: dgid, SGIDIndex: 1})
	if err != nil {
		return 0, "", err
	}
	defer ah.Destroy()
	for try := 1; try <= attempts; try++ {
		if err := a.ud.PostSend(&verbsapi.SendWR{ID: 20, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
			SGL: []verbsapi.SGE{a.mr.SGE(src, n)}, AH: ah.AV(), RemoteQPN: b.ud.QPN(), RemoteQKey: verbsapi.DefaultQKey}); err != nil {
			return 0, "", err
		}
		if _, err := expect(a, "rxe0", verbsapi.WCSend, 20); err != nil {
			return 0, "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), udWait)
		wc := make([]verbsapi.WC, 1)
		_, err := b.cq.PollWait(ctx, wc)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue // lost: send again
		}
		if err != nil {
			return 0, "", err
		}
		w := wc[0]
		if w.Status != verbsapi.WCSuccess || w.Opcode != verbsapi.WCRecv || w.SrcQP != a.ud.QPN() || int(w.ByteLen) != 40+n {
			return 0, "", fmt.Errorf("rxe1: UD completion %s %s from qp %d, %d bytes", w.Opcode, w.Status, w.SrcQP, w.ByteLen)
		}
		detail := "1 attempt"
		if try > 1 {
			detail = fmt.Sprintf("%d attempts (the link lost %d)", try, try-1)
		}
		return n, detail, compare("datagram", b.mr.Bytes()[dst:dst+n], a.mr.Bytes()[src:src+n])
	}
	return 0, "", fmt.Errorf("datagram lost %d times", attempts)
}

// captureCounts are what checkCapture found.
type captureCounts struct{ frames, roce, good, bad int }

// checkCapture reads the demo's capture back and checks every RoCE frame
// decodes with a good ICRC, as 'softroce decode' does.
func checkCapture(path string) (captureCounts, error) {
	var c captureCounts
	r, err := pcapio.Open(path)
	if err != nil {
		return c, err
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return c, nil
		}
		if err != nil {
			return c, err
		}
		c.frames++
		var f packet.Frame
		if rec.Frame(&f) != nil {
			continue
		}
		c.roce++
		var p packet.Packet
		if p.Decode(f.Transport) == nil && f.ICRCOK() {
			c.good++
		} else {
			c.bad++
		}
	}
}
