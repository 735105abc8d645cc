package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/verbsapi"
)

// Verb is perftest's VerbType, in its order.
type Verb int

// The verbs, as ib_send_*, ib_write_*, ib_read_* and ib_atomic_*.
const (
	VerbSend Verb = iota
	VerbWrite
	VerbRead
	VerbAtomic
)

var perfVerbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// Options are perftest's flags, with its meanings (see the perf command's
// help for the differences).
type Options struct {
	Verb       Verb
	Lat, BW    bool   // --lat, --bw (bandwidth when neither)
	Size       uint64 // -s
	Iters      int    // -n
	QPs        int    // -q
	PathMTU    int    // -m (0: the port's active MTU)
	All        bool   // -a: sizes 2 .. 2^23
	Gbits      bool   // --report_gbits
	IBDev      string // -d, for the header
	IBPort     int    // -i
	GIDIndex   int    // -x (-1: the GID of Addr)
	Addr       netip.Addr
	Port       int    // -p, the TCP port of the out-of-band exchange
	TxDepth    int    // -t
	RxDepth    int    // -r
	CQMod      int    // -Q
	OutReads   int    // -o (0: the device maximum)
	AtomicType string // -A: CMP_AND_SWAP or FETCH_AND_ADD
	Conn       string // -c: RC or UC
	NoPeak     bool   // -N
	DontXchg   bool   // --dont_xchg_versions
}

// ErrUsage wraps the errors of options perftest would refuse.
var ErrUsage = errors.New("perftest: bad options")

// perf is one side of a test: options, verbs objects and the peer.
type perf struct {
	o      *Options
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
	// runCtx ends the test's waits (polling, a WRITE landing) when the
	// caller cancels or the peer hangs up (cause oob.ErrPeerGone).
	runCtx context.Context
	mtu    verbsapi.MTU
	buffSz int // BUFF_SIZE: one QP's half of the buffer
	cycle  int32
	cache  int32
	typ    verbsapi.QPType
	atomic verbsapi.WROpcode
}

func (p *perf) tst() string {
	if p.o.Lat {
		return "Latency"
	}
	return "BW"
}

// Run runs one side of a test on the device of vctx: the server when peer
// is empty, else the client of the server at peer. It prints what perftest
// prints to out. Errors wrapping ErrUsage are option errors; the others are
// failures of the run (the connection, the peer, the device).
func Run(cctx context.Context, vctx *verbsapi.Context, out io.Writer, o *Options, peer string) error {
	if cctx == nil {
		cctx = context.Background()
	}
	p := &perf{o: o, out: out, client: peer != "", ctx: vctx}
	if err := p.checkOpts(); err != nil {
		return err
	}
	defer func() {
		// Let the device send what it owes the peer (the last ACK above
		// all) before the caller closes it.
		fctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		vctx.Flush(fctx)
	}()
	if err := p.resolveGID(); err != nil {
		return err
	}

	if !p.client {
		fmt.Fprint(out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	conn, err := perfConnect(cctx, peer, o.Port)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	defer stop()
	p.oob = &oob.Perftest{RW: conn, Client: p.client}
	// As perftest, a side notices its peer died from the out-of-band
	// connection closing, wherever it waits.
	rctx, cancel := context.WithCancelCause(cctx)
	defer cancel(nil)
	p.runCtx = rctx
	// A peer that is done flushes its device and then closes its end:
	// what it owed us (the last ACK, the last WRITE) may still be on its
	// way when the hang-up is seen, so the waits end peerGoneGrace later.
	stopWatch := oob.WatchHangup(conn, func() {
		time.AfterFunc(peerGoneGrace, func() { cancel(oob.ErrPeerGone) })
	})
	defer stopWatch()
	return p.run()
}

// Check reports whether perftest would accept the options (ErrUsage).
func Check(o *Options) error { return (&perf{o: o}).checkOpts() }

func (p *perf) checkOpts() error {
	o := p.o
	switch strings.ToUpper(o.Conn) {
	case "RC":
		p.typ = verbsapi.RC
	case "UC":
		if o.Verb != VerbWrite && o.Verb != VerbSend {
			return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-c UC: only write and send run on UC"))
		}
		p.typ = verbsapi.UC
	default:
		return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-c %s: softroce's perf runs RC (and UC for write and send)", o.Conn))
	}
	switch o.AtomicType {
	case "FETCH_AND_ADD":
		p.atomic = verbsapi.WRFetchAdd
	case "CMP_AND_SWAP":
		p.atomic = verbsapi.WRCmpSwap
	default:
		return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-A %s: want CMP_AND_SWAP or FETCH_AND_ADD", o.AtomicType))
	}
	if o.Iters < 5 {
		return fmt.Errorf("%w: %w", ErrUsage, errors.New("-n: at least 5 iterations"))
	}
	if o.QPs < 1 || (o.Lat && o.QPs != 1) {
		return fmt.Errorf("%w: %w", ErrUsage, errors.New("-q: at least 1 QP, and latency tests run 1"))
	}
	if o.TxDepth < 1 || o.RxDepth < 1 || o.CQMod < 1 {
		return fmt.Errorf("%w: %w", ErrUsage, errors.New("-t, -r and -Q must be at least 1"))
	}
	if o.Size < 1 || o.Size > 1<<23 {
		return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-s %d: want 1 .. 8388608", o.Size))
	}
	if o.PathMTU != 0 && !verbsapi.MTU(o.PathMTU).Valid() {
		return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-m %d: want 256, 512, 1024, 2048 or 4096", o.PathMTU))
	}
	if o.IBPort != 1 {
		return fmt.Errorf("%w: %w", ErrUsage, fmt.Errorf("-i %d: the device has port 1 only", o.IBPort))
	}
	// perftest's parser: the TX depth is at most the iterations, the CQ
	// moderation at most the TX depth, a send server's RX depth at most
	// the iterations.
	o.TxDepth = min(o.TxDepth, o.Iters)
	o.CQMod = min(o.CQMod, o.TxDepth)
	if o.Lat {
		o.CQMod = 1
	}
	if o.Verb == VerbSend {
		o.RxDepth = min(o.RxDepth, o.Iters)
	}
	if o.Iters > 20000 {
		o.NoPeak = true // perftest computes the peak up to 20000 iterations
	}
	return nil
}

func (p *perf) resolveGID() error {
	if p.o.GIDIndex >= 0 {
		return nil
	}
	if !p.o.Addr.IsValid() {
		return fmt.Errorf("%w: no GID index (-x) and no device address to find it from", ErrUsage)
	}
	var err error
	p.o.GIDIndex, err = p.ctx.GIDIndex(p.o.Addr)
	return err
}

// perfConnect is establish_connection: the client dials, the server
// accepts one connection on every address at port.
func perfConnect(cctx context.Context, peer string, port int) (net.Conn, error) {
	if peer == "" {
		return oob.Accept(cctx, port)
	}
	return oob.Dial(cctx, peer, port)
}

// maxSize is the largest message the run sends.
func (p *perf) maxSize() int {
	if p.o.All && p.o.Verb != VerbAtomic {
		return 1 << 23
	}
	return int(p.o.Size)
}

// run is the main of write_bw.c and its siblings after the connection.
func (p *perf) run() error {
	o := p.o
	if !o.DontXchg {
		if err := p.oob.ExchangeVersions(oob.PerftestVersion); err != nil {
			return err
		}
	}
	p.cycle, p.cache = int32(os.Getpagesize()), 64
	if !o.DontXchg {
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
	if o.PathMTU != 0 {
		if verbsapi.MTU(o.PathMTU) > port.ActiveMTU {
			return fmt.Errorf("requested mtu %d is higher than active mtu %d", o.PathMTU, int(port.ActiveMTU))
		}
		mtu = verbsapi.MTU(o.PathMTU)
	}
	if !o.DontXchg {
		e, err := p.oob.ExchangeMTU(mtu.Enum())
		if err != nil {
			return err
		}
		mtu = verbsapi.MTU(128 << e)
	}
	p.mtu = mtu
	if o.OutReads == 0 {
		o.OutReads = min(p.ctx.QueryDevice().MaxQPRdAtom, 255)
	}
	if o.Verb != VerbRead && o.Verb != VerbAtomic {
		o.OutReads = 1
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
	if o.Lat && o.Verb != VerbSend {
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
	if o.Verb == VerbSend {
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
	if o.Verb != VerbSend {
		if err := p.barrier(); err != nil {
			return err
		}
	}
	if o.Lat {
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
func (p *perf) closeConn() error { return p.closeConnAs(false) }

// closeConnAs is closeConn; with strict, a peer that hangs up instead of
// closing is an error: the ib_read_lat and ib_atomic_lat servers have
// nothing else to tell a finished client from a dead one.
func (p *perf) closeConnAs(strict bool) error {
	if err := p.barrier(); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			if strict {
				return fmt.Errorf("close connection: %w", oob.ErrPeerGone)
			}
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
	buf := make([]byte, p.buffSz*2*o.QPs)
	var err error
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return err
	}
	if p.mr, err = p.pd.RegMR(buf, verbsapi.AccessAll); err != nil {
		return err
	}
	if p.scq, err = p.ctx.CreateCQ(max(o.TxDepth*o.QPs, 1), nil); err != nil {
		return err
	}
	if p.rcq, err = p.ctx.CreateCQ(max(o.RxDepth*o.QPs, 1), nil); err != nil {
		return err
	}
	gid, err := p.ctx.QueryGID(1, o.GIDIndex)
	if err != nil {
		return fmt.Errorf("GID index %d: %w", o.GIDIndex, err)
	}
	p.qpIdx = map[uint32]int{}
	for i := 0; i < o.QPs; i++ {
		q, err := p.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: p.scq, RecvCQ: p.rcq, QPType: p.typ,
			Cap: verbsapi.QPCap{MaxSendWR: o.TxDepth, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return err
		}
		if err := q.ModifyToInit(nil); err != nil {
			return err
		}
		p.qps = append(p.qps, q)
		p.qpIdx[q.QPN()] = i
		p.my = append(p.my, oob.PerftestDest{OutReads: uint16(o.OutReads), QPN: q.QPN(), PSN: verbsapi.RandomPSN(),
			RKey: p.mr.RKey(), VAddr: p.mr.Addr() + uint64((o.QPs+i)*p.buffSz), GID: gid.As16()})
	}
	return nil
}

// connect is ctx_connect: every QP to RTR and RTS towards its peer QP.
func (p *perf) connect() error {
	for i, q := range p.qps {
		rem := p.rem[i]
		opts := &verbsapi.ConnOptions{PathMTU: p.mtu, SGIDIndex: p.o.GIDIndex,
			MaxDestRdAtomic: uint8(p.o.OutReads), MaxRdAtomic: uint8(p.o.OutReads), MinRNRTimer: 12,
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
func (p *perf) remoteHalf(i, n int) verbsapi.SGE { return p.mr.SGE((p.o.QPs+i)*p.buffSz, n) }

// peerGoneGrace is how long the waits go on after the peer hung up, for
// what it sent before it did.
const peerGoneGrace = 500 * time.Millisecond

// poll polls cq for at least one completion, failing on an unsuccessful
// one.
func (p *perf) poll(cq *verbsapi.CQ, wc []verbsapi.WC) (int, error) {
	ctx := p.runCtx
	if ctx == nil {
		ctx = context.Background()
	}
	n, err := cq.PollSpin(ctx, wc)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return 0, fmt.Errorf("poll CQ failed: %w", err)
	}
	for i := 0; i < n; i++ {
		if wc[i].Status != verbsapi.WCSuccess {
			return 0, fmt.Errorf("completion with error: %s (%d), wr_id %d, qp 0x%x", wc[i].Status, int(wc[i].Status), wc[i].ID, wc[i].QPN)
		}
	}
	return n, nil
}
