package dropin

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/verbsapi"
)

// testClient speaks proto.h to a daemon over a real Unix socket, as the
// C library does, or, with local set, runs the calls on a connection of the
// daemon's directly (for measuring the handlers alone).
type testClient struct {
	t     *testing.T
	uc    *net.UnixConn
	local *conn
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
	out := make([]byte, binary.LittleEndian.Uint32(hdr[4:]))
	_, err = io.ReadFull(c.uc, out)
	require.NoError(c.t, err)
	return syscall.Errno(binary.LittleEndian.Uint32(hdr[:])), out, fd
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
	c.do(opCreateCQ, enc(wireCreateCQ{CQE: cqe, Channel: channel}), &r)
	require.GreaterOrEqual(c.t, r.CQE, cqe)
	return r.Handle
}

func (c *testClient) createQP(pd, cq, srq, typ uint32) wireQP {
	c.t.Helper()
	var r wireQP
	c.do(opCreateQP, enc(wireCreateQP{PD: pd, SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: typ,
		Cap: wireQPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}), &r)
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
	require.Eventually(c.t, func() bool {
		_, body, _ := c.call(opPollCQ, enc(wirePollCQ{Handle: cq, Max: 16}))
		for len(body) >= sizeWC {
			var wc wireWC
			require.True(c.t, decode(body[:sizeWC], &wc))
			wcs = append(wcs, wc)
			body = body[sizeWC:]
		}
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

func startTestDaemon(t *testing.T, addr string) (*testDaemon, string) {
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

// wireStructs pairs every struct of proto.h with its Go mirror.
var wireStructs = []struct {
	c string
	v any
}{
	{"sr_hdr", wireHdr{}}, {"sr_query", wireQuery{}}, {"sr_handle", wireHandle{}}, {"sr_hello", wireHello{}},
	{"sr_dev_entry", wireDevEntry{}}, {"sr_device_attr", wireDeviceAttr{}}, {"sr_port_attr", wirePortAttr{}},
	{"sr_gid", wireGID{}}, {"sr_async_event", wireAsyncEvent{}},
	{"sr_reg_mr", wireRegMR{}}, {"sr_mr_piece", wireMRPiece{}}, {"sr_mr", wireMR{}},
	{"sr_rereg_mr", wireReregMR{}}, {"sr_alloc_mw", wireAllocMW{}}, {"sr_mw", wireMW{}},
	{"sr_create_cq", wireCreateCQ{}}, {"sr_cq", wireCQ{}}, {"sr_resize_cq", wireResizeCQ{}},
	{"sr_destroy_cq_resp", wireDestroyCQResp{}}, {"sr_poll_cq", wirePollCQ{}}, {"sr_wc", wireWC{}},
	{"sr_req_notify", wireReqNotify{}}, {"sr_qp_cap", wireQPCap{}}, {"sr_create_qp", wireCreateQP{}},
	{"sr_qp", wireQP{}}, {"sr_ah_attr", wireAHAttr{}}, {"sr_qp_attr", wireQPAttr{}},
	{"sr_modify_qp", wireModifyQP{}}, {"sr_query_qp_resp", wireQueryQPResp{}},
	{"sr_destroy_qp_resp", wireDestroyQPResp{}}, {"sr_post", wirePost{}}, {"sr_sge", wireSGE{}},
	{"sr_send_wr", wireSendWR{}}, {"sr_bind_mw", wireBindMW{}}, {"sr_recv_wr", wireRecvWR{}},
	{"sr_post_resp", wirePostResp{}},
	{"sr_create_srq", wireCreateSRQ{}}, {"sr_srq", wireSRQ{}}, {"sr_modify_srq", wireModifySRQ{}},
	{"sr_destroy_srq_resp", wireDestroySRQResp{}}, {"sr_create_ah", wireCreateAH{}},
}

// TestWireStructSizes checks that the Go records have the sizes of every
// packed struct of dropin/libibverbs/proto.h, as gcc lays them out, and that the
// hand-written data-path codecs agree with the records.
func TestWireStructSizes(t *testing.T) {
	testenv.Tools(t, buildTools, "gcc")
	inc, err := filepath.Abs("libibverbs")
	require.NoError(t, err)
	hdr, err := os.ReadFile(filepath.Join(inc, "proto.h"))
	require.NoError(t, err)
	var inH, inGo []string
	for _, m := range regexp.MustCompile(`(?m)^struct (sr_\w+) \{`).FindAllStringSubmatch(string(hdr), -1) {
		inH = append(inH, m[1])
	}
	var src, want strings.Builder
	src.WriteString("#include <stdio.h>\n#include \"proto.h\"\nint main(void) {\n")
	for _, s := range wireStructs {
		inGo = append(inGo, s.c)
		fmt.Fprintf(&src, "\tprintf(\"%s %%zu\\n\", sizeof(struct %s));\n", s.c, s.c)
		fmt.Fprintf(&want, "%s %d\n", s.c, binary.Size(s.v))
	}
	src.WriteString("\treturn 0;\n}\n")
	sort.Strings(inH)
	sort.Strings(inGo)
	require.Equal(t, inH, inGo, "every struct of proto.h needs a Go mirror here")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sizes.c"), []byte(src.String()), 0o644))
	exe := filepath.Join(dir, "sizes")
	out, err := exec.Command("gcc", "-Wall", "-I", inc, "-o", exe, filepath.Join(dir, "sizes.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(exe).Output()
	require.NoError(t, err)
	require.Equal(t, want.String(), string(out))

	for _, n := range []struct{ got, want int }{
		{sizeWC, binary.Size(wireWC{})}, {sizeSGE, binary.Size(wireSGE{})}, {sizeSendWR, binary.Size(wireSendWR{})},
		{sizeRecvWR, binary.Size(wireRecvWR{})}, {sizePost, binary.Size(wirePost{})},
		{sizeBindMW, binary.Size(wireBindMW{})},
	} {
		require.Equal(t, n.want, n.got)
	}
	wr := wireSendWR{WRID: 1, Opcode: 2, SendFlags: 3, ImmData: 4, InvalidateRKey: 5, NumSGE: 6, InlineLen: 7,
		RemoteAddr: 8, RKey: 9, CompareAdd: 11, Swap: 12, AH: 13, RemoteQPN: 14, RemoteQKey: 15}
	assert.Equal(t, wr, getSendWR(enc(wr)))
	bind := wireBindMW{MW: 1, MWRKey: 2, RKey: 3, MRLKey: 4, Addr: 5 << 40, Length: 6, Access: 7}
	assert.Equal(t, bind, getBindMW(enc(bind)))
	assert.Equal(t, wireSGE{Addr: 1 << 40, Length: 2, LKey: 3}, getSGE(enc(wireSGE{Addr: 1 << 40, Length: 2, LKey: 3})))
	assert.Equal(t, wireRecvWR{WRID: 7, NumSGE: 2}, getRecvWR(enc(wireRecvWR{WRID: 7, NumSGE: 2})))
	w := &wire{out: nil}
	w.putWC(&verbsapi.WC{ID: 1, Status: 2, Opcode: 129, ByteLen: 4, Imm: 5, QPN: 6, SrcQP: 7, Flags: 8, VendorErr: 9})
	assert.Equal(t, enc(wireWC{WRID: 1, Status: 2, Opcode: 129, VendorErr: 9, ByteLen: 4, ImmData: 5, QPNum: 6, SrcQP: 7, WCFlags: 8}), w.out)
}

// TestDaemonProtocol speaks proto.h to the daemon directly: the queries,
// calls it must refuse with the right errno, malformed bodies, and clients
// that hang up mid-request or announce too long a body.
func TestDaemonProtocol(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	_, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock)
	require.ErrorContains(t, err, "already answers")

	c := dialDaemon(t, sock)
	q := func(dev, port, index uint32) []byte { return enc(wireQuery{dev, port, index}) }
	for _, tc := range []struct {
		name  string
		op    uint32
		body  []byte
		errno syscall.Errno
		size  int
	}{
		{"list", opList, nil, 0, binary.Size(wireDevEntry{})},
		{"list with query", opList, q(0, 0, 0), 0, binary.Size(wireDevEntry{})},
		{"list, this version", opList, enc(wireHello{srProtoVersion}), 0, binary.Size(wireDevEntry{})},
		{"list, another version", opList, enc(wireHello{srProtoVersion - 1}), syscall.EPROTONOSUPPORT, 0},
		{"list, odd body", opList, []byte{1, 2}, syscall.EINVAL, 0},
		{"device", opQueryDevice, q(0, 0, 0), 0, binary.Size(wireDeviceAttr{})},
		{"port", opQueryPort, q(0, 1, 0), 0, binary.Size(wirePortAttr{})},
		{"port 2", opQueryPort, q(0, 2, 0), syscall.EINVAL, 0},
		{"gid 1", opQueryGID, q(0, 1, 1), 0, binary.Size(wireGID{})},
		{"empty gid", opQueryGID, q(0, 1, 1023), 0, binary.Size(wireGID{})},
		{"gid past table", opQueryGID, q(0, 1, 1024), syscall.EINVAL, 0},
		{"pkey", opQueryPKey, q(0, 1, 0), 0, 2},
		{"pkey 1", opQueryPKey, q(0, 1, 1), syscall.EINVAL, 0},
		{"no device 1", opQueryDevice, q(1, 0, 0), syscall.ENODEV, 0},
		{"short query", opQueryDevice, []byte{0, 0}, syscall.EINVAL, 0},
		{"long query", opQueryPort, append(q(0, 1, 0), 0), syscall.EINVAL, 0},
		{"unknown op", 99, nil, syscall.EOPNOTSUPP, 0},
		{"alloc pd with a body", opAllocPD, []byte{1}, syscall.EINVAL, 0},
		{"dealloc unknown pd", opDeallocPD, enc(wireHandle{12345}), syscall.EINVAL, 0},
		{"dealloc pd short", opDeallocPD, []byte{1}, syscall.EINVAL, 0},
		{"cq on unknown channel", opCreateCQ, enc(wireCreateCQ{CQE: 4, Channel: 77}), syscall.EINVAL, 0},
		{"poll unknown cq", opPollCQ, enc(wirePollCQ{Handle: 77, Max: 1}), syscall.EINVAL, 0},
		{"qp in unknown pd", opCreateQP, enc(wireCreateQP{PD: 77, SRQ: srNone, QPType: ibvQPTRC}), syscall.EINVAL, 0},
		{"raw packet qp", opCreateQP, enc(wireCreateQP{PD: 77, SRQ: srNone, QPType: 8}), syscall.EOPNOTSUPP, 0},
		{"modify unknown qp", opModifyQP, enc(wireModifyQP{Handle: 77}), syscall.EINVAL, 0},
		{"post short", opPostSend, []byte{1, 2, 3}, syscall.EINVAL, 4},
		{"post unknown qp", opPostRecv, enc(wirePost{Handle: 77}), syscall.EINVAL, 4},
		{"no async event", opGetAsyncEvent, nil, syscall.EAGAIN, 0},
		{"unknown channel", opGetCQEvent, enc(wireHandle{77}), syscall.EINVAL, 0},
	} {
		errno, body, _ := c.call(tc.op, tc.body)
		require.Equal(t, tc.errno, errno, tc.name)
		require.Len(t, body, tc.size, tc.name)
		switch tc.name {
		case "gid 1":
			var g wireGID
			require.True(t, decode(body, &g))
			require.Equal(t, net.ParseIP("10.0.0.9").To16(), net.IP(g.GID[:]))
			require.EqualValues(t, 2, g.Type)
		case "empty gid":
			require.Equal(t, make([]byte, len(body)), body)
		case "list":
			require.Equal(t, "rxe9", strings.TrimRight(string(body[:64]), "\x00"))
		}
	}

	// Descriptors sent with a call that takes none are refused (and closed).
	m := newMemfd(t, 4096)
	errno, _, _ := c.call(opAllocPD, nil, m.fd)
	require.Equal(t, syscall.EINVAL, errno)

	// Garbage bodies of every op get an answer (call requires one), never
	// a crash; most are refused.
	refused := 0
	for op := uint32(1); op <= 82; op++ {
		for _, n := range []int{0, 3, 4, 8, 12, 16, 57, 200} {
			if errno, _, _ := c.call(op, bytes.Repeat([]byte{0xA5 ^ byte(op)}, n)); errno != 0 {
				refused++
			}
		}
	}
	require.Greater(t, refused, 82*8*9/10)
	errno, _, _ = c.call(opList, nil)
	require.Zero(t, errno)

	// A client that sends half a request and hangs up leaves the daemon
	// serving; so does one that announces a body over SR_MAX_BODY, which
	// is cut off.
	h := dialDaemon(t, sock)
	_, err = h.uc.Write([]byte{1, 0, 0})
	require.NoError(t, err)
	h.uc.Close()
	big := dialDaemon(t, sock)
	_, err = big.uc.Write(enc(wireHdr{opList, srMaxBody + 1}))
	require.NoError(t, err)
	_, err = big.uc.Read(make([]byte, 8))
	require.ErrorIs(t, err, io.EOF)
	errno, _, _ = c.call(opList, nil)
	require.Zero(t, errno)
	// Whatever the garbage created goes with the connection.
	c.uc.Close()
	requireNoResources(t, d)
}

// requireNoResources waits for the daemon to have destroyed every object
// (connections are cleaned up after they close).
func requireNoResources(t *testing.T, d *testDaemon) {
	t.Helper()
	require.Eventually(t, func() bool { return d.ctx.Device().Resources() == rxe.Resources{} }, 10*time.Second, time.Millisecond,
		"left: %+v", d.ctx.Device().Resources())
}

// TestDaemonRC runs two programs, each its own connection with a PD, a
// memfd-backed MR, a CQ and an RC QP, connected to each other through the
// daemon's device: WRITE, READ, SEND/RECV (also inline) and an atomic, all
// landing in the programs' memfds.
func TestDaemonRC(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a, b := connectedPrograms(t, sock, gid)

	// WRITE: b's bytes land in a's memfd.
	copy(b.mem.mem[100:], "written by b")
	errno, bad := b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: a.addr + 5000, RKey: a.mr.RKey}, sges: []wireSGE{b.sge(100, 12)}}))
	require.Zero(t, errno)
	require.Zero(t, bad)
	wc := b.pollOne(b.cq)
	assert.EqualValues(t, 1, wc.WRID)
	assert.EqualValues(t, verbsapi.WCRDMAWrite, wc.Opcode)
	assert.Equal(t, b.qp.QPNum, wc.QPNum)
	assert.Equal(t, "written by b", string(a.mem.mem[5000:5012]))

	// READ: a fetches b's bytes.
	copy(b.mem.mem[7000:], "read from b")
	errno, _ = a.post(opPostSend, sendBody(a.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 2, Opcode: uint32(verbsapi.WRRead), SendFlags: wrSignal,
			RemoteAddr: b.addr + 7000, RKey: b.mr.RKey}, sges: []wireSGE{a.sge(0, 11)}}))
	require.Zero(t, errno)
	assert.EqualValues(t, verbsapi.WCRDMARead, a.pollOne(a.cq).Opcode)
	assert.Equal(t, "read from b", string(a.mem.mem[:11]))

	// SEND/RECV, the second inline, in one POST_SEND.
	for i := range 2 {
		errno, _ = a.post(opPostRecv, recvBody(a.qp.Handle, uint64(10+i), a.sge(1000+100*i, 100)))
		require.Zero(t, errno)
	}
	copy(b.mem.mem[200:], "hello")
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle,
		testSendWR{wireSendWR: wireSendWR{WRID: 3, Opcode: uint32(verbsapi.WRSend), SendFlags: wrSignal},
			sges: []wireSGE{b.sge(200, 5)}},
		testSendWR{wireSendWR: wireSendWR{WRID: 4, Opcode: uint32(verbsapi.WRSendImm),
			SendFlags: wrSignal | uint32(verbsapi.SendInline), ImmData: 0x01020304}, inline: []byte("inline!")}))
	require.Zero(t, errno)
	var recvs []wireWC
	require.Eventually(t, func() bool { recvs = append(recvs, a.poll(a.cq)...); return len(recvs) == 2 }, 10*time.Second, time.Millisecond)
	assert.EqualValues(t, 10, recvs[0].WRID)
	assert.EqualValues(t, 5, recvs[0].ByteLen)
	assert.EqualValues(t, verbsapi.WCRecv, recvs[0].Opcode)
	assert.EqualValues(t, 11, recvs[1].WRID)
	assert.EqualValues(t, 7, recvs[1].ByteLen)
	assert.EqualValues(t, 0x01020304, recvs[1].ImmData)
	assert.NotZero(t, recvs[1].WCFlags&uint32(verbsapi.WCWithImm))
	assert.Equal(t, "hello", string(a.mem.mem[1000:1005]))
	assert.Equal(t, "inline!", string(a.mem.mem[1100:1107]))
	sends := b.poll(b.cq)
	if len(sends) < 2 {
		sends = append(sends, b.poll(b.cq)...)
	}
	require.Len(t, sends, 2)

	// FETCH_ADD on a's memory: a sees the sum, b the original value.
	binary.LittleEndian.PutUint64(a.mem.mem[4096:], 40)
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 5, Opcode: uint32(verbsapi.WRFetchAdd), SendFlags: wrSignal,
			RemoteAddr: a.addr + 4096, RKey: a.mr.RKey, CompareAdd: 2}, sges: []wireSGE{b.sge(3000, 8)}}))
	require.Zero(t, errno)
	assert.EqualValues(t, verbsapi.WCFetchAdd, b.pollOne(b.cq).Opcode)
	assert.EqualValues(t, 42, binary.LittleEndian.Uint64(a.mem.mem[4096:]))
	assert.EqualValues(t, 40, binary.LittleEndian.Uint64(b.mem.mem[3000:]))

	// QUERY_QP reports what was set and how the QP was created.
	var qr wireQueryQPResp
	a.do(opQueryQP, enc(wireHandle{a.qp.Handle}), &qr)
	assert.EqualValues(t, verbsapi.QPSRTS, qr.Attr.QPState)
	assert.EqualValues(t, 3, qr.Attr.PathMTU)
	assert.Equal(t, b.qp.QPNum, qr.Attr.DestQPNum)
	assert.Equal(t, gid, qr.Attr.AHAttr.DGID)
	assert.EqualValues(t, 1, qr.Attr.AHAttr.IsGlobal)
	assert.Equal(t, wireCreateQP{PD: a.pd, SendCQ: a.cq, RecvCQ: a.cq, SRQ: srNone, QPType: ibvQPTRC, Cap: a.qp.Cap}, qr.Init)

	// A post that fails part way says which WR: the first was posted.
	errno, bad = b.post(opPostSend, sendBody(b.qp.Handle,
		testSendWR{wireSendWR: wireSendWR{WRID: 6, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: a.addr, RKey: a.mr.RKey}, sges: []wireSGE{b.sge(0, 1)}},
		testSendWR{wireSendWR: wireSendWR{WRID: 7, Opcode: 300}}))
	assert.Equal(t, syscall.EINVAL, errno)
	assert.EqualValues(t, 1, bad)
	assert.EqualValues(t, 6, b.pollOne(b.cq).WRID)

	// Refusals: a bad MTU, a transition that does not exist, an object in
	// use, and a's handles seen from a third program.
	assert.Equal(t, syscall.EINVAL, a.modify(a.qp.Handle, verbsapi.QPAttrPathMTU, wireQPAttr{PathMTU: 6}))
	assert.Equal(t, syscall.EINVAL, a.modify(a.qp.Handle, verbsapi.QPAttrState, wireQPAttr{QPState: uint32(verbsapi.QPSInit)}))
	assert.Equal(t, syscall.EOPNOTSUPP, a.modify(a.qp.Handle, 1<<25, wireQPAttr{}))
	a.fail(syscall.EBUSY, opDestroyCQ, enc(wireHandle{a.cq}))
	a.fail(syscall.EBUSY, opDeallocPD, enc(wireHandle{a.pd}))
	other := dialDaemon(t, sock)
	other.fail(syscall.EINVAL, opQueryQP, enc(wireHandle{a.qp.Handle}))
	other.fail(syscall.EINVAL, opDeregMR, enc(wireHandle{a.mr.Handle}))
	errno, _ = other.post(opPostSend, sendBody(a.qp.Handle))
	assert.Equal(t, syscall.EINVAL, errno)

	// Orderly teardown by a; b just hangs up.
	var qd wireDestroyQPResp
	a.do(opDestroyQP, enc(wireHandle{a.qp.Handle}), &qd)
	a.do(opDeregMR, enc(wireHandle{a.mr.Handle}), nil)
	var cd wireDestroyCQResp
	a.do(opDestroyCQ, enc(wireHandle{a.cq}), &cd)
	a.do(opDeallocPD, enc(wireHandle{a.pd}), nil)
	a.fail(syscall.EINVAL, opDeallocPD, enc(wireHandle{a.pd}))
	b.uc.Close()
	requireNoResources(t, d)
}

// TestDaemonMRShared registers a region made of two memfd pieces at an
// address that is not page-aligned, and checks that the daemon maps the
// very pages: a WRITE lands in the right memfd at the right offset, and a
// program's store is what a READ returns. Bad REG_MRs fail with EINVAL and
// leave no descriptor open in the daemon.
func TestDaemonMRShared(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a, b := connectedPrograms(t, sock, gid)

	// [base+100, base+100+5000) covers two pages: the first from page 1
	// of m1, the second from page 0 of m2.
	const base = 0x7f0000300000
	m1, m2 := newMemfd(t, 8192), newMemfd(t, 4096)
	pieces := []wireMRPiece{{VAddr: base, Len: 4096, Offset: 4096}, {VAddr: base + 4096, Len: 4096}}
	errno, mr := a.regMR(a.pd, base+100, 5000, pieces, m1.fd, m2.fd)
	require.Zero(t, errno)

	copy(b.mem.mem[0:], bytes.Repeat([]byte("0123456789"), 500))
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: base + 100, RKey: mr.RKey}, sges: []wireSGE{b.sge(0, 5000)}}))
	require.Zero(t, errno)
	b.pollOne(b.cq)
	want := b.mem.mem[:5000]
	assert.Equal(t, want[:3996], m1.mem[4096+100:], "first page, from offset 100")
	assert.Equal(t, want[3996:], m2.mem[:1004], "second page")
	assert.Equal(t, make([]byte, 100), m1.mem[4096:4196], "bytes before the region untouched")

	copy(m2.mem[1000:], "edge")
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 2, Opcode: uint32(verbsapi.WRRead), SendFlags: wrSignal,
			RemoteAddr: base + 100 + 4996, RKey: mr.RKey}, sges: []wireSGE{b.sge(6000, 4)}}))
	require.Zero(t, errno)
	b.pollOne(b.cq)
	assert.Equal(t, "edge", string(b.mem.mem[6000:6004]))

	// Access past the region's end fails remotely.
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 3, Opcode: uint32(verbsapi.WRRead), SendFlags: wrSignal,
			RemoteAddr: base + 100 + 4998, RKey: mr.RKey}, sges: []wireSGE{b.sge(6000, 4)}}))
	require.Zero(t, errno)
	wcs := b.poll(b.cq)
	assert.EqualValues(t, verbsapi.WCRemAccessErr, wcs[0].Status)

	small := newMemfd(t, 4096)
	fdsBefore := openFDs(t)
	for _, tc := range []struct {
		name   string
		addr   uint64
		length uint64
		pieces []wireMRPiece
		fds    []int
	}{
		{"no fds", base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, nil},
		{"extra fd", base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, []int{m1.fd, m2.fd}},
		{"empty", base, 0, []wireMRPiece{{VAddr: base, Len: 4096}}, []int{m1.fd}},
		{"gap", base, 8192, []wireMRPiece{{VAddr: base, Len: 4096}, {VAddr: base + 8192, Len: 4096}}, []int{m1.fd, m2.fd}},
		{"short cover", base, 8192, []wireMRPiece{{VAddr: base, Len: 4096}}, []int{m1.fd}},
		{"unaligned start", base + 1, 100, []wireMRPiece{{VAddr: base + 1, Len: 4096}}, []int{m1.fd}},
		{"unaligned offset", base, 4096, []wireMRPiece{{VAddr: base, Len: 4096, Offset: 100}}, []int{m1.fd}},
		{"past the file", base, 8192, []wireMRPiece{{VAddr: base, Len: 8192}}, []int{small.fd}},
		{"not a file", base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, []int{int(os.Stdin.Fd())}},
		{"wraps", 1<<64 - 4096, 8192, []wireMRPiece{{VAddr: 1<<64 - 4096, Len: 4096}}, []int{m1.fd}},
	} {
		errno, _ := a.regMR(a.pd, tc.addr, tc.length, tc.pieces, tc.fds...)
		assert.Equal(t, syscall.EINVAL, errno, tc.name)
	}
	errno, _, _ = a.call(opRegMR, enc(wireRegMR{PD: a.pd, Addr: base, Length: 4096, NPieces: 2}, wireMRPiece{VAddr: base, Len: 4096}), m1.fd)
	assert.Equal(t, syscall.EINVAL, errno, "fewer pieces than npieces says")
	errno, _, _ = a.call(opRegMR, enc(wireRegMR{PD: 999, Addr: base, Length: 4096, NPieces: 1}, wireMRPiece{VAddr: base, Len: 4096}), m1.fd)
	assert.Equal(t, syscall.EINVAL, errno, "unknown pd")
	assert.Equal(t, fdsBefore, openFDs(t), "the daemon closes the fds of failed calls")

	a.do(opDeregMR, enc(wireHandle{mr.Handle}), nil)
	a.uc.Close()
	b.uc.Close()
	requireNoResources(t, d)
}

// reregMR sends a REREG_MR with the pieces and fds given (npieces is
// len(pieces)); a failure must carry no body.
func (c *testClient) reregMR(r wireReregMR, pieces []wireMRPiece, fds ...int) (syscall.Errno, wireMR) {
	c.t.Helper()
	r.NPieces = uint32(len(pieces))
	b := enc(r)
	for _, p := range pieces {
		b = append(b, enc(p)...)
	}
	errno, body, _ := c.call(opReregMR, b, fds...)
	var mr wireMR
	if errno == 0 {
		require.True(c.t, decode(body, &mr), "answer of %d bytes", len(body))
	} else {
		require.Empty(c.t, body)
	}
	return errno, mr
}

// writeTo posts a signaled WRITE of n bytes of p's region from off to addr
// under rkey and returns its completion.
func (p *program) writeTo(id, addr uint64, rkey uint32, off, n int) wireWC {
	p.t.Helper()
	errno, _ := p.post(opPostSend, sendBody(p.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: id, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: addr, RKey: rkey}, sges: []wireSGE{p.sge(off, n)}}))
	require.Zero(p.t, errno)
	wcs := p.poll(p.cq)
	require.Len(p.t, wcs, 1)
	return wcs[0]
}

// TestDaemonReregMR re-registers a live MR as ibv_rereg_mr does and checks
// that it keeps its handle and keys, as rxe's MRs do: the rkey b was handed
// while the MR had no remote access works once REREG_MR grants remote
// write, follows the MR to new pages and to another PD, fails with a remote
// access error once remote write is taken away again, and a rereg that
// fails leaves the MR working as it was.
func TestDaemonReregMR(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a, b := connectedPrograms(t, sock, gid)

	const (
		base   = 0x7f0000300000
		local  = uint32(verbsapi.AccessLocalWrite)
		remote = uint32(verbsapi.AccessLocalWrite | verbsapi.AccessRemoteWrite)
	)
	m1, m2 := newMemfd(t, 4096), newMemfd(t, 4096)
	errno, body, _ := a.call(opRegMR, enc(wireRegMR{PD: a.pd, Access: local, Addr: base, Length: 4096, IOVA: base,
		NPieces: 1}, wireMRPiece{VAddr: base, Len: 4096}), m1.fd)
	require.Zero(t, errno)
	var mr wireMR
	require.True(t, decode(body, &mr))
	require.NotZero(t, mr.LKey)
	require.Equal(t, mr.LKey, mr.RKey, "the rkey is the lkey, as rxe reports it")

	errno, got := a.reregMR(wireReregMR{Handle: mr.Handle, Flags: reregAccess, Access: remote}, nil)
	require.Zero(t, errno)
	require.Equal(t, mr, got, "same handle and keys")
	copy(b.mem.mem, "granted")
	require.Zero(t, b.writeTo(1, base+10, mr.RKey, 0, 7).Status)
	assert.Equal(t, "granted", string(m1.mem[10:17]))

	// New pages: the same rkey now reaches m2, not m1.
	errno, got = a.reregMR(wireReregMR{Handle: mr.Handle, Flags: reregTranslation, Addr: base, Length: 4096, IOVA: base},
		[]wireMRPiece{{VAddr: base, Len: 4096}}, m2.fd)
	require.Zero(t, errno)
	require.Equal(t, mr, got)
	copy(b.mem.mem, "moved")
	require.Zero(t, b.writeTo(2, base+20, mr.RKey, 0, 5).Status)
	assert.Equal(t, "moved", string(m2.mem[20:25]))
	assert.Equal(t, make([]byte, 5), m1.mem[20:25], "the old pages are no longer the MR's")

	// Another PD and back, and all three changes at once (back to m1).
	pd2 := a.handle(opAllocPD, nil)
	errno, got = a.reregMR(wireReregMR{Handle: mr.Handle, Flags: reregPD, PD: pd2}, nil)
	require.Zero(t, errno)
	require.Equal(t, mr, got)
	a.fail(syscall.EBUSY, opDeallocPD, enc(wireHandle{pd2}))
	errno, got = a.reregMR(wireReregMR{Handle: mr.Handle, Flags: reregAll, PD: a.pd, Access: remote,
		Addr: base, Length: 4096, IOVA: base}, []wireMRPiece{{VAddr: base, Len: 4096}}, m1.fd)
	require.Zero(t, errno)
	require.Equal(t, mr, got)
	a.do(opDeallocPD, enc(wireHandle{pd2}), nil)

	// Refusals leave the MR as it was, keys and all.
	fdsBefore := openFDs(t)
	for _, tc := range []struct {
		name   string
		r      wireReregMR
		pieces []wireMRPiece
		fds    []int
	}{
		{"no flags", wireReregMR{Handle: mr.Handle}, nil, nil},
		{"unknown flag", wireReregMR{Handle: mr.Handle, Flags: reregAccess | 1<<3, Access: remote}, nil, nil},
		{"unknown mr", wireReregMR{Handle: 999, Flags: reregAccess, Access: remote}, nil, nil},
		{"unknown pd", wireReregMR{Handle: mr.Handle, Flags: reregPD, PD: 999}, nil, nil},
		{"remote write without local write", wireReregMR{Handle: mr.Handle, Flags: reregAccess,
			Access: uint32(verbsapi.AccessRemoteWrite)}, nil, nil},
		{"pieces without translation", wireReregMR{Handle: mr.Handle, Flags: reregAccess, Access: remote},
			[]wireMRPiece{{VAddr: base, Len: 4096}}, []int{m2.fd}},
		{"bad translation", wireReregMR{Handle: mr.Handle, Flags: reregTranslation, Addr: base, Length: 8192, IOVA: base},
			[]wireMRPiece{{VAddr: base, Len: 4096}}, []int{m2.fd}},
	} {
		errno, _ := a.reregMR(tc.r, tc.pieces, tc.fds...)
		assert.Equal(t, syscall.EINVAL, errno, tc.name)
	}
	assert.Equal(t, fdsBefore, openFDs(t), "the daemon closes the fds of failed calls")
	copy(b.mem.mem, "still here")
	require.Zero(t, b.writeTo(3, base+30, mr.RKey, 0, 10).Status)
	assert.Equal(t, "still here", string(m1.mem[30:40]))

	// Revoked: the same rkey now fails remotely.
	errno, got = a.reregMR(wireReregMR{Handle: mr.Handle, Flags: reregAccess, Access: local}, nil)
	require.Zero(t, errno)
	require.Equal(t, mr, got)
	copy(b.mem.mem, "revoked")
	assert.EqualValues(t, verbsapi.WCRemAccessErr, b.writeTo(4, base+50, mr.RKey, 0, 7).Status)
	assert.Equal(t, make([]byte, 7), m1.mem[50:57])

	a.do(opDeregMR, enc(wireHandle{mr.Handle}), nil)
	a.uc.Close()
	b.uc.Close()
	requireNoResources(t, d)
}

// openFDs lists this process's descriptors (the daemon runs in it).
func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// waitEventfd waits for an eventfd to count an event and takes it.
func waitEventfd(t *testing.T, fd int) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 10_000)
	require.NoError(t, err)
	require.Equal(t, 1, n, "no event on the eventfd")
	var v [8]byte
	_, err = unix.Read(fd, v[:])
	require.NoError(t, err)
	require.EqualValues(t, 1, binary.NativeEndian.Uint64(v[:]), "a semaphore eventfd gives one at a time")
}

// eventfdIdle reports whether an eventfd counts nothing.
func eventfdIdle(t *testing.T, fd int) bool {
	t.Helper()
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	require.NoError(t, err)
	return n == 0
}

// TestDaemonUD sends a UD datagram through an address handle.
func TestDaemonUD(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a := newProgram(t, sock, 0x7f0000100000)
	b := newProgram(t, sock, 0x7f0000200000)
	const qkey = 0x11111111
	ud := map[*program]wireQP{}
	for _, p := range []*program{a, b} {
		q := p.createQP(p.pd, p.cq, srNone, ibvQPTUD)
		require.Zero(t, p.modify(q.Handle, verbsapi.QPAttrState|verbsapi.QPAttrPKeyIndex|verbsapi.QPAttrPort|verbsapi.QPAttrQKey,
			wireQPAttr{QPState: uint32(verbsapi.QPSInit), PortNum: 1, QKey: qkey}))
		require.Zero(t, p.modify(q.Handle, verbsapi.QPAttrState, wireQPAttr{QPState: uint32(verbsapi.QPSRTR)}))
		require.Zero(t, p.modify(q.Handle, verbsapi.QPAttrState|verbsapi.QPAttrSQPSN, wireQPAttr{QPState: uint32(verbsapi.QPSRTS), SQPSN: 7}))
		ud[p] = q
	}
	b.fail(syscall.EINVAL, opCreateAH, enc(wireCreateAH{PD: b.pd, Attr: wireAHAttr{DGID: gid, SGIDIndex: 1}}))
	ah := b.handle(opCreateAH, enc(wireCreateAH{PD: b.pd, Attr: wireAHAttr{DGID: gid, SGIDIndex: 1, HopLimit: 64, IsGlobal: 1, PortNum: 1}}))

	errno, _ := a.post(opPostRecv, recvBody(ud[a].Handle, 1, a.sge(0, 40+100)))
	require.Zero(t, errno)
	copy(b.mem.mem, "datagram")
	wr := testSendWR{wireSendWR: wireSendWR{WRID: 2, Opcode: uint32(verbsapi.WRSend), SendFlags: wrSignal,
		AH: ah, RemoteQPN: ud[a].QPNum, RemoteQKey: qkey}, sges: []wireSGE{b.sge(0, 8)}}
	errno, _ = b.post(opPostSend, sendBody(ud[b].Handle, wr))
	require.Zero(t, errno)
	assert.EqualValues(t, 2, b.pollOne(b.cq).WRID)
	wc := a.pollOne(a.cq)
	assert.EqualValues(t, 48, wc.ByteLen, "a 40-byte GRH, then the data")
	assert.Equal(t, ud[b].QPNum, wc.SrcQP)
	assert.NotZero(t, wc.WCFlags&uint32(verbsapi.WCWithGRH))
	assert.Equal(t, "datagram", string(a.mem.mem[40:48]))

	wr.AH = ah + 100
	errno, bad := b.post(opPostSend, sendBody(ud[b].Handle, wr))
	assert.Equal(t, syscall.EINVAL, errno, "unknown address handle")
	assert.Zero(t, bad)
	b.do(opDestroyAH, enc(wireHandle{ah}), nil)
	b.fail(syscall.EINVAL, opDestroyAH, enc(wireHandle{ah}))
}

// TestDaemonSRQAsync receives through an SRQ and routes its limit event
// to the program that owns it, through the async eventfd.
func TestDaemonSRQAsync(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a := newProgram(t, sock, 0x7f0000100000)
	b := newProgram(t, sock, 0x7f0000200000)
	afd := a.do(opAsyncFD, nil, nil)
	require.GreaterOrEqual(t, afd, 0)
	bfd := b.do(opAsyncFD, nil, nil)
	require.GreaterOrEqual(t, bfd, 0)

	var srq wireSRQ
	a.do(opCreateSRQ, enc(wireCreateSRQ{PD: a.pd, MaxWR: 8, MaxSGE: 1}), &srq)
	assert.Equal(t, wireSRQ{Handle: srq.Handle, MaxWR: 8, MaxSGE: 1}, srq)
	a.do(opModifySRQ, enc(wireModifySRQ{Handle: srq.Handle, Mask: ibvSRQLimit, SRQLimit: 2}), nil)
	a.fail(syscall.EOPNOTSUPP, opModifySRQ, enc(wireModifySRQ{Handle: srq.Handle, Mask: ibvSRQMaxWR, MaxWR: 16}))
	a.fail(syscall.EINVAL, opModifySRQ, enc(wireModifySRQ{Handle: srq.Handle, Mask: 4}))
	a.fail(syscall.EINVAL, opModifySRQ, enc(wireModifySRQ{Handle: srq.Handle, Mask: ibvSRQLimit, SRQLimit: 9}))
	a.do(opQuerySRQ, enc(wireHandle{srq.Handle}), &srq)
	assert.EqualValues(t, 2, srq.SRQLimit)

	qa := a.createQP(a.pd, a.cq, srq.Handle, ibvQPTRC)
	assert.Zero(t, qa.Cap.MaxRecvWR, "receives come from the SRQ")
	connectQP(t, a.testClient, qa.Handle, b.qp.QPNum, gid)
	connectQP(t, b.testClient, b.qp.Handle, qa.QPNum, gid)
	errno, _ := a.post(opPostRecv, recvBody(qa.Handle, 9, a.sge(0, 10)))
	assert.Equal(t, syscall.EINVAL, errno, "the QP has an SRQ")
	for i := range 2 {
		errno, _ = a.post(opPostSRQRecv, recvBody(srq.Handle, uint64(20+i), a.sge(100*i, 100)))
		require.Zero(t, errno)
	}
	a.fail(syscall.EAGAIN, opGetAsyncEvent, nil)

	copy(b.mem.mem, "to the srq")
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRSend), SendFlags: wrSignal}, sges: []wireSGE{b.sge(0, 10)}}))
	require.Zero(t, errno)
	b.pollOne(b.cq)
	wc := a.pollOne(a.cq)
	assert.EqualValues(t, 20, wc.WRID)
	assert.Equal(t, qa.QPNum, wc.QPNum)
	assert.Equal(t, "to the srq", string(a.mem.mem[:10]))

	// One WQE left, below the limit of 2: the event is a's alone.
	waitEventfd(t, afd)
	var ev wireAsyncEvent
	a.do(opGetAsyncEvent, nil, &ev)
	assert.Equal(t, wireAsyncEvent{EventType: uint32(verbsapi.EventSRQLimitReached), Kind: elemSRQ, Element: srq.Handle}, ev)
	a.fail(syscall.EAGAIN, opGetAsyncEvent, nil)
	assert.True(t, eventfdIdle(t, bfd))
	b.fail(syscall.EAGAIN, opGetAsyncEvent, nil)

	a.fail(syscall.EBUSY, opDestroySRQ, enc(wireHandle{srq.Handle}))
	var qd wireDestroyQPResp
	a.do(opDestroyQP, enc(wireHandle{qa.Handle}), &qd)
	var sd wireDestroySRQResp
	a.do(opDestroySRQ, enc(wireHandle{srq.Handle}), &sd)
	assert.EqualValues(t, 1, sd.EventsReported)
}

// TestDaemonCompChannel gets a completion event through a completion
// channel's eventfd.
func TestDaemonCompChannel(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a := newProgram(t, sock, 0x7f0000100000)
	b := newProgram(t, sock, 0x7f0000200000)
	var chh wireHandle
	efd := a.do(opCreateCompChannel, nil, &chh)
	require.GreaterOrEqual(t, efd, 0)
	cq := a.createCQ(16, chh.Handle)
	qp := a.createQP(a.pd, cq, srNone, ibvQPTRC)
	connectQP(t, a.testClient, qp.Handle, b.qp.QPNum, gid)
	connectQP(t, b.testClient, b.qp.Handle, qp.QPNum, gid)
	a.fail(syscall.EAGAIN, opGetCQEvent, enc(wireHandle{chh.Handle}))
	a.fail(syscall.EINVAL, opReqNotifyCQ, enc(wireHandle{cq}))
	a.do(opReqNotifyCQ, enc(wireReqNotify{Handle: cq}), nil)

	errno, _ := a.post(opPostSend, sendBody(qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: b.addr, RKey: b.mr.RKey}, sges: []wireSGE{a.sge(0, 8)}}))
	require.Zero(t, errno)
	waitEventfd(t, efd)
	var got wireHandle
	a.do(opGetCQEvent, enc(wireHandle{chh.Handle}), &got)
	assert.Equal(t, cq, got.Handle)
	a.fail(syscall.EAGAIN, opGetCQEvent, enc(wireHandle{chh.Handle}))
	assert.EqualValues(t, 1, a.pollOne(cq).WRID)

	// Not re-armed: the next completion raises no event.
	errno, _ = a.post(opPostSend, sendBody(qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 2, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: b.addr, RKey: b.mr.RKey}, sges: []wireSGE{a.sge(0, 8)}}))
	require.Zero(t, errno)
	assert.EqualValues(t, 2, a.pollOne(cq).WRID)
	assert.True(t, eventfdIdle(t, efd))

	var rc wireCQ
	a.do(opResizeCQ, enc(wireResizeCQ{Handle: cq, CQE: 100}), &rc)
	assert.GreaterOrEqual(t, rc.CQE, uint32(100))
	a.fail(syscall.EBUSY, opDestroyCompChannel, enc(wireHandle{chh.Handle}))
	var qd wireDestroyQPResp
	a.do(opDestroyQP, enc(wireHandle{qp.Handle}), &qd)
	var cd wireDestroyCQResp
	a.do(opDestroyCQ, enc(wireHandle{cq}), &cd)
	assert.Equal(t, wireDestroyCQResp{CompEvents: 1}, cd)
	a.do(opDestroyCompChannel, enc(wireHandle{chh.Handle}), nil)
	a.fail(syscall.EINVAL, opGetCQEvent, enc(wireHandle{chh.Handle}))
}

// crashChildEnv makes TestDaemonCrashChild run: it is the program that
// TestDaemonCrash kills.
const crashChildEnv = "SOFTROCE_TEST_CRASH_SOCKET"

// TestDaemonCrashChild, run by TestDaemonCrash in a child process, creates
// one of every object, with a connected QP pair busy sending, and then
// dies by SIGKILL without destroying anything.
func TestDaemonCrashChild(t *testing.T) {
	sock := os.Getenv(crashChildEnv)
	if sock == "" {
		t.Skip("run by TestDaemonCrash")
	}
	gid, err := netip.ParseAddr(os.Getenv(crashChildEnv + "_GID"))
	require.NoError(t, err)
	a, b := connectedPrograms(t, sock, gid.As16())
	a.do(opAsyncFD, nil, nil)
	var ch wireHandle
	a.do(opCreateCompChannel, nil, &ch)
	cq := a.createCQ(4, ch.Handle)
	a.do(opReqNotifyCQ, enc(wireReqNotify{Handle: cq}), nil)
	var srq wireSRQ
	a.do(opCreateSRQ, enc(wireCreateSRQ{PD: a.pd, MaxWR: 4, MaxSGE: 1, SRQLimit: 1}), &srq)
	a.createQP(a.pd, cq, srq.Handle, ibvQPTUD)
	a.handle(opCreateAH, enc(wireCreateAH{PD: a.pd, Attr: wireAHAttr{DGID: gid.As16(), SGIDIndex: 1, IsGlobal: 1}}))
	for i := range 8 {
		errno, _ := b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
			wireSendWR: wireSendWR{WRID: uint64(i), Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
				RemoteAddr: a.addr, RKey: a.mr.RKey}, sges: []wireSGE{b.sge(0, 8192)}}))
		require.Zero(t, errno)
	}
	fmt.Println("crash child ready")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// TestDaemonCrash: a program killed with everything in place leaves the
// daemon without a single object of its, and serving.
func TestDaemonCrash(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid, err := d.ctx.QueryGID(1, 1)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+sock, crashChildEnv+"_GID="+gid.String())
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the child dies by SIGKILL\n%s", out)
	require.Contains(t, string(out), "crash child ready")
	requireNoResources(t, d)

	// Still serving: a new program works.
	a, b := connectedPrograms(t, sock, gid.As16())
	copy(b.mem.mem, "alive")
	errno, _ := b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: a.addr, RKey: a.mr.RKey}, sges: []wireSGE{b.sge(0, 5)}}))
	require.Zero(t, errno)
	b.pollOne(b.cq)
	assert.Equal(t, "alive", string(a.mem.mem[:5]))
}

// TestDaemonDataPathAllocs checks that posting and polling allocate
// nothing per work request: one end's calls run on a connection's handlers
// directly, without a socket.
func TestDaemonDataPathAllocs(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a := newProgram(t, sock, 0x7f0000100000)
	b := setupProgram(t, localClient(t, d), 0x7f0000200000)
	connectQP(t, a.testClient, a.qp.Handle, b.qp.QPNum, gid)
	connectQP(t, b.testClient, b.qp.Handle, a.qp.QPNum, gid)

	wrs := make([]testSendWR, 4)
	for i := range wrs {
		wrs[i] = testSendWR{wireSendWR: wireSendWR{WRID: uint64(i), Opcode: uint32(verbsapi.WRWrite),
			SendFlags: wrSignal, RemoteAddr: a.addr, RKey: a.mr.RKey}, sges: []wireSGE{b.sge(0, 64), b.sge(64, 64)}}
	}
	post := &request{op: opPostSend, body: sendBody(b.qp.Handle, wrs...)}
	poll := &request{op: opPollCQ, body: enc(wirePollCQ{Handle: b.cq, Max: 16})}
	bc := b.local
	completed := 0
	allocs := testing.AllocsPerRun(50, func() {
		errno, err := bc.run(post)
		if errno != 0 || err != nil {
			panic(fmt.Sprint("post: ", errno, err))
		}
		for got := 0; got < len(wrs); {
			if errno, err := bc.run(poll); errno != 0 || err != nil {
				panic(fmt.Sprint("poll: ", errno, err))
			}
			got += (len(bc.w.out) - hdrSize) / sizeWC
		}
		completed += len(wrs)
	})
	assert.Equal(t, 51*len(wrs), completed)
	assert.LessOrEqual(t, allocs, 2.0, "allocations per post of 4 WRs and its polls")
}
