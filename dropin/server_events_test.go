package dropin

import (
	"encoding/binary"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

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
