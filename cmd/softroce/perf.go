package main

// perf.go: `softroce perf`, perftest's ib_{write,read,send,atomic}_{bw,lat}
// on a softroce device, speaking perftest's out-of-band protocol (package
// oob) so that either side can be the C tool. The traffic loops are in
// perf_bw.go and perf_lat.go, the report printing in perf_report.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newPerfCmd) }

// perfVerb is perftest's VerbType, in its order (testsStr indexes it).
type perfVerb int

const (
	verbSend perfVerb = iota
	verbWrite
	verbRead
	verbAtomic
)

var perfVerbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// perfOpts are perftest's flags.
type perfOpts struct {
	verb       perfVerb
	lat, bw    bool
	size       uint64
	iters      int
	qps        int
	mtu        int
	all        bool
	gbits      bool
	ibDev      string
	ibPort     int
	gidIdx     int
	port       int
	txDepth    int
	rxDepth    int
	cqMod      int
	outReads   int
	atomicType string
	conn       string
	noPeak     bool
	dontXchg   bool
	lf         *linkFlags
}

func newPerfCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Measure bandwidth or latency with a peer, as perftest's ib_*_bw / ib_*_lat",
		Long: `perf runs perftest's benchmarks on a softroce device: "perf write" is
ib_write_bw (or ib_write_lat with --lat), and likewise read, send and atomic.
It speaks perftest's out-of-band protocol over TCP (port 18515 by default):
version, system data and MTU exchange, the per-QP key records with the GID,
hand-shake barriers, the exchange of bandwidth reports and the closing
"done", so either side may be perftest on a real RDMA device. With no PEER it
is the server; with PEER the client. The output follows perftest's: the test
header, the local and remote address lines, and the result table.

  softroce perf write --addr 127.0.0.2                 # server
  softroce perf write --addr 127.0.0.3 127.0.0.2       # client

Differences from perftest: the path MTU flag is -m/--path-mtu (--mtu is the
link MTU); -x defaults to the GID of --addr; only RC (and UC for write and
send) connections; times are from Go's monotonic clock, in nanoseconds,
not the CPU cycle counter.`,
	}
	for _, v := range []struct {
		name string
		verb perfVerb
	}{{"send", verbSend}, {"write", verbWrite}, {"read", verbRead}, {"atomic", verbAtomic}} {
		cmd.AddCommand(newPerfVerbCmd(v.name, v.verb))
	}
	return cmd
}

func newPerfVerbCmd(name string, verb perfVerb) *cobra.Command {
	o := &perfOpts{verb: verb}
	cmd := &cobra.Command{
		Use:   name + " [PEER]",
		Short: fmt.Sprintf("ib_%s_bw / ib_%s_lat", name, name),
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			if o.lat && o.bw {
				return usageError{errors.New("--lat and --bw exclude each other")}
			}
			if !fs.Changed("size") {
				o.size = 65536
				if o.lat {
					o.size = 2
				}
			}
			if o.verb == verbAtomic {
				o.size = 8
			}
			if !fs.Changed("iters") {
				o.iters = 5000
				if o.lat {
					o.iters = 1000
				}
			}
			if !fs.Changed("tx-depth") {
				o.txDepth = 128
				if o.lat {
					o.txDepth = 1
				}
			}
			peer := ""
			if len(args) == 1 {
				peer = args[0]
			}
			return runPerf(cmd.Context(), cmd.OutOrStdout(), o, peer)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.lat, "lat", false, "measure latency (ib_*_lat)")
	fs.BoolVar(&o.bw, "bw", false, "measure bandwidth (ib_*_bw, the default)")
	fs.Uint64VarP(&o.size, "size", "s", 65536, "size of message to exchange (default 65536 for bw, 2 for lat; atomic: 8)")
	fs.IntVarP(&o.iters, "iters", "n", 5000, "number of exchanges (at least 5; default 5000 for bw, 1000 for lat)")
	fs.IntVarP(&o.qps, "qp", "q", 1, "number of QPs (bw)")
	fs.IntVarP(&o.mtu, "path-mtu", "m", 0, "path MTU: 256 - 4096 (default: the port's active MTU)")
	fs.BoolVarP(&o.all, "all", "a", false, "run sizes from 2 till 2^23")
	fs.BoolVar(&o.gbits, "report_gbits", false, "report bandwidth in Gbit/sec instead of MiB/sec")
	fs.StringVarP(&o.ibDev, "ib-dev", "d", "rxe0", "device name")
	fs.IntVarP(&o.ibPort, "ib-port", "i", 1, "port of the device (only 1 exists)")
	fs.IntVarP(&o.gidIdx, "gid-index", "x", -1, "GID index (default: the GID of --addr)")
	fs.IntVarP(&o.port, "port", "p", 18515, "listen on/connect to TCP port `PORT`")
	fs.IntVarP(&o.txDepth, "tx-depth", "t", 128, "size of tx queue (default 128 for bw, 1 for lat)")
	fs.IntVarP(&o.rxDepth, "rx-depth", "r", 512, "size of rx queue (send)")
	fs.IntVarP(&o.cqMod, "cq-mod", "Q", 100, "generate a completion only every N sends (bw)")
	fs.IntVarP(&o.outReads, "outs", "o", 0, "outstanding reads/atomics (default: the device maximum)")
	fs.StringVarP(&o.atomicType, "atomic_type", "A", "FETCH_AND_ADD", "atomic: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.StringVarP(&o.conn, "connection", "c", "RC", "connection type: RC (or UC for write and send)")
	fs.BoolVarP(&o.noPeak, "noPeak", "N", false, "cancel peak-bw calculation")
	fs.BoolVar(&o.dontXchg, "dont_xchg_versions", false, "do not exchange versions and MTU with the other side")
	var cpuFreq bool
	fs.BoolVarP(&cpuFreq, "CPU-freq", "F", false, "accepted for compatibility (there is no cycle counter to warn about)")
	o.lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// perf is one side of a test: options, verbs objects and the peer.
type perf struct {
	o      *perfOpts
	out    io.Writer
	client bool
	ctx    *verbsapi.Context
	pd     *verbsapi.PD
	mr     *verbsapi.MR
	scq    *verbsapi.CQ
	rcq    *verbsapi.CQ
	qps    []*verbsapi.QP
	qpIdx  map[uint32]int
	my     []oob.PerftestDest
	rem    []oob.PerftestDest
	oob    *oob.Perftest
	mtu    verbsapi.MTU
	buffSz int // BUFF_SIZE: one QP's half of the buffer
	cycle  int32
	cache  int32
	typ    verbsapi.QPType
	atomic verbsapi.WROpcode
}

func (p *perf) tst() string {
	if p.o.lat {
		return "Latency"
	}
	return "BW"
}

func runPerf(cctx context.Context, out io.Writer, o *perfOpts, peer string) error {
	if cctx == nil {
		cctx = context.Background()
	}
	p := &perf{o: o, out: out, client: peer != ""}
	if err := p.checkOpts(); err != nil {
		return err
	}
	vctx, closeDev, err := openDevice(*o.lf, o.ibDev)
	if err != nil {
		return exitError{exitTrouble, err}
	}
	defer closeDev()
	defer drainDevice(vctx)
	p.ctx = vctx
	if err := p.resolveGID(); err != nil {
		return exitError{exitTrouble, err}
	}

	if !p.client {
		fmt.Fprint(out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	conn, err := perfConnect(cctx, peer, o.port)
	if err != nil {
		return exitError{exitFailed, err}
	}
	defer conn.Close()
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	defer stop()
	p.oob = &oob.Perftest{RW: conn, Client: p.client}
	if err := p.run(); err != nil {
		return exitError{exitFailed, err}
	}
	return nil
}

func (p *perf) checkOpts() error {
	o := p.o
	switch strings.ToUpper(o.conn) {
	case "RC":
		p.typ = verbsapi.RC
	case "UC":
		if o.verb != verbWrite && o.verb != verbSend {
			return usageError{fmt.Errorf("-c UC: only write and send run on UC")}
		}
		p.typ = verbsapi.UC
	default:
		return usageError{fmt.Errorf("-c %s: softroce's perf runs RC (and UC for write and send)", o.conn)}
	}
	switch o.atomicType {
	case "FETCH_AND_ADD":
		p.atomic = verbsapi.WRFetchAdd
	case "CMP_AND_SWAP":
		p.atomic = verbsapi.WRCmpSwap
	default:
		return usageError{fmt.Errorf("-A %s: want CMP_AND_SWAP or FETCH_AND_ADD", o.atomicType)}
	}
	if o.iters < 5 {
		return usageError{errors.New("-n: at least 5 iterations")}
	}
	if o.qps < 1 || (o.lat && o.qps != 1) {
		return usageError{errors.New("-q: at least 1 QP, and latency tests run 1")}
	}
	if o.txDepth < 1 || o.rxDepth < 1 || o.cqMod < 1 {
		return usageError{errors.New("-t, -r and -Q must be at least 1")}
	}
	if o.size < 1 || o.size > 1<<23 {
		return usageError{fmt.Errorf("-s %d: want 1 .. 8388608", o.size)}
	}
	if o.mtu != 0 && !verbsapi.MTU(o.mtu).Valid() {
		return usageError{fmt.Errorf("-m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)}
	}
	if o.ibPort != 1 {
		return usageError{fmt.Errorf("-i %d: the device has port 1 only", o.ibPort)}
	}
	// perftest's parser: the TX depth is at most the iterations, the CQ
	// moderation at most the TX depth, a send server's RX depth at most
	// the iterations.
	o.txDepth = min(o.txDepth, o.iters)
	o.cqMod = min(o.cqMod, o.txDepth)
	if o.lat {
		o.cqMod = 1
	}
	if o.verb == verbSend {
		o.rxDepth = min(o.rxDepth, o.iters)
	}
	if o.iters > 20000 {
		o.noPeak = true // perftest computes the peak up to 20000 iterations
	}
	return nil
}

func (p *perf) resolveGID() error {
	if p.o.gidIdx >= 0 {
		return nil
	}
	ap, err := parseAddr(p.o.lf.Addr)
	if err != nil {
		return err
	}
	p.o.gidIdx, err = p.ctx.GIDIndex(ap.Addr())
	return err
}

// perfConnect is establish_connection: the client dials, the server
// accepts one connection on every address at port.
func perfConnect(cctx context.Context, peer string, port int) (net.Conn, error) {
	if peer == "" {
		return acceptOne(cctx, port)
	}
	return dialPeer(cctx, peer, port)
}

// maxSize is the largest message the run sends.
func (p *perf) maxSize() int {
	if p.o.all && p.o.verb != verbAtomic {
		return 1 << 23
	}
	return int(p.o.size)
}

// run is the main of write_bw.c and its siblings after the connection.
func (p *perf) run() error {
	o := p.o
	if !o.dontXchg {
		if err := p.oob.ExchangeVersions(oob.PerftestVersion); err != nil {
			return err
		}
	}
	p.cycle, p.cache = int32(os.Getpagesize()), 64
	if !o.dontXchg {
		var err error
		if p.cycle, p.cache, err = p.oob.ExchangeSysData(p.cycle, p.cache); err != nil {
			return err
		}
	}
	port, err := p.ctx.QueryPort(1)
	if err != nil {
		return err
	}
	mtu := port.ActiveMTU
	if o.mtu != 0 {
		if verbsapi.MTU(o.mtu) > port.ActiveMTU {
			return fmt.Errorf("requested mtu %d is higher than active mtu %d", o.mtu, int(port.ActiveMTU))
		}
		mtu = verbsapi.MTU(o.mtu)
	}
	if !o.dontXchg {
		e, err := p.oob.ExchangeMTU(mtu.Enum())
		if err != nil {
			return err
		}
		mtu = verbsapi.MTU(128 << e)
	}
	p.mtu = mtu
	if o.outReads == 0 {
		o.outReads = min(p.ctx.QueryDevice().MaxQPRdAtom, 255)
	}
	if o.verb != verbRead && o.verb != verbAtomic {
		o.outReads = 1
	}
	p.printTestInfo()
	if err := p.setup(); err != nil {
		return err
	}
	// The key exchange of perftest 6: one record per QP, the connection,
	// the records again (printed), and a barrier ("an additional handshake
	// is required after moving qp to RTR"); send_bw and send_lat put the
	// barrier before the second round. write_lat, read_lat and atomic_lat
	// open with one more round, a ctx_hand_shake of the first record before
	// the per-QP one (four rounds in all, as Debian's perftest 6.06 does).
	// Every round carries the same records, so with one QP the orders agree
	// on the wire; what matters is that both sides make as many.
	p.rem = make([]oob.PerftestDest, len(p.qps))
	if o.lat && o.verb != verbSend {
		if err := p.barrier(); err != nil {
			return err
		}
	}
	if err := p.exchangeKeys(false); err != nil {
		return err
	}
	if err := p.connect(); err != nil {
		return err
	}
	if o.verb == verbSend {
		if err := p.barrier(); err != nil {
			return err
		}
	}
	for i := range p.qps {
		p.printDest("local", p.my[i])
	}
	if err := p.exchangeKeys(true); err != nil {
		return err
	}
	if o.verb != verbSend {
		if err := p.barrier(); err != nil {
			return err
		}
	}
	if o.lat {
		return p.runLat()
	}
	return p.runBW()
}

// exchangeKeys runs a ctx_hand_shake per QP, keeping the peer's records.
func (p *perf) exchangeKeys(show bool) error {
	for i := range p.qps {
		rem, err := p.oob.HandShake(p.my[i], true)
		if err != nil {
			return err
		}
		p.rem[i] = rem
		if show {
			p.printDest("remote", rem)
		}
	}
	return nil
}

// barrier is a ctx_hand_shake whose content nobody reads.
func (p *perf) barrier() error {
	_, err := p.oob.HandShake(p.my[0], true)
	return err
}

// closeConn is ctx_close_connection: a last hand shake, then "done".
// A peer that hangs up instead (some perftest latency tests end without
// closing) has finished too, so end of file there is no error.
func (p *perf) closeConn() error {
	if err := p.barrier(); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		return fmt.Errorf("close connection: %w", err)
	}
	if err := p.oob.Done(); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		return err
	}
	return nil
}

// setup is ctx_init and set_up_connection: buffer, MR, CQs, QPs in INIT,
// and our key records. The buffer holds, per QP, a local half (what we
// send, or where READs land) and a remote half (what the peer writes),
// BUFF_SIZE each; the record advertises the remote half.
func (p *perf) setup() error {
	o := p.o
	p.buffSz = max(p.maxSize(), int(p.cycle))
	buf := make([]byte, p.buffSz*2*o.qps)
	var err error
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return err
	}
	if p.mr, err = p.pd.RegMR(buf, verbsapi.AccessAll); err != nil {
		return err
	}
	if p.scq, err = p.ctx.CreateCQ(max(o.txDepth*o.qps, 1), nil); err != nil {
		return err
	}
	if p.rcq, err = p.ctx.CreateCQ(max(o.rxDepth*o.qps, 1), nil); err != nil {
		return err
	}
	gid, err := p.ctx.QueryGID(1, o.gidIdx)
	if err != nil {
		return fmt.Errorf("GID index %d: %w", o.gidIdx, err)
	}
	p.qpIdx = map[uint32]int{}
	for i := 0; i < o.qps; i++ {
		q, err := p.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: p.scq, RecvCQ: p.rcq, QPType: p.typ,
			Cap: verbsapi.QPCap{MaxSendWR: o.txDepth, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return err
		}
		if err := q.ModifyToInit(nil); err != nil {
			return err
		}
		p.qps = append(p.qps, q)
		p.qpIdx[q.QPN()] = i
		p.my = append(p.my, oob.PerftestDest{OutReads: uint16(o.outReads), QPN: q.QPN(), PSN: randPSN(),
			RKey: p.mr.RKey(), VAddr: p.mr.Addr() + uint64((o.qps+i)*p.buffSz), GID: gid.As16()})
	}
	return nil
}

// connect is ctx_connect: every QP to RTR and RTS towards its peer QP.
func (p *perf) connect() error {
	for i, q := range p.qps {
		rem := p.rem[i]
		opts := &verbsapi.ConnOptions{PathMTU: p.mtu, SGIDIndex: p.o.gidIdx,
			MaxDestRdAtomic: uint8(p.o.outReads), MaxRdAtomic: uint8(p.o.outReads), MinRNRTimer: 12,
			Timeout: 14, RetryCnt: 7, RNRRetry: 7}
		ep := verbsapi.Endpoint{QPN: rem.QPN, PSN: rem.PSN, GID: rem.GIDAddr().Unmap()}
		if err := q.ModifyToRTR(ep, opts); err != nil {
			return fmt.Errorf("unable to connect the HCA's through the link: %w", err)
		}
		if err := q.ModifyToRTS(p.my[i].PSN, opts); err != nil {
			return fmt.Errorf("unable to connect the HCA's through the link: %w", err)
		}
	}
	return nil
}

// local returns the SGE for n bytes of QP i's local half.
func (p *perf) local(i, n int) verbsapi.SGE { return p.mr.SGE(i*p.buffSz, n) }

// remoteHalf returns QP i's remote half: where the peer writes.
func (p *perf) remoteHalf(i, n int) verbsapi.SGE { return p.mr.SGE((p.o.qps+i)*p.buffSz, n) }

// poll polls cq for at least one completion, failing on an unsuccessful
// one.
func (p *perf) poll(cq *verbsapi.CQ, wc []verbsapi.WC) (int, error) {
	n, err := pollSpin(context.Background(), cq, wc)
	if err != nil {
		return 0, fmt.Errorf("poll CQ failed: %w", err)
	}
	for i := 0; i < n; i++ {
		if wc[i].Status != verbsapi.WCSuccess {
			return 0, fmt.Errorf("completion with error: %s (%d), wr_id %d, qp 0x%x", wc[i].Status, int(wc[i].Status), wc[i].ID, wc[i].QPN)
		}
	}
	return n, nil
}
