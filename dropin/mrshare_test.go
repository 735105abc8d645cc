package dropin

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// TestDaemonMRSharesMapping registers one 64 KiB buffer whole, then a
// thousand regions inside it and the whole again, under a cap of four
// mappings for them: the regions share the first one's mapping, and
// RDMA through any of them lands in the buffer. Pages of another file, or
// of the same file at another offset, need mappings of their own; the
// mapping goes only with its last region.
func TestDaemonMRSharesMapping(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	d, err := startDaemonWith(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock,
		func(s *Server) { s.MaxConnMRMaps = 5 }) // the program's own region, and four
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, b := connectedPrograms(t, sock, gid1(t, d))
	before := d.mrMaps.Load() // each program's own region

	const base = 0x7f0000400000
	m := newMemfd(t, 64<<10)
	whole := []wireMRPiece{{VAddr: base, Len: 64 << 10}}
	errno, first := a.regMR(a.pd, base, 64<<10, whole, m.fd)
	require.Zero(t, errno)
	var small []wireMR
	for i := range 1000 {
		addr := base + uint64(i*61)%(60<<10)
		page, end := addr&^4095, (addr+100+4095)&^4095
		pieces := []wireMRPiece{{VAddr: page, Len: end - page, Offset: page - base}}
		errno, mr := a.regMR(a.pd, addr, 100, pieces, m.fd)
		require.Zero(t, errno, "region %d at %#x", i, addr)
		small = append(small, mr)
	}
	errno, again := a.regMR(a.pd, base, 64<<10, whole, m.fd)
	require.Zero(t, errno)
	assert.Equal(t, before+1, d.mrMaps.Load(), "one mapping for all of them")

	// A WRITE through one small region lands in the buffer.
	copy(b.mem.mem, "shared")
	at := base + uint64(500*61)%(60<<10)
	errno, _ = b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{
		wireSendWR: wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRWrite), SendFlags: wrSignal,
			RemoteAddr: at, RKey: small[500].RKey}, sges: []wireSGE{b.sge(0, 6)}}))
	require.Zero(t, errno)
	b.pollOne(b.cq)
	assert.Equal(t, "shared", string(m.mem[at-base:at-base+6]))

	// Other pages need mappings of their own, within the cap.
	other := newMemfd(t, 4096)
	errno, _ = a.regMR(a.pd, base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, other.fd)
	require.Zero(t, errno, "another file")
	errno, _ = a.regMR(a.pd, base, 4096, []wireMRPiece{{VAddr: base, Len: 4096, Offset: 4096}}, m.fd)
	require.Zero(t, errno, "the same file at another offset")
	assert.Equal(t, before+3, d.mrMaps.Load())
	errno, _ = a.regMR(a.pd, base+(60<<10), 8192, []wireMRPiece{{VAddr: base + (60 << 10), Len: 8192, Offset: 60 << 10}}, newMemfd(t, 68<<10).fd)
	assert.Zero(t, errno, "a fourth mapping")
	errno, _ = a.regMR(a.pd, base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, newMemfd(t, 4096).fd)
	assert.Equal(t, syscall.ENOMEM, errno, "a fifth is past the cap")

	// The mapping stays while any region uses it.
	a.do(opDeregMR, enc(wireHandle{first.Handle}), nil)
	a.do(opDeregMR, enc(wireHandle{again.Handle}), nil)
	assert.Equal(t, before+4, d.mrMaps.Load())
	for i, mr := range small {
		a.do(opDeregMR, enc(wireHandle{mr.Handle}), nil)
		if i == len(small)-2 {
			assert.Equal(t, before+4, d.mrMaps.Load(), "one region left")
		}
	}
	assert.Equal(t, before+3, d.mrMaps.Load(), "the last region took the mapping with it")
}
