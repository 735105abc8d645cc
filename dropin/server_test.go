package dropin

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
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

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/verbsapi"
)

// wireStructs pairs every struct of proto.h with its Go mirror.
var wireStructs = []struct {
	c string
	v any
}{
	{"sr_cm_sockaddr", wireCMSockaddr{}}, {"sr_cm_create_id", wireCMCreateID{}}, {"sr_cm_bind", wireCMBind{}},
	{"sr_cm_resolve", wireCMResolve{}}, {"sr_cm_path", wireCMPath{}}, {"sr_cm_route", wireCMRoute{}},
	{"sr_cm_listen", wireCMListen{}}, {"sr_cm_conn_param", wireCMConnParam{}}, {"sr_cm_conn", wireCMConn{}},
	{"sr_cm_reject", wireCMReject{}}, {"sr_cm_init_qp_attr", wireCMInitQPAttr{}}, {"sr_cm_ud_param", wireCMUDParam{}},
	{"sr_cm_event", wireCMEvent{}}, {"sr_cm_option", wireCMOption{}}, {"sr_cm_migrate", wireCMMigrate{}},
	{"sr_hdr", wireHdr{}}, {"sr_query", wireQuery{}}, {"sr_handle", wireHandle{}}, {"sr_hello", wireHello{}},
	{"sr_dev_entry", wireDevEntry{}}, {"sr_device_attr", wireDeviceAttr{}}, {"sr_port_attr", wirePortAttr{}},
	{"sr_gid", wireGID{}}, {"sr_async_event", wireAsyncEvent{}},
	{"sr_reg_mr", wireRegMR{}}, {"sr_mr_piece", wireMRPiece{}}, {"sr_mr", wireMR{}},
	{"sr_rereg_mr", wireReregMR{}}, {"sr_alloc_mw", wireAllocMW{}}, {"sr_mw", wireMW{}},
	{"sr_create_cq", wireCreateCQ{}}, {"sr_cq", wireCQ{}}, {"sr_cq_ring", wireCQRing{}}, {"sr_wq_ring", wireWQRing{}}, {"sr_resize_cq", wireResizeCQ{}},
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
	// imm_data is the program's __be32: its bytes are the wire's, so the
	// number the engine gets is their big-endian reading.
	wrIn := wr
	wrIn.ImmData = bits.ReverseBytes32(wr.ImmData)
	assert.Equal(t, wr, getSendWR(enc(wrIn)))
	bind := wireBindMW{MW: 1, MWRKey: 2, RKey: 3, MRLKey: 4, Addr: 5 << 40, Length: 6, Access: 7}
	assert.Equal(t, bind, getBindMW(enc(bind)))
	assert.Equal(t, wireSGE{Addr: 1 << 40, Length: 2, LKey: 3}, getSGE(enc(wireSGE{Addr: 1 << 40, Length: 2, LKey: 3})))
	assert.Equal(t, wireRecvWR{WRID: 7, NumSGE: 2}, getRecvWR(enc(wireRecvWR{WRID: 7, NumSGE: 2})))
	w := &wire{out: nil}
	w.putWC(&verbsapi.WC{ID: 1, Status: 2, Opcode: 129, ByteLen: 4, Imm: 5, QPN: 6, SrcQP: 7, Flags: 8, VendorErr: 9})
	assert.Equal(t, enc(wireWC{WRID: 1, Status: 2, Opcode: 129, VendorErr: 9, ByteLen: 4, ImmData: 5, QPNum: 6, SrcQP: 7, WCFlags: 8}), w.out,
		"an invalidated rkey is a host-order number")
	w = &wire{out: nil}
	w.putWC(&verbsapi.WC{ID: 1, Opcode: 129, Imm: 0x11, Flags: verbsapi.WCWithImm})
	assert.Equal(t, []byte{0, 0, 0, 0x11}, w.out[24:28], "imm_data is the wire's bytes (network order)")
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
	ring := b.rings[b.cq]
	bc := b.local
	completed := 0
	allocs := testing.AllocsPerRun(50, func() {
		errno, err := bc.run(post)
		if errno != 0 || err != nil {
			panic(fmt.Sprint("post: ", errno, err))
		}
		for got := 0; got < len(wrs); {
			got += ring.take(16, nil)
		}
		completed += len(wrs)
	})
	assert.Equal(t, 51*len(wrs), completed)
	assert.LessOrEqual(t, allocs, 2.0, "allocations per post of 4 WRs and its polls")
}
