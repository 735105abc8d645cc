package dropin

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// testClient speaks proto.h to a daemon over a real Unix socket, as the
// C library does, or, with local set, runs the calls on a connection of the
// daemon's directly (for measuring the handlers alone).
type testClient struct {
	t     *testing.T
	uc    *net.UnixConn
	local *conn
	// reason is the reason text of the last failed answer, if it had one.
	reason string
	// rings are the client's CQs' shared rings, by CQ handle; qpRings
	// its QPs' mappings of their work rings, by QP handle.
	rings   map[uint32]*testRing
	qpRings map[uint32][]byte
}

// testRing reads a CQ's shared ring (struct sr_cq_ring) as the library
// does.
type testRing struct {
	mem     []byte
	n, cons uint32
}

func mapTestRing(t *testing.T, fd int, entries uint32) *testRing {
	t.Helper()
	require.GreaterOrEqual(t, fd, 0, "a CQ's answer carries its ring")
	mem, err := unix.Mmap(fd, 0, cqRingBytes(int(entries)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(mem) })
	return &testRing{mem: mem, n: entries}
}

func (r *testRing) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// take consumes up to max completions, passing each to f (when not nil),
// and returns how many.
func (r *testRing) take(max int, f func(wireWC)) int {
	k := 0
	for ; k < max && r.cons != atomic.LoadUint32(r.word(cqRingProd)); k++ {
		if f != nil {
			off := cqRingHeader + int(r.cons%r.n)*sizeWC
			var wc wireWC
			decode(r.mem[off:off+sizeWC], &wc)
			f(wc)
		}
		r.cons++
	}
	atomic.StoreUint32(r.word(cqRingCons), r.cons)
	return k
}

// localClient is a client without a socket.
func localClient(t *testing.T, d *testDaemon) *testClient {
	c := newTestConn(d)
	t.Cleanup(c.cleanup)
	return &testClient{t: t, local: c}
}

// callLocal is call on a local client. The fds stay the test's.
func (c *testClient) callLocal(op uint32, body []byte, fds []int) (syscall.Errno, []byte, int) {
	r := request{op: op, body: body, fds: append([]int(nil), fds...)}
	errno, err := c.local.run(&r)
	require.NoError(c.t, err)
	out := bytes.Clone(c.local.w.out[hdrSize:])
	if errno != 0 && !carriesPostResp(op) {
		out = []byte{}
	}
	fd := -1
	if errno == 0 && c.local.outFD >= 0 {
		fd, err = unix.Dup(c.local.outFD)
		require.NoError(c.t, err)
		c.t.Cleanup(func() { unix.Close(fd) })
	}
	return errno, out, fd
}

func dialDaemon(t *testing.T, sock string) *testClient {
	t.Helper()
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &testClient{t: t, uc: c.(*net.UnixConn)}
}

// enc encodes wire structs (and byte slices) back to back.
func enc(vs ...any) []byte {
	var b []byte
	for _, v := range vs {
		var err error
		if raw, ok := v.([]byte); ok {
			b = append(b, raw...)
			continue
		}
		b, err = binary.Append(b, binary.LittleEndian, v)
		if err != nil {
			panic(err)
		}
	}
	return b
}

// call sends one request with fds and returns the status, the body and the
// descriptor the answer carried (-1 if none).
func (c *testClient) call(op uint32, body []byte, fds ...int) (syscall.Errno, []byte, int) {
	c.t.Helper()
	if c.local != nil {
		return c.callLocal(op, body, fds)
	}
	msg := append(enc(wireHdr{op, uint32(len(body))}), body...)
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(msg, oob, nil)
	require.NoError(c.t, err)
	require.Equal(c.t, len(msg), n)
	var hdr [hdrSize]byte
	oobBuf := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(hdr[:], oobBuf)
	require.NoError(c.t, err)
	_, err = io.ReadFull(c.uc, hdr[n:])
	require.NoError(c.t, err)
	fd := -1
	if oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(oobBuf[:oobn])
		require.NoError(c.t, err)
		got, err := syscall.ParseUnixRights(&msgs[0])
		require.NoError(c.t, err)
		require.Len(c.t, got, 1)
		fd = got[0]
		c.t.Cleanup(func() { syscall.Close(fd) })
	}
	blen := binary.LittleEndian.Uint32(hdr[4:])
	out := make([]byte, blen&^srReason)
	_, err = io.ReadFull(c.uc, out)
	require.NoError(c.t, err)
	errno := syscall.Errno(binary.LittleEndian.Uint32(hdr[:]))
	c.reason = ""
	if blen&srReason != 0 {
		require.NotZero(c.t, errno, "a reason flags a failed answer only")
		require.LessOrEqual(c.t, len(out), srMaxReason)
		c.reason, out = string(out), []byte{}
	}
	return errno, out, fd
}

// do makes a call that must succeed and decodes its answer into out (nil:
// no body).
func (c *testClient) do(op uint32, req []byte, out any) int {
	c.t.Helper()
	errno, body, fd := c.call(op, req)
	require.Zero(c.t, errno, "op %d: %v", op, errno)
	if out == nil {
		require.Empty(c.t, body, "op %d", op)
		return fd
	}
	require.True(c.t, decode(body, out), "op %d answered %d bytes, want %d", op, len(body), binary.Size(out))
	return fd
}

// fail makes a call that must fail with errno and carry no body.
func (c *testClient) fail(errno syscall.Errno, op uint32, req []byte) {
	c.t.Helper()
	got, body, _ := c.call(op, req)
	require.Equal(c.t, errno, got, "op %d", op)
	require.Empty(c.t, body, "op %d", op)
}

func (c *testClient) handle(op uint32, req []byte) uint32 {
	c.t.Helper()
	var h wireHandle
	c.do(op, req, &h)
	return h.Handle
}

func (c *testClient) createCQ(cqe, channel uint32) uint32 {
	c.t.Helper()
	var r wireCQ
	fd := c.do(opCreateCQ, enc(wireCreateCQ{CQE: cqe, Channel: channel}), &r)
	require.GreaterOrEqual(c.t, r.CQE, cqe)
	if c.rings == nil {
		c.rings = map[uint32]*testRing{}
	}
	c.rings[r.Handle] = mapTestRing(c.t, fd, r.CQE)
	return r.Handle
}

func (c *testClient) createQP(pd, cq, srq, typ uint32) wireQP {
	c.t.Helper()
	var r wireQP
	fd := c.do(opCreateQP, enc(wireCreateQP{PD: pd, SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: typ,
		Cap: wireQPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}), &r)
	require.GreaterOrEqual(c.t, fd, 0, "a QP's answer carries its rings")
	var st unix.Stat_t
	require.NoError(c.t, unix.Fstat(fd, &st))
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { unix.Munmap(mem) })
	if c.qpRings == nil {
		c.qpRings = map[uint32][]byte{}
	}
	c.qpRings[r.Handle] = mem
	return r
}

func (c *testClient) modify(qp uint32, mask verbsapi.QPAttrMask, a wireQPAttr) syscall.Errno {
	c.t.Helper()
	errno, _, _ := c.call(opModifyQP, enc(wireModifyQP{Handle: qp, Mask: uint32(mask), Attr: a}))
	return errno
}

// post sends a POST_* body and returns the status and bad index.
func (c *testClient) post(op uint32, body []byte) (syscall.Errno, uint32) {
	c.t.Helper()
	errno, out, _ := c.call(op, body)
	var r wirePostResp
	require.True(c.t, decode(out, &r), "post answer of %d bytes", len(out))
	return errno, r.Bad
}

type testSendWR struct {
	wireSendWR
	sges   []wireSGE
	inline []byte
	bind   *wireBindMW // follows a BIND_MW
}

func sendBody(qp uint32, wrs ...testSendWR) []byte {
	b := enc(wirePost{Handle: qp, NWR: uint32(len(wrs))})
	for _, w := range wrs {
		w.NumSGE, w.InlineLen = uint32(len(w.sges)), uint32(len(w.inline))
		b = append(b, enc(w.wireSendWR)...)
		for _, s := range w.sges {
			b = append(b, enc(s)...)
		}
		b = append(b, w.inline...)
		if w.bind != nil {
			b = append(b, enc(*w.bind)...)
		}
	}
	return b
}

func recvBody(h uint32, id uint64, sges ...wireSGE) []byte {
	b := enc(wirePost{Handle: h, NWR: 1}, wireRecvWR{WRID: id, NumSGE: uint32(len(sges))})
	for _, s := range sges {
		b = append(b, enc(s)...)
	}
	return b
}

// poll returns the CQ's completions, waiting for at least one.
func (c *testClient) poll(cq uint32) []wireWC {
	c.t.Helper()
	var wcs []wireWC
	ring := c.rings[cq]
	require.NotNil(c.t, ring, "cq %d", cq)
	require.Eventually(c.t, func() bool {
		ring.take(16, func(wc wireWC) { wcs = append(wcs, wc) })
		return len(wcs) > 0
	}, 10*time.Second, time.Millisecond)
	return wcs
}

// pollOne waits for one successful completion.
func (c *testClient) pollOne(cq uint32) wireWC {
	c.t.Helper()
	wcs := c.poll(cq)
	require.Len(c.t, wcs, 1)
	require.Zero(c.t, wcs[0].Status, "wc %+v", wcs[0])
	return wcs[0]
}

// memfd is memory a test program registers: a memfd the test maps (the
// program's view) and the pieces REG_MR describes.
type memfd struct {
	fd  int
	mem []byte
}

func newMemfd(t *testing.T, size int) memfd {
	t.Helper()
	fd, err := unix.MemfdCreate("softroce-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(fd, int64(size)))
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(mem); unix.Close(fd) })
	return memfd{fd: fd, mem: mem}
}

// program is one client with the objects most tests need: a PD, a
// memfd-backed MR at a made-up program address, a CQ and an RC QP.
type program struct {
	*testClient
	pd, cq uint32
	mem    memfd
	addr   uint64 // the region's address in the "program"
	mr     wireMR
	qp     wireQP
}

const (
	accessAll = uint32(verbsapi.AccessAll)
	wrSignal  = uint32(verbsapi.SendSignaled)
)

// regMR sends a REG_MR with the pieces and fds given.
func (c *testClient) regMR(pd uint32, addr, length uint64, pieces []wireMRPiece, fds ...int) (syscall.Errno, wireMR) {
	c.t.Helper()
	b := enc(wireRegMR{PD: pd, Access: accessAll, Addr: addr, Length: length, IOVA: addr, NPieces: uint32(len(pieces))})
	for _, p := range pieces {
		b = append(b, enc(p)...)
	}
	errno, body, _ := c.call(opRegMR, b, fds...)
	var mr wireMR
	if errno == 0 {
		require.True(c.t, decode(body, &mr))
	}
	return errno, mr
}

func newProgram(t *testing.T, sock string, addr uint64) *program {
	t.Helper()
	return setupProgram(t, dialDaemon(t, sock), addr)
}

func setupProgram(t *testing.T, c *testClient, addr uint64) *program {
	t.Helper()
	p := &program{testClient: c, addr: addr}
	p.pd = p.handle(opAllocPD, nil)
	p.mem = newMemfd(t, 8192)
	var errno syscall.Errno
	errno, p.mr = p.regMR(p.pd, addr, 8192, []wireMRPiece{{VAddr: addr, Len: 8192}}, p.mem.fd)
	require.Zero(t, errno)
	p.cq = p.createCQ(64, srNone)
	p.qp = p.createQP(p.pd, p.cq, srNone, ibvQPTRC)
	return p
}

// sge names n bytes at offset off of the program's region.
func (p *program) sge(off, n int) wireSGE {
	return wireSGE{Addr: p.addr + uint64(off), Length: uint32(n), LKey: p.mr.LKey}
}

// gid1 is the daemon's GID at index 1 (its IPv4 address).
func gid1(t *testing.T, d *testDaemon) [16]byte {
	g, err := d.ctx.QueryGID(1, 1)
	require.NoError(t, err)
	return g.As16()
}

func startTestDaemon(t testing.TB, addr string) (*testDaemon, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	d, err := startDaemon(linkFlags{Link: "mem", Addr: addr}, "rxe9", sock)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d, sock
}

// connectedPrograms starts two programs on the daemon at sock, their RC QPs
// connected to each other through the device's GID gid (loopback).
func connectedPrograms(t *testing.T, sock string, gid [16]byte) (a, b *program) {
	t.Helper()
	a = newProgram(t, sock, 0x7f0000100000)
	b = newProgram(t, sock, 0x7f0000200000)
	connectQP(t, a.testClient, a.qp.Handle, b.qp.QPNum, gid)
	connectQP(t, b.testClient, b.qp.Handle, a.qp.QPNum, gid)
	return a, b
}

// connect moves an RC or UC QP to RTS, connected to remote on the daemon's
// own GID (loopback).
func connectQP(t *testing.T, c *testClient, qp, remote uint32, gid [16]byte) {
	t.Helper()
	require.Zero(t, c.modify(qp, verbsapi.QPAttrState|verbsapi.QPAttrPKeyIndex|verbsapi.QPAttrPort|verbsapi.QPAttrAccessFlags,
		wireQPAttr{QPState: uint32(verbsapi.QPSInit), PortNum: 1, QPAccessFlags: accessAll}))
	av := wireAHAttr{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: 1, PortNum: 1}
	require.Zero(t, c.modify(qp, verbsapi.QPAttrState|verbsapi.QPAttrAV|verbsapi.QPAttrPathMTU|verbsapi.QPAttrDestQPN|
		verbsapi.QPAttrRQPSN|verbsapi.QPAttrMaxDestRdAtomic|verbsapi.QPAttrMinRNRTimer,
		wireQPAttr{QPState: uint32(verbsapi.QPSRTR), AHAttr: av, PathMTU: 3, DestQPNum: remote, RQPSN: 100,
			MaxDestRdAtomic: 4, MinRNRTimer: 12}))
	require.Zero(t, c.modify(qp, verbsapi.QPAttrState|verbsapi.QPAttrSQPSN|verbsapi.QPAttrTimeout|verbsapi.QPAttrRetryCnt|
		verbsapi.QPAttrRNRRetry|verbsapi.QPAttrMaxQPRdAtomic,
		wireQPAttr{QPState: uint32(verbsapi.QPSRTS), SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}))
}
