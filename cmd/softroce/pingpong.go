package main

// pingpong.go: `softroce pingpong`, rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong and ibv_ud_pingpong on a softroce device, speaking their
// out-of-band protocol (package oob) so that either side can be the C tool.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newPingpongCmd) }

// pingpongOpts are the flags of ibv_*_pingpong.
type pingpongOpts struct {
	port      int
	ibDev     string
	ibPort    int
	size      int
	mtu       int
	rxDepth   int
	iters     int
	sl        int
	events    bool
	gidIdx    int
	check     bool
	transport string
	lf        *linkFlags
}

// Work-request IDs, as the C tools use them: also bits of "pending".
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// udGRH is the room a UD receive buffer keeps for the 40-byte GRH.
const udGRH = 40

// ppFill is what the C tools memset their buffer to.
const ppFill = 0x7b

func newPingpongCmd() *cobra.Command {
	o := &pingpongOpts{}
	cmd := &cobra.Command{
		Use:   "pingpong [PEER]",
		Short: "Ping-pong SENDs with a peer, as ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong",
		Long: `pingpong bounces a message between two QPs, SEND against RECV, as rdma-core's
ibv_rc_pingpong (--transport rc, the default), ibv_uc_pingpong (uc) and
ibv_ud_pingpong (ud) do, and speaks their out-of-band protocol: the two sides
trade "lid:qpn:psn:gid" records over TCP (port 18515 by default), so either
side may be the C tool on a real RDMA device. With no PEER it is the server
and waits for a client; with PEER it connects to it.

The device runs on the link the link flags describe (by default a kernel UDP
socket on --addr, port 4791), so two processes on one host need no root:

  softroce pingpong --addr 127.0.0.2              # server
  softroce pingpong --addr 127.0.0.3 127.0.0.2    # client

Differences from the C tools: -g defaults to the GID of --addr (index 1 for
an IPv4 address) instead of "no GID", which cannot work on RoCE; the path
MTU flag is -m/--path-mtu because --mtu is the link's MTU; for ud the message
size defaults to 2048 or the port's active MTU if smaller (1024 on a
1500-byte link), where ibv_ud_pingpong would refuse to start; -c checks
every byte (0x7b, 0 at the start of each page, which is what the C client
sends with -c) and exits with status 1 on a mismatch. -l is accepted and
ignored (RoCE has no service levels in use), as are -d and -i.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") && o.transport == "ud" {
				o.size = 0 // chosen from the port's MTU
			}
			peer := ""
			if len(args) == 1 {
				peer = args[0]
			}
			return runPingpong(cmd.Context(), cmd.OutOrStdout(), o, peer)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&o.port, "port", "p", 18515, "listen on/connect to TCP port `PORT` for the out-of-band exchange")
	fs.StringVarP(&o.ibDev, "ib-dev", "d", "rxe0", "device name (accepted for compatibility; the device is the one the link flags build)")
	fs.IntVarP(&o.ibPort, "ib-port", "i", 1, "port of the device (only 1 exists)")
	fs.IntVarP(&o.size, "size", "s", 4096, "size of message to exchange (ud: default 2048, at most the port MTU)")
	fs.IntVarP(&o.mtu, "path-mtu", "m", 1024, "path MTU: 256, 512, 1024, 2048 or 4096 (rc, uc)")
	fs.IntVarP(&o.rxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fs.IntVarP(&o.iters, "iters", "n", 1000, "number of exchanges")
	fs.IntVarP(&o.sl, "sl", "l", 0, "service level (ignored)")
	fs.BoolVarP(&o.events, "events", "e", false, "sleep on CQ events (default poll)")
	fs.IntVarP(&o.gidIdx, "gid-idx", "g", -1, "local port GID index (default: the GID of --addr)")
	fs.BoolVarP(&o.check, "chk", "c", false, "validate received buffer")
	fs.StringVar(&o.transport, "transport", "rc", "transport: rc, uc or ud")
	o.lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// pingpong is one side's state: the verbs objects and the C tool's counters.
type pingpong struct {
	o       *pingpongOpts
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
	return 0, usageError{fmt.Errorf("--transport %q: want rc, uc or ud", s)}
}

func runPingpong(cctx context.Context, out io.Writer, o *pingpongOpts, peer string) error {
	if cctx == nil {
		cctx = context.Background()
	}
	typ, err := parseTransport(o.transport)
	if err != nil {
		return err
	}
	mtu := verbsapi.MTU(o.mtu)
	if !mtu.Valid() {
		return usageError{fmt.Errorf("--path-mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)}
	}
	if o.iters < 1 || o.rxDepth < 2 || o.size < 0 || o.port < 0 || o.port > 65535 {
		return usageError{errors.New("need -n >= 1, -r >= 2, -s >= 0 and -p in 0..65535")}
	}
	if o.ibPort != 1 {
		return exitError{exitTrouble, fmt.Errorf("port %d: the device has port 1 only", o.ibPort)}
	}
	vctx, closeDev, err := openDevice(*o.lf, o.ibDev)
	if err != nil {
		return exitError{exitTrouble, err}
	}
	defer closeDev()
	defer drainDevice(vctx)
	pp := &pingpong{o: o, out: out, ctx: vctx, typ: typ, client: peer != ""}
	if err := pp.setup(); err != nil {
		return exitError{exitTrouble, err}
	}
	my, err := pp.localDest()
	if err != nil {
		return exitError{exitTrouble, err}
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
		return exitError{exitFailed, err}
	}
	fmt.Fprintf(out, "  remote address: %s\n", rem)
	if peer != "" {
		if err := pp.connect(my, rem, mtu); err != nil {
			return exitError{exitFailed, err}
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
		if o.size == 0 {
			o.size = min(2048, active)
		}
		if o.size > active {
			return fmt.Errorf("requested size %d larger than port MTU (%d)", o.size, active)
		}
	}
	if pp.pd, err = pp.ctx.AllocPD(); err != nil {
		return err
	}
	buf := make([]byte, o.size+pp.dataOff)
	for i := range buf {
		buf[i] = ppFill
	}
	if pp.mr, err = pp.pd.RegMR(buf, verbsapi.AccessLocalWrite); err != nil {
		return err
	}
	if o.events {
		if pp.ch, err = pp.ctx.CreateCompChannel(); err != nil {
			return err
		}
	}
	if pp.cq, err = pp.ctx.CreateCQ(o.rxDepth+1, pp.ch); err != nil {
		return err
	}
	if pp.qp, err = pp.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, QPType: pp.typ,
		Cap: verbsapi.QPCap{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if err := pp.qp.ModifyToInit(&verbsapi.ConnOptions{QKey: verbsapi.DefaultQKey}); err != nil {
		return err
	}
	if o.check && !pp.client {
		// The server's buffer starts different from what the client sends,
		// so that a receive that writes nothing cannot pass the check.
		for i := range buf {
			buf[i] = 0xa5
		}
	}
	if o.check && pp.client {
		fillCheckPattern(buf[pp.dataOff:])
	}
	if pp.routs = pp.postRecv(o.rxDepth); pp.routs < o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", pp.routs)
	}
	if o.events {
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
	gidIdx := pp.o.gidIdx
	if gidIdx < 0 {
		ap, err := parseAddr(pp.o.lf.Addr)
		if err != nil {
			return oob.PingpongDest{}, err
		}
		if gidIdx, err = pp.ctx.GIDIndex(ap.Addr()); err != nil {
			return oob.PingpongDest{}, err
		}
		pp.o.gidIdx = gidIdx
	}
	gid, err := pp.ctx.QueryGID(1, gidIdx)
	if err != nil {
		return oob.PingpongDest{}, fmt.Errorf("can't read sgid of index %d: %w", gidIdx, err)
	}
	return oob.PingpongDest{QPN: pp.qp.QPN(), PSN: randPSN(), GID: gid.As16()}, nil
}

// randPSN is lrand48() & 0xffffff.
func randPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff
}

func (pp *pingpong) clientExchange(cctx context.Context, peer string, my oob.PingpongDest) (oob.PingpongDest, error) {
	conn, err := oob.Dial(cctx, peer, pp.o.port)
	if err != nil {
		return oob.PingpongDest{}, err
	}
	defer conn.Close()
	return oob.PingpongClient(conn, my)
}

func (pp *pingpong) serverExchange(cctx context.Context, my oob.PingpongDest) (oob.PingpongDest, error) {
	conn, err := oob.Accept(cctx, pp.o.port)
	if err != nil {
		return oob.PingpongDest{}, err
	}
	defer conn.Close()
	rem, err := oob.PingpongServerRead(conn)
	if err != nil {
		return rem, err
	}
	if err := pp.connect(my, rem, verbsapi.MTU(pp.o.mtu)); err != nil {
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
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, HopLimit: 1, SGIDIndex: pp.o.gidIdx, QKey: verbsapi.DefaultQKey}
	remote := verbsapi.Endpoint{QPN: rem.QPN, PSN: rem.PSN, GID: rem.GIDAddr().Unmap()}
	if err := pp.qp.ModifyToRTR(remote, opts); err != nil {
		return fmt.Errorf("failed to modify QP to RTR: %w", err)
	}
	if err := pp.qp.ModifyToRTS(my.PSN, opts); err != nil {
		return fmt.Errorf("failed to modify QP to RTS: %w", err)
	}
	pp.remQPN = rem.QPN
	if pp.typ == verbsapi.UD {
		ah, err := pp.pd.CreateAH(verbsapi.AHAttr{DGID: remote.GID, SGIDIndex: uint8(pp.o.gidIdx), HopLimit: 1})
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		pp.ah = ah
	}
	return nil
}

func (pp *pingpong) postRecv(n int) int {
	sge := []verbsapi.SGE{pp.mr.SGE(0, pp.o.size+pp.dataOff)}
	for i := 0; i < n; i++ {
		if err := pp.qp.PostRecv(&verbsapi.RecvWR{ID: ppRecvWRID, SGL: sge}); err != nil {
			return i
		}
	}
	return n
}

func (pp *pingpong) postSend() error {
	wr := verbsapi.SendWR{ID: ppSendWRID, Opcode: verbsapi.WRSend, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{pp.mr.SGE(pp.dataOff, pp.o.size)}}
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
			return exitError{exitFailed, fmt.Errorf("couldn't post send: %w", err)}
		}
		pp.pending |= ppSendWRID
	}
	start := time.Now()
	var wc [2]verbsapi.WC
	for pp.rcnt < o.iters || pp.scnt < o.iters {
		var ne int
		var err error
		if o.events {
			if _, err = pp.ch.GetEvent(cctx); err != nil {
				return exitError{exitFailed, fmt.Errorf("failed to get cq_event: %w", err)}
			}
			if err = pp.cq.ReqNotify(false); err != nil {
				return exitError{exitFailed, fmt.Errorf("couldn't request CQ notification: %w", err)}
			}
			ne, err = pp.cq.Poll(wc[:])
		} else {
			ne, err = pollSpin(cctx, pp.cq, wc[:])
		}
		if err != nil {
			return exitError{exitFailed, fmt.Errorf("poll CQ failed: %w", err)}
		}
		for i := 0; i < ne; i++ {
			if err := pp.parseWC(&wc[i]); err != nil {
				return exitError{exitFailed, err}
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(pp.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(pp.out, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	if o.check && (len(pp.badPages) > 0 || pp.badLen > 0) {
		for p := range pp.badPages {
			fmt.Fprintf(pp.out, "invalid data in page %d\n", p)
		}
		return exitError{exitFailed, fmt.Errorf("validation: %d pages with invalid data, %d receives of the wrong length", len(pp.badPages), pp.badLen)}
	}
	return nil
}

// pollSpin polls, yields a little while the CQ is empty, then blocks on a
// notification, so that two processes on a small machine do not starve
// their devices' goroutines by busy polling.
func pollSpin(cctx context.Context, cq *verbsapi.CQ, wc []verbsapi.WC) (int, error) {
	for spin := 0; spin < 64; spin++ {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		runtime.Gosched()
	}
	return cq.PollWait(cctx, wc)
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
			pp.routs += pp.postRecv(pp.o.rxDepth - pp.routs)
			if pp.routs < pp.o.rxDepth {
				return fmt.Errorf("couldn't post receive (%d)", pp.routs)
			}
		}
		pp.rcnt++
		if pp.o.check {
			pp.validate(wc)
		}
	default:
		return fmt.Errorf("completion for unknown wr_id %d", int(wc.ID))
	}
	pp.pending &^= int(wc.ID)
	if pp.scnt < pp.o.iters && pp.pending == 0 {
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
	if int(wc.ByteLen) != pp.o.size+pp.dataOff {
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

// drainDevice lets the device send what its QPs still owe the peer before
// the caller closes it: the ACK of the last message above all, which the
// responder queues when it completes the receive, so a side that stops as
// soon as it sees the completion could otherwise leave the peer retrying
// into the void (verbsapi's Context.Flush, bounded to a second).
func drainDevice(c *verbsapi.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Flush(ctx)
}
