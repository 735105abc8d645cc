package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/verbsapi"
)

// Options are the flags of ibv_*_pingpong.
type Options struct {
	Port      int    // -p, the TCP port of the out-of-band exchange
	IBDev     string // -d (informational)
	IBPort    int    // -i
	Size      int    // -s (ud: 0 picks min(2048, the port's active MTU))
	PathMTU   int    // -m
	RxDepth   int    // -r
	Iters     int    // -n
	SL        int    // -l (ignored)
	Events    bool   // -e: sleep on CQ events
	GIDIndex  int    // -g (-1: the GID of Addr)
	Addr      netip.Addr
	Check     bool   // -c: validate the received buffer
	Transport string // rc, uc or ud
	// PeerTimeout ends the exchange with ErrPeerSilent when no completion
	// arrives for this long (0: wait forever, as ibv_*_pingpong do). The
	// C tools close their out-of-band socket after the exchange, so a
	// dead peer shows only as silence: RC notices through its retries, UC
	// and UD never would.
	PeerTimeout time.Duration
}

// ErrPeerSilent: nothing arrived for Options.PeerTimeout.
var ErrPeerSilent = errors.New("no completion from the peer: it is gone, or (uc, ud) a message was lost, which ibv_*_pingpong would wait for forever")

// ErrUsage wraps option errors; ErrSetup wraps failures to set up the
// device's objects.
var (
	ErrUsage = errors.New("pingpong: bad options")
	ErrSetup = errors.New("pingpong: setup")
)

// Work-request IDs, as the C tools use them: also bits of "pending".
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// udGRH is the room a UD receive buffer keeps for the 40-byte GRH.
const udGRH = 40

// ppFill is what the C tools memset their buffer to.
const ppFill = 0x7b

// pingpong is one side's state: the verbs objects and the C tool's counters.
type pingpong struct {
	o       *Options
	alive   func() // the peer showed signs of life (see Options.PeerTimeout)
	out     io.Writer
	ctx     *verbsapi.Context
	pd      *verbsapi.PD
	mr      *verbsapi.MR
	ch      *verbsapi.CompChannel
	cq      *verbsapi.CQ
	qp      *verbsapi.QP
	ah      *verbsapi.AH
	remQPN  uint32
	typ     verbsapi.QPType
	dataOff int // where the message starts in the buffer (ud: after the GRH)
	client  bool

	routs, rcnt, scnt, pending int
	badPages                   map[int]bool
	badLen                     int
}

func parseTransport(s string) (verbsapi.QPType, error) {
	switch s {
	case "rc":
		return verbsapi.RC, nil
	case "uc":
		return verbsapi.UC, nil
	case "ud":
		return verbsapi.UD, nil
	}
	return 0, fmt.Errorf("%w: --transport %q: want rc, uc or ud", ErrUsage, s)
}

// Check reports whether the C tools would accept the options (ErrUsage).
func Check(o *Options) error {
	if _, err := parseTransport(o.Transport); err != nil {
		return err
	}
	if !verbsapi.MTU(o.PathMTU).Valid() {
		return fmt.Errorf("%w: --path-mtu %d: want 256, 512, 1024, 2048 or 4096", ErrUsage, o.PathMTU)
	}
	if o.Iters < 1 || o.RxDepth < 2 || o.Size < 0 || o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("%w: need -n >= 1, -r >= 2, -s >= 0 and -p in 0..65535", ErrUsage)
	}
	return nil
}

// Run runs one side of the exchange on the device of vctx: the server
// when peer is empty, else the client of the server at peer, printing what
// the C tools print to out. Errors wrapping ErrUsage are option errors,
// ErrSetup failures to set up the device's objects; the others are failures
// of the exchange (the connection, the peer, the data).
func Run(cctx context.Context, vctx *verbsapi.Context, out io.Writer, o *Options, peer string) error {
	if cctx == nil {
		cctx = context.Background()
	}
	if err := Check(o); err != nil {
		return err
	}
	typ, _ := parseTransport(o.Transport)
	mtu := verbsapi.MTU(o.PathMTU)
	if o.IBPort != 1 {
		return fmt.Errorf("%w: port %d: the device has port 1 only", ErrSetup, o.IBPort)
	}
	defer func() {
		// Let the device send what it owes the peer (the last ACK above
		// all) before the caller closes it.
		fctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		vctx.Flush(fctx)
	}()
	pp := &pingpong{o: o, out: out, ctx: vctx, typ: typ, client: peer != ""}
	if err := pp.setup(); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	my, err := pp.localDest()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	sep := ","
	if typ == verbsapi.UD {
		sep = ":" // ibv_ud_pingpong prints "PSN 0x%06x: GID"
	}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", my.LID, my.QPN, my.PSN, sep, my.GIDAddr())

	var rem oob.PingpongDest
	if peer != "" {
		rem, err = pp.clientExchange(cctx, peer, my)
	} else {
		rem, err = pp.serverExchange(cctx, my)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: %s\n", rem)
	if peer != "" {
		if err := pp.connect(my, rem, mtu); err != nil {
			return err
		}
	}
	return pp.run(cctx)
}

// setup creates what pp_init_ctx does and posts the receives.
func (pp *pingpong) setup() error {
	o := pp.o
	port, err := pp.ctx.QueryPort(1)
	if err != nil {
		return err
	}
	if pp.typ == verbsapi.UD {
		pp.dataOff = udGRH
		active := int(port.ActiveMTU)
		if o.Size == 0 {
			o.Size = min(2048, active)
		}
		if o.Size > active {
			return fmt.Errorf("requested size %d larger than port MTU (%d)", o.Size, active)
		}
	}
	if pp.pd, err = pp.ctx.AllocPD(); err != nil {
		return err
	}
	buf := make([]byte, o.Size+pp.dataOff)
	for i := range buf {
		buf[i] = ppFill
	}
	if pp.mr, err = pp.pd.RegMR(buf, verbsapi.AccessLocalWrite); err != nil {
		return err
	}
	if o.Events {
		if pp.ch, err = pp.ctx.CreateCompChannel(); err != nil {
			return err
		}
	}
	if pp.cq, err = pp.ctx.CreateCQ(o.RxDepth+1, pp.ch); err != nil {
		return err
	}
	if pp.qp, err = pp.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, QPType: pp.typ,
		Cap: verbsapi.QPCap{MaxSendWR: 1, MaxRecvWR: o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if err := pp.qp.ModifyToInit(&verbsapi.ConnOptions{QKey: verbsapi.DefaultQKey}); err != nil {
		return err
	}
	if o.Check && !pp.client {
		// The server's buffer starts different from what the client sends,
		// so that a receive that writes nothing cannot pass the check.
		for i := range buf {
			buf[i] = 0xa5
		}
	}
	if o.Check && pp.client {
		fillCheckPattern(buf[pp.dataOff:])
	}
	if pp.routs = pp.postRecv(o.RxDepth); pp.routs < o.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", pp.routs)
	}
	if o.Events {
		if err := pp.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("couldn't request CQ notification: %w", err)
		}
	}
	return nil
}

// fillCheckPattern writes what the C client writes with -c: byte 0 of
// every page set to i / page_size % sizeof(char), which is 0, over the 0x7b
// fill.
func fillCheckPattern(b []byte) {
	page := os.Getpagesize()
	for i := range b {
		b[i] = ppFill
	}
	for i := 0; i < len(b); i += page {
		b[i] = 0
	}
}

// localDest is my_dest: LID 0, the QPN, a random 24-bit PSN and the GID.
func (pp *pingpong) localDest() (oob.PingpongDest, error) {
	gidIdx := pp.o.GIDIndex
	if gidIdx < 0 {
		var err error
		if gidIdx, err = pp.ctx.GIDIndex(pp.o.Addr); err != nil {
			return oob.PingpongDest{}, err
		}
		pp.o.GIDIndex = gidIdx
	}
	gid, err := pp.ctx.QueryGID(1, gidIdx)
	if err != nil {
		return oob.PingpongDest{}, fmt.Errorf("can't read sgid of index %d: %w", gidIdx, err)
	}
	return oob.PingpongDest{QPN: pp.qp.QPN(), PSN: verbsapi.RandomPSN(), GID: gid.As16()}, nil
}

func (pp *pingpong) clientExchange(cctx context.Context, peer string, my oob.PingpongDest) (oob.PingpongDest, error) {
	conn, err := oob.Dial(cctx, peer, pp.o.Port)
	if err != nil {
		return oob.PingpongDest{}, err
	}
	defer conn.Close()
	return oob.PingpongClient(conn, my)
}

func (pp *pingpong) serverExchange(cctx context.Context, my oob.PingpongDest) (oob.PingpongDest, error) {
	conn, err := oob.Accept(cctx, pp.o.Port)
	if err != nil {
		return oob.PingpongDest{}, err
	}
	defer conn.Close()
	rem, err := oob.PingpongServerRead(conn)
	if err != nil {
		return rem, err
	}
	if err := pp.connect(my, rem, verbsapi.MTU(pp.o.PathMTU)); err != nil {
		return rem, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	return rem, oob.PingpongServerReply(conn, my)
}

// connect is pp_connect_ctx: RTR and RTS (and, for ud, the address handle).
func (pp *pingpong) connect(my, rem oob.PingpongDest, mtu verbsapi.MTU) error {
	if !rem.HasGID() {
		return errors.New("the peer sent no GID (run it with -g): RoCE needs one")
	}
	opts := &verbsapi.ConnOptions{PathMTU: mtu, MaxDestRdAtomic: 1, MaxRdAtomic: 1, MinRNRTimer: 12,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, HopLimit: 1, SGIDIndex: pp.o.GIDIndex, QKey: verbsapi.DefaultQKey}
	remote := verbsapi.Endpoint{QPN: rem.QPN, PSN: rem.PSN, GID: rem.GIDAddr().Unmap()}
	if err := pp.qp.ModifyToRTR(remote, opts); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := pp.qp.ModifyToRTS(my.PSN, opts); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	pp.remQPN = rem.QPN
	if pp.typ == verbsapi.UD {
		ah, err := pp.pd.CreateAH(verbsapi.AHAttr{DGID: remote.GID, SGIDIndex: uint8(pp.o.GIDIndex), HopLimit: 1})
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		pp.ah = ah
	}
	return nil
}

func (pp *pingpong) postRecv(n int) int {
	sge := []verbsapi.SGE{pp.mr.SGE(0, pp.o.Size+pp.dataOff)}
	for i := 0; i < n; i++ {
		if err := pp.qp.PostRecv(&verbsapi.RecvWR{ID: ppRecvWRID, SGL: sge}); err != nil {
			return i
		}
	}
	return n
}

func (pp *pingpong) postSend() error {
	wr := verbsapi.SendWR{ID: ppSendWRID, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{pp.mr.SGE(pp.dataOff, pp.o.Size)}}
	if pp.typ == verbsapi.UD {
		wr.AH = pp.ah.AV()
		wr.RemoteQPN = pp.remQPN
		wr.RemoteQKey = verbsapi.DefaultQKey
	}
	return pp.qp.PostSend(&wr)
}

// run is the C tools' main loop: the client sends first; each side sends
// again once its last send completed and a message arrived.
func (pp *pingpong) run(cctx context.Context) error {
	o := pp.o
	pp.pending = ppRecvWRID
	if pp.client {
		if err := pp.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		pp.pending |= ppSendWRID
	}
	start := time.Now()
	if o.PeerTimeout > 0 {
		// One timer, pushed back at every completion, ends the waits.
		var cancel context.CancelCauseFunc
		cctx, cancel = context.WithCancelCause(cctx)
		defer cancel(nil)
		silent := time.AfterFunc(o.PeerTimeout, func() { cancel(ErrPeerSilent) })
		defer silent.Stop()
		pp.alive = func() { silent.Reset(o.PeerTimeout) }
	}
	var wc [2]verbsapi.WC
	for pp.rcnt < o.Iters || pp.scnt < o.Iters {
		var ne int
		var err error
		if o.Events {
			if _, err = pp.ch.GetEvent(cctx); err != nil {
				if cause := context.Cause(cctx); errors.Is(cause, ErrPeerSilent) {
					return fmt.Errorf("%w (%v without one, after %d of %d exchanges)", cause, o.PeerTimeout, min(pp.rcnt, pp.scnt), o.Iters)
				}
				return fmt.Errorf("failed to get cq_event: %w", err)
			}
			if err = pp.cq.ReqNotify(false); err != nil {
				return fmt.Errorf("couldn't request CQ notification: %w", err)
			}
			ne, err = pp.cq.Poll(wc[:])
		} else {
			ne, err = pp.cq.PollSpin(cctx, wc[:])
		}
		if err != nil {
			if cause := context.Cause(cctx); errors.Is(cause, ErrPeerSilent) {
				return fmt.Errorf("%w (%v without one, after %d of %d exchanges)", cause, o.PeerTimeout, min(pp.rcnt, pp.scnt), o.Iters)
			}
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		if ne > 0 && pp.alive != nil {
			pp.alive()
		}
		for i := 0; i < ne; i++ {
			if err := pp.parseWC(&wc[i]); err != nil {
				return err
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(o.Size) * int64(o.Iters) * 2
	fmt.Fprintf(pp.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(pp.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.Iters, usec/1e6, usec/float64(o.Iters))
	if o.Check && (len(pp.badPages) > 0 || pp.badLen > 0) {
		for p := range pp.badPages {
			fmt.Fprintf(pp.out, "invalid data in page %d\n", p)
		}
		return fmt.Errorf("validation: %d pages with invalid data, %d receives of the wrong length", len(pp.badPages), pp.badLen)
	}
	return nil
}

// parseWC is parse_single_wc.
func (pp *pingpong) parseWC(wc *verbsapi.WC) error {
	if wc.Status != verbsapi.WCSuccess {
		return fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, int(wc.Status), int(wc.ID))
	}
	switch wc.ID {
	case ppSendWRID:
		pp.scnt++
	case ppRecvWRID:
		if pp.routs--; pp.routs <= 1 {
			pp.routs += pp.postRecv(pp.o.RxDepth - pp.routs)
			if pp.routs < pp.o.RxDepth {
				return fmt.Errorf("couldn't post receive (%d)", pp.routs)
			}
		}
		pp.rcnt++
		if pp.o.Check {
			pp.validate(wc)
		}
	default:
		return fmt.Errorf("completion for unknown wr_id %d", int(wc.ID))
	}
	pp.pending &^= int(wc.ID)
	if pp.scnt < pp.o.Iters && pp.pending == 0 {
		if err := pp.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		pp.pending = ppRecvWRID | ppSendWRID
	}
	return nil
}

// validate checks a received message: its length, then every byte against
// what a client with -c sends. The buffer is stable here: the peer sends
// again only after our reply.
func (pp *pingpong) validate(wc *verbsapi.WC) {
	if int(wc.ByteLen) != pp.o.Size+pp.dataOff {
		pp.badLen++
	}
	if pp.badPages == nil {
		pp.badPages = map[int]bool{}
	}
	page := os.Getpagesize()
	data := pp.mr.Bytes()[pp.dataOff:]
	for start := 0; start < len(data); start += page {
		p := data[start:min(start+page, len(data))]
		ok := p[0] == 0
		for _, b := range p[1:] {
			ok = ok && b == ppFill
		}
		if !ok {
			pp.badPages[start/page] = true
		}
	}
}
