package main

// daemon.go: `softroce daemon`, the process that owns a softroce device and
// answers the drop-in libibverbs.so.1 (libibverbs/) over a Unix socket. The
// wire format is libibverbs/proto.h; the structs here mirror it field for
// field and must change with it.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var (
		socket string
		name   string
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Serve a softroce device to programs using the drop-in libibverbs.so.1",
		Long: `daemon starts a softroce device on the link the flags describe and serves it,
on a Unix socket, to programs linked against libibverbs.so.1 that run with
softroce's drop-in library (libibverbs/, see 'softroce run'). It runs until
interrupted.

The socket is --socket, else $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock,
else /tmp/softroce-UID.sock: the rule the library follows too.`,
		Example: `  softroce daemon --link udp --addr 127.0.0.2
  LD_LIBRARY_PATH=$PWD/libibverbs ibv_devinfo -v`,
		Args: cobra.NoArgs,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket to serve (default: see above)")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d, err := startDaemon(*lf, name, defaultSocket(socket))
		if err != nil {
			return exitError{exitTrouble, err}
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "softroce daemon: %s on %s\n", name, d.path)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		signal.Stop(sig)
		if err := d.Close(); err != nil {
			return exitError{exitTrouble, err}
		}
		return nil
	}
	return cmd
}

// defaultSocket applies the socket path rule (see the daemon's help).
func defaultSocket(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv("SOFTROCE_SOCKET"); s != "" {
		return s
	}
	if rt := os.Getenv("XDG_RUNTIME_DIR"); rt != "" {
		return filepath.Join(rt, "softroce.sock")
	}
	return fmt.Sprintf("/tmp/softroce-%d.sock", os.Getuid())
}

// daemon serves one device on a Unix socket.
type daemon struct {
	path     string
	ln       net.Listener
	ctx      *verbsapi.Context
	closeDev func() error

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startDaemon opens the device and starts serving it on path. A socket file
// left by a daemon that is gone is replaced; a live one is an error.
func startDaemon(lf linkFlags, name, path string) (*daemon, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("a daemon already serves %s", path)
	}
	os.Remove(path)
	ctx, closeDev, err := openDevice(lf, name)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		closeDev()
		return nil, fmt.Errorf("daemon socket: %w", err)
	}
	d := &daemon{path: path, ln: ln, ctx: ctx, closeDev: closeDev, conns: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go d.accept()
	return d, nil
}

// Close stops serving, drops every client and closes the device.
func (d *daemon) Close() error {
	d.ln.Close() // also removes the socket file
	d.mu.Lock()
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
	return d.closeDev()
}

func (d *daemon) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns[c] = struct{}{}
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serve(c)
			d.mu.Lock()
			delete(d.conns, c)
			d.mu.Unlock()
			c.Close()
		}()
	}
}

// Operations and records of libibverbs/proto.h.
const (
	opList        = 1
	opQueryDevice = 2
	opQueryPort   = 3
	opQueryGID    = 4
	opQueryPKey   = 5
)

type wireReq struct{ Op, Dev, Port, Index uint32 }

type wireDevEntry struct {
	Name     [64]byte
	NodeGUID [8]byte
}

type wireDeviceAttr struct {
	FWVer                                            [64]byte
	NodeGUID, SysImageGUID                           [8]byte
	MaxMRSize, PageSizeCap                           uint64
	VendorID, VendorPartID, HWVer, DeviceCapFlags    uint32
	MaxQP, MaxQPWR, MaxSGE, MaxSGERd                 int32
	MaxCQ, MaxCQE, MaxMR, MaxPD                      int32
	MaxQPRdAtom, MaxEERdAtom, MaxResRdAtom           int32
	MaxQPInitRdAtom, MaxEEInitRdAtom, AtomicCap      int32
	MaxEE, MaxRDD, MaxMW, MaxRawIPv6QP, MaxRawEthyQP int32
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAt int32
	MaxAH, MaxFMR, MaxMapPerFMR, MaxSRQ, MaxSRQWR    int32
	MaxSRQSGE                                        int32
	MaxPKeys                                         uint16
	LocalCAAckDelay, PhysPortCnt                     uint8
}

type wirePortAttr struct {
	State, MaxMTU, ActiveMTU                          uint32
	GIDTblLen                                         int32
	PortCapFlags, MaxMsgSz, BadPKeyCntr, QKeyViolCntr uint32
	PKeyTblLen, LID, SMLID                            uint16
	LMC, MaxVLNum, SMSL, SubnetTimeout, InitTypeReply uint8
	ActiveWidth, ActiveSpeed, PhysState, LinkLayer    uint8
}

type wireGID struct {
	GID  [16]byte
	Type uint32 // 0 empty, 1 RoCE v1, 2 RoCE v2
}

// serve answers one client's calls until it hangs up or sends garbage.
func (d *daemon) serve(c net.Conn) {
	var req wireReq
	for {
		if err := binary.Read(c, binary.LittleEndian, &req); err != nil {
			return
		}
		body, errno := d.answer(req)
		if err := writeAnswer(c, body, errno); err != nil {
			return
		}
	}
}

func writeAnswer(w io.Writer, body any, errno syscall.Errno) error {
	if errno != 0 {
		return binary.Write(w, binary.LittleEndian, [2]uint32{uint32(errno), 0})
	}
	n := binary.Size(body)
	if err := binary.Write(w, binary.LittleEndian, [2]uint32{0, uint32(n)}); err != nil {
		return err
	}
	return binary.Write(w, binary.LittleEndian, body)
}

// answer computes the reply to one request: a record, or an errno.
func (d *daemon) answer(r wireReq) (any, syscall.Errno) {
	if r.Op != opList && r.Dev != 0 {
		return nil, syscall.ENODEV
	}
	switch r.Op {
	case opList:
		var e wireDevEntry
		copy(e.Name[:], d.ctx.Name())
		binary.BigEndian.PutUint64(e.NodeGUID[:], d.ctx.QueryDevice().NodeGUID)
		return []wireDevEntry{e}, 0
	case opQueryDevice:
		return wireDevice(d.ctx.QueryDevice()), 0
	case opQueryPort:
		p, err := d.ctx.QueryPort(int(r.Port))
		if err != nil {
			return nil, syscall.EINVAL
		}
		return wirePort(p), 0
	case opQueryGID:
		return d.gid(r)
	case opQueryPKey:
		if r.Port != 1 || r.Index != 0 {
			return nil, syscall.EINVAL
		}
		return uint16(0xffff), 0
	}
	return nil, syscall.EOPNOTSUPP
}

// gid reads one GID table entry; an unpopulated index inside the table is
// an all-zero GID, as the kernel reports it.
func (d *daemon) gid(r wireReq) (any, syscall.Errno) {
	p, err := d.ctx.QueryPort(int(r.Port))
	if err != nil || int(r.Index) >= p.GIDTblLen {
		return nil, syscall.EINVAL
	}
	var g wireGID
	addr, err := d.ctx.QueryGID(int(r.Port), int(r.Index))
	if err != nil {
		return g, 0
	}
	g.GID = addr.As16()
	g.Type = 2 // softroce speaks RoCE v2 only
	return g, 0
}

func wireDevice(a verbsapi.DeviceAttr) wireDeviceAttr {
	w := wireDeviceAttr{
		MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer, DeviceCapFlags: a.DeviceCapFlags,
		MaxQP: int32(a.MaxQP), MaxQPWR: int32(a.MaxQPWR), MaxSGE: int32(a.MaxSGE), MaxSGERd: int32(a.MaxSGERd),
		MaxCQ: int32(a.MaxCQ), MaxCQE: int32(a.MaxCQE), MaxMR: int32(a.MaxMR), MaxPD: int32(a.MaxPD),
		MaxQPRdAtom: int32(a.MaxQPRdAtom), MaxEERdAtom: int32(a.MaxEECRdAtom), MaxResRdAtom: int32(a.MaxResRdAtom),
		MaxQPInitRdAtom: int32(a.MaxQPInitRdAtom), MaxEEInitRdAtom: int32(a.MaxEECInitRdAtom), AtomicCap: int32(a.AtomicCap),
		MaxEE: int32(a.MaxEE), MaxRDD: int32(a.MaxRDD), MaxMW: int32(a.MaxMW),
		MaxRawIPv6QP: int32(a.MaxRawIPv6QP), MaxRawEthyQP: int32(a.MaxRawEthyQP),
		MaxMcastGrp: int32(a.MaxMcastGrp), MaxMcastQPAttach: int32(a.MaxMcastQPAttach), MaxTotalMcastQPAt: int32(a.MaxTotalMcastQPAttach),
		MaxAH: int32(a.MaxAH), MaxFMR: int32(a.MaxFMR), MaxMapPerFMR: int32(a.MaxMapPerFMR),
		MaxSRQ: int32(a.MaxSRQ), MaxSRQWR: int32(a.MaxSRQWR), MaxSRQSGE: int32(a.MaxSRQSGE),
		MaxPKeys: uint16(a.MaxPKeys), LocalCAAckDelay: uint8(a.LocalCAAckDelay), PhysPortCnt: uint8(a.PhysPortCnt),
	}
	copy(w.FWVer[:len(w.FWVer)-1], a.FWVer)
	binary.BigEndian.PutUint64(w.NodeGUID[:], a.NodeGUID)
	binary.BigEndian.PutUint64(w.SysImageGUID[:], a.SysImageGUID)
	return w
}

func wirePort(p verbsapi.PortAttr) wirePortAttr {
	return wirePortAttr{
		State: uint32(p.State), MaxMTU: uint32(p.MaxMTU.Enum()), ActiveMTU: uint32(p.ActiveMTU.Enum()),
		GIDTblLen: int32(p.GIDTblLen), PortCapFlags: p.PortCapFlags, MaxMsgSz: p.MaxMsgSz,
		BadPKeyCntr: p.BadPKeyCntr, QKeyViolCntr: p.QKeyViolCntr,
		PKeyTblLen: uint16(p.PKeyTblLen), LID: p.LID, SMLID: p.SMLID,
		LMC: p.LMC, MaxVLNum: p.MaxVLNum, SMSL: p.SMSL, SubnetTimeout: p.SubnetTimeout, InitTypeReply: p.InitTypeReply,
		ActiveWidth: p.ActiveWidth, ActiveSpeed: p.ActiveSpeed, PhysState: p.PhysState, LinkLayer: p.LinkLayer,
	}
}
