package dropin

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

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
	assert.Subset(t, fdsBefore, openFDs(t), "the daemon closes the fds of failed calls (nothing new is open)")

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
	assert.Subset(t, fdsBefore, openFDs(t), "the daemon closes the fds of failed calls (nothing new is open)")
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
