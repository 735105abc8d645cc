package dropin

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// bindMW posts a signaled BIND_MW of window mw (whose rkey the program
// holds as mwRKey) with rkey IncRKey(mwRKey), as the library does for
// ibv_bind_mw, and returns the new rkey once the bind completed.
func (p *program) bindMW(id uint64, mw wireMW, mwRKey uint32, bind wireBindMW) uint32 {
	p.t.Helper()
	bind.MW, bind.MWRKey, bind.RKey = mw.Handle, mwRKey, verbsapi.IncRKey(mwRKey)
	errno, _ := p.post(opPostSend, sendBody(p.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: id, Opcode: uint32(verbsapi.WRBindMW), SendFlags: wrSignal}, bind: &bind}))
	require.Zero(p.t, errno)
	wc := p.pollOne(p.cq)
	require.EqualValues(p.t, verbsapi.WCBindMW, wc.Opcode)
	require.Equal(p.t, id, wc.WRID)
	return bind.RKey
}

// TestDaemonMW binds memory windows of both types through POST_SEND, as
// the library does for ibv_bind_mw and ibv_wr_bind_mw: a peer's WRITE
// through a window's rkey lands in the region's memfd, a type 2 window
// freed by LOCAL_INV can be bound again, a region under a window cannot be
// deregistered, a WRITE outside a window fails, and a program that hangs up
// with a window still bound leaves no MW, MR or anything else behind.
func TestDaemonMW(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	gid := gid1(t, d)
	a, b := connectedPrograms(t, sock, gid)

	const base = 0x7f0000300000
	m := newMemfd(t, 4096)
	errno, body, _ := a.call(opRegMR, enc(wireRegMR{PD: a.pd, Access: accessAll | uint32(verbsapi.AccessMWBind),
		Addr: base, Length: 4096, IOVA: base, NPieces: 1}, wireMRPiece{VAddr: base, Len: 4096}), m.fd)
	require.Zero(t, errno)
	var mr wireMR
	require.True(t, decode(body, &mr))

	var w1, w2 wireMW
	a.do(opAllocMW, enc(wireAllocMW{PD: a.pd, Type: uint32(verbsapi.MWType1)}), &w1)
	a.do(opAllocMW, enc(wireAllocMW{PD: a.pd, Type: uint32(verbsapi.MWType2)}), &w2)
	require.NotEqual(t, w1.Handle, w2.Handle)
	for _, k := range []uint32{w1.RKey, w2.RKey} {
		require.NotZero(t, k)
		require.NotEqual(t, mr.LKey>>8, k>>8, "a window's rkey has an index of its own")
	}
	assert.Equal(t, 2, d.ctx.Device().Resources().MWs)

	for _, tc := range []struct {
		name string
		op   uint32
		body []byte
	}{
		{"alloc in an unknown pd", opAllocMW, enc(wireAllocMW{PD: 999, Type: 1})},
		{"alloc type 3", opAllocMW, enc(wireAllocMW{PD: a.pd, Type: 3})},
		{"alloc type 0", opAllocMW, enc(wireAllocMW{PD: a.pd})},
		{"alloc short body", opAllocMW, enc(wireHandle{a.pd})},
		{"dealloc unknown", opDeallocMW, enc(wireHandle{999})},
		{"dealloc short body", opDeallocMW, nil},
	} {
		got, body, _ := a.call(tc.op, tc.body)
		assert.Equal(t, syscall.EINVAL, got, tc.name)
		assert.Empty(t, body, tc.name)
	}

	// Malformed binds are refused before anything is posted.
	good := wireBindMW{MW: w1.Handle, MWRKey: w1.RKey, RKey: verbsapi.IncRKey(w1.RKey), MRLKey: mr.LKey,
		Addr: base, Length: 64, Access: uint32(verbsapi.AccessRemoteWrite)}
	unknown := good
	unknown.MW = 999
	otherKey := good
	otherKey.MWRKey = w2.RKey
	var bw wireMW
	b.do(opAllocMW, enc(wireAllocMW{PD: b.pd, Type: uint32(verbsapi.MWType1)}), &bw)
	othersKey := good
	othersKey.MWRKey = bw.RKey
	bindWR := wireSendWR{WRID: 9, Opcode: uint32(verbsapi.WRBindMW), SendFlags: wrSignal}
	for _, tc := range []struct {
		name string
		wr   testSendWR
	}{
		{"unknown window", testSendWR{wireSendWR: bindWR, bind: &unknown}},
		{"the rkey of another window", testSendWR{wireSendWR: bindWR, bind: &otherKey}},
		{"the rkey of another program's window", testSendWR{wireSendWR: bindWR, bind: &othersKey}},
		{"bind with an sge", testSendWR{wireSendWR: bindWR, sges: []wireSGE{a.sge(0, 8)}, bind: &good}},
	} {
		errno, bad := a.post(opPostSend, sendBody(a.qp.Handle, tc.wr))
		assert.Equal(t, syscall.EINVAL, errno, tc.name)
		assert.Zero(t, bad, tc.name)
	}
	errno, _ = a.post(opPostSend, sendBody(a.qp.Handle, testSendWR{wireSendWR: bindWR, bind: &good})[:sizePost+sizeSendWR+8])
	assert.Equal(t, syscall.EINVAL, errno, "truncated struct sr_bind_mw")
	b.do(opDeallocMW, enc(wireHandle{bw.Handle}), nil)

	// Type 1: [base+1024, +256), remote write.
	k1 := a.bindMW(1, w1, w1.RKey, wireBindMW{MRLKey: mr.LKey, Addr: base + 1024, Length: 256,
		Access: uint32(verbsapi.AccessRemoteWrite)})
	copy(b.mem.mem, "through type 1")
	require.Zero(t, b.writeTo(10, base+1024+16, k1, 0, 14).Status)
	assert.Equal(t, "through type 1", string(m.mem[1024+16:1024+30]))

	// Type 2: bound to a's QP, which is the one b writes to.
	k2 := a.bindMW(2, w2, w2.RKey, wireBindMW{MRLKey: mr.LKey, Addr: base + 2048, Length: 128,
		Access: uint32(verbsapi.AccessRemoteWrite)})
	copy(b.mem.mem, "through type 2")
	require.Zero(t, b.writeTo(11, base+2048, k2, 0, 14).Status)
	assert.Equal(t, "through type 2", string(m.mem[2048:2062]))

	// LOCAL_INV frees the type 2 window: it binds again, under a new key.
	errno, _ = a.post(opPostSend, sendBody(a.qp.Handle, testSendWR{wireSendWR: wireSendWR{WRID: 3,
		Opcode: uint32(verbsapi.WRLocalInv), SendFlags: wrSignal, InvalidateRKey: k2}}))
	require.Zero(t, errno)
	require.EqualValues(t, verbsapi.WCLocalInv, a.pollOne(a.cq).Opcode)
	k3 := a.bindMW(4, w2, k2, wireBindMW{MRLKey: mr.LKey, Addr: base + 3072, Length: 64,
		Access: uint32(verbsapi.AccessRemoteWrite)})
	require.NotEqual(t, k2, k3)
	copy(b.mem.mem, "rebound")
	require.Zero(t, b.writeTo(12, base+3072+8, k3, 0, 7).Status)
	assert.Equal(t, "rebound", string(m.mem[3072+8:3072+15]))

	a.fail(syscall.EBUSY, opDeregMR, enc(wireHandle{mr.Handle}))
	a.do(opDeallocMW, enc(wireHandle{w2.Handle}), nil)
	a.fail(syscall.EINVAL, opDeallocMW, enc(wireHandle{w2.Handle}))

	// Past the end of the type 1 window, though inside the region.
	copy(b.mem.mem, "outside")
	assert.EqualValues(t, verbsapi.WCRemAccessErr, b.writeTo(13, base+1024+250, k1, 0, 7).Status)
	assert.Equal(t, make([]byte, 7), m.mem[1024+250:1024+257])

	// Hang up with w1 still bound to mr: the windows go first.
	assert.Equal(t, 1, d.ctx.Device().Resources().MWs)
	a.uc.Close()
	b.uc.Close()
	requireNoResources(t, d)
}
