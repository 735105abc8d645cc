package dropin

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestDaemonMRFiles registers regions over files of every kind: only a
// memfd on tmpfs that takes F_SEAL_SHRINK is accepted, and once it is, its
// owner can no longer shrink it under the daemon's mapping (which would
// raise SIGBUS in the daemon at its next RDMA access).
func TestDaemonMRFiles(t *testing.T) {
	_, sock := startTestDaemon(t, "10.0.0.9")
	c := dialDaemon(t, sock)
	pd := c.handle(opAllocPD, nil)
	const base = 0x7f0000300000
	piece := []wireMRPiece{{VAddr: base, Len: 4096}}

	memfd := func(flags int, seals int) int {
		fd, err := unix.MemfdCreate("softroce-test", unix.MFD_CLOEXEC|flags)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		require.NoError(t, unix.Ftruncate(fd, 8192))
		if seals != 0 {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
			require.NoError(t, err)
		}
		return fd
	}
	cases := []struct {
		name string
		fd   int
	}{
		{"memfd without MFD_ALLOW_SEALING", memfd(0, 0)},
		{"memfd whose seals are sealed", memfd(unix.MFD_ALLOW_SEALING, unix.F_SEAL_SEAL)},
	}
	var fs unix.Statfs_t
	dir := t.TempDir()
	require.NoError(t, unix.Statfs(dir, &fs))
	if fs.Type != unix.TMPFS_MAGIC {
		f, err := os.Create(filepath.Join(dir, "region"))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		require.NoError(t, f.Truncate(8192))
		cases = append(cases, struct {
			name string
			fd   int
		}{"regular file off tmpfs", int(f.Fd())})
	} else {
		t.Logf("%s is on tmpfs: no regular-file case", dir)
	}
	fdsBefore := openFDs(t)
	for _, tc := range cases {
		errno, _ := c.regMR(pd, base, 4096, piece, tc.fd)
		assert.Equal(t, syscall.EINVAL, errno, tc.name)
	}
	assert.Subset(t, fdsBefore, openFDs(t), "the daemon closes the fds of failed calls (nothing new is open)")

	fd := memfd(unix.MFD_ALLOW_SEALING, 0)
	errno, mr := c.regMR(pd, base, 4096, piece, fd)
	require.Zero(t, errno)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	require.NoError(t, err)
	assert.NotZero(t, seals&unix.F_SEAL_SHRINK, "the daemon sealed the memfd")
	assert.ErrorIs(t, unix.Ftruncate(fd, 0), unix.EPERM, "a registered memfd cannot shrink")
	assert.NoError(t, unix.Ftruncate(fd, 16384), "but it may grow")
	c.do(opDeregMR, enc(wireHandle{mr.Handle}), nil)
}

// sparseMemfd is a sealable memfd of size bytes whose pages are never
// touched, so that it costs nothing.
func sparseMemfd(t *testing.T, size int64) int {
	t.Helper()
	fd, err := unix.MemfdCreate("softroce-sparse", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Ftruncate(fd, size))
	return fd
}

// TestDaemonMRCap maps sparse memfds until a connection reaches its cap on
// region bytes: then REG_MR is ENOMEM, and deregistering gives the bytes
// back, as does hanging up.
func TestDaemonMRCap(t *testing.T) {
	d, sock := startTestDaemon(t, "10.0.0.9")
	c := dialDaemon(t, sock)
	pd := c.handle(opAllocPD, nil)
	const base = 0x100000000000
	fd := sparseMemfd(t, DefaultMaxConnMRBytes+8192)
	// Each region is the file's pages at its own offset, so that none
	// shares another's mapping (mrshare.go).
	reg := func(addr, n uint64) (syscall.Errno, wireMR) {
		return c.regMR(pd, addr, n, []wireMRPiece{{VAddr: addr, Len: n, Offset: addr - base}}, fd)
	}

	errno, _ := reg(base, DefaultMaxConnMRBytes+4096)
	assert.Equal(t, syscall.ENOMEM, errno, "one region past the cap")

	errno, big := reg(base, DefaultMaxConnMRBytes-4096)
	require.Zero(t, errno)
	errno, small := reg(base+DefaultMaxConnMRBytes-4096, 4096)
	require.Zero(t, errno, "up to the cap")
	assert.EqualValues(t, DefaultMaxConnMRBytes, d.mrBytes.Load())
	errno, _ = reg(base+DefaultMaxConnMRBytes, 4096)
	assert.Equal(t, syscall.ENOMEM, errno, "past the cap")
	errno, _ = reg(base, 4096)
	assert.Zero(t, errno, "pages the program has mapped already cost nothing")

	// Another connection has a cap of its own.
	other := dialDaemon(t, sock)
	opd := other.handle(opAllocPD, nil)
	errno, _ = other.regMR(opd, base, 4096, []wireMRPiece{{VAddr: base, Len: 4096}}, fd)
	assert.Zero(t, errno)
	other.uc.Close()

	c.do(opDeregMR, enc(wireHandle{small.Handle}), nil)
	errno, _ = reg(base+DefaultMaxConnMRBytes, 4096)
	assert.Zero(t, errno, "deregistering gives the bytes back")

	c.do(opDeregMR, enc(wireHandle{big.Handle}), nil)
	c.uc.Close()
	requireNoResources(t, d)
	assert.Zero(t, d.mrBytes.Load(), "hanging up gives the bytes back")
}

// TestDaemonReserveMR checks the daemon-wide cap, which takes more
// connections than a test can map.
func TestDaemonReserveMR(t *testing.T) {
	d, _ := startTestDaemon(t, "10.0.0.9")
	a, b := newTestConn(d), newTestConn(d)
	d.mrBytes.Store(DefaultMaxMRBytes - 4096)
	assert.Equal(t, syscall.ENOMEM, a.reserveMR(8192, 1), "past the daemon's cap")
	assert.Zero(t, a.mrBytes)
	assert.Zero(t, d.mrMaps.Load(), "a refusal counts no mapping")
	require.Zero(t, a.reserveMR(4096, 1))
	assert.Equal(t, syscall.ENOMEM, b.reserveMR(4096, 1), "the daemon is full")
	a.releaseMR(4096, 1)
	assert.Zero(t, b.reserveMR(4096, 1))
	b.releaseMR(4096, 1)
	assert.EqualValues(t, DefaultMaxMRBytes-4096, d.mrBytes.Load())
	d.mrBytes.Store(0)
}

// TestDaemonReserveMRMaps: regions' memory mappings are capped per program
// and in all (the kernel's vm.max_map_count bounds the daemon's), so that
// one program registering tens of thousands of regions leaves the others
// room; each refusal says which cap.
func TestDaemonReserveMRMaps(t *testing.T) {
	d, err := startDaemonWith(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", filepath.Join(t.TempDir(), "m.sock"),
		func(s *Server) { s.MaxConnMRMaps, s.MaxMRMaps = 3, 5 })
	require.NoError(t, err)
	defer d.Close()
	a, b := newTestConn(d), newTestConn(d)
	require.Zero(t, a.reserveMR(4096, 3))
	assert.Equal(t, syscall.ENOMEM, a.reserveMR(4096, 1), "past the program's mappings")
	assert.Contains(t, a.reason.Error(), "use 3 of its 3 memory mappings in the daemon (softroce daemon --max-program-mr-maps)")
	require.Zero(t, b.reserveMR(4096, 2), "another program still registers")
	assert.Equal(t, syscall.ENOMEM, b.reserveMR(4096, 1), "past the daemon's mappings")
	assert.Contains(t, b.reason.Error(), "use 5 of the daemon's 5 memory mappings")
	a.releaseMR(4096, 3)
	require.Zero(t, b.reserveMR(4096, 1))
	b.releaseMR(4096, 3)
	assert.Zero(t, d.mrMaps.Load())
	assert.Positive(t, systemMRMaps(), "the default daemon cap")
}

// TestDaemonDrippedFDs sends requests whose descriptors break the rules:
// more than SR_MAX_MR_PIECES with the header, or any with the body, here a
// byte at a time with 64 descriptors each, which the daemon used to keep
// until the request ended. Each is refused with EINVAL, and the daemon
// keeps none of the descriptors.
func TestDaemonDrippedFDs(t *testing.T) {
	_, sock := startTestDaemon(t, "10.0.0.9")
	c := dialDaemon(t, sock)
	pd := c.handle(opAllocPD, nil)
	m := newMemfd(t, 4096)
	fds := make([]int, srMaxMRPieces)
	for i := range fds {
		fds[i] = m.fd
	}
	body := enc(wireRegMR{PD: pd, Access: accessAll, Addr: 0x7f0000300000, Length: 4096, NPieces: 1},
		wireMRPiece{VAddr: 0x7f0000300000, Len: 4096})
	hdr := enc(wireHdr{opRegMR, uint32(len(body))})
	send := func(b []byte, fds []int) {
		var oob []byte
		if len(fds) > 0 {
			oob = syscall.UnixRights(fds...)
		}
		n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
	}
	answer := func(name string) {
		var h [hdrSize]byte
		_, err := c.uc.Read(h[:])
		require.NoError(t, err)
		assert.EqualValues(t, syscall.EINVAL, binary.LittleEndian.Uint32(h[:]), name)
		assert.Zero(t, binary.LittleEndian.Uint32(h[4:]), name)
	}
	fdsBefore := openFDs(t)

	// Header split in two, 64 descriptors with each half.
	send(hdr[:4], fds)
	send(hdr[4:], fds)
	send(body, nil)
	answer("too many descriptors with the header")

	// Header alone, then the body a byte at a time, each with 64.
	send(hdr, nil)
	for i := range body {
		send(body[i:i+1], fds)
	}
	answer("descriptors with the body")

	// A well-formed REG_MR whose one descriptor came with the body.
	send(hdr, nil)
	send(body[:1], fds[:1])
	send(body[1:], nil)
	answer("a descriptor with the body's first byte")
	// Nothing new is open: the daemon kept none of the dripped descriptors.
	// (A descriptor open before may close meanwhile: an earlier test's file
	// finalized by the garbage collector.)
	assert.Subset(t, fdsBefore, openFDs(t), "the daemon keeps no descriptor")

	// The connection still works.
	errno, mr := c.regMR(pd, 0x7f0000300000, 4096, []wireMRPiece{{VAddr: 0x7f0000300000, Len: 4096}}, m.fd)
	require.Zero(t, errno)
	c.do(opDeregMR, enc(wireHandle{mr.Handle}), nil)
}

// TestWireCollect checks that collect closes the descriptors it does
// not take at once, not when the request ends.
func TestWireCollect(t *testing.T) {
	m := newMemfd(t, 4096)
	dups := func(n int) ([]byte, []int) {
		fds := make([]int, n)
		for i := range fds {
			fd, err := unix.Dup(m.fd)
			require.NoError(t, err)
			fds[i] = fd
		}
		return syscall.UnixRights(fds...), fds
	}
	isOpen := func(fd int) bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err == nil
	}

	var r request
	oob, first := dups(40)
	r.collect(oob, true)
	assert.False(t, r.truncated)
	assert.Equal(t, first, r.fds)
	oob, second := dups(40)
	r.collect(oob, true)
	assert.True(t, r.truncated, "more than srMaxMRPieces")
	assert.Equal(t, append(first, second[:srMaxMRPieces-40]...), r.fds)
	for _, fd := range second[srMaxMRPieces-40:] {
		assert.False(t, isOpen(fd), "descriptor %d beyond the limit closed", fd)
	}
	r.closeFDs()

	r = request{}
	oob, body := dups(3)
	r.collect(oob, false)
	assert.True(t, r.truncated, "descriptors with the body")
	assert.Empty(t, r.fds)
	for _, fd := range body {
		assert.False(t, isOpen(fd), "descriptor %d with the body closed", fd)
	}
}

// TestDaemonSocketAccess checks who may use the daemon: its socket is
// 0600, and a peer must run as the daemon's user or as root.
func TestDaemonSocketAccess(t *testing.T) {
	_, sock := startTestDaemon(t, "10.0.0.9")
	st, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o600, st.Mode())

	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	cred, ok := peerCred(c.(*net.UnixConn))
	require.True(t, ok)
	assert.True(t, uidAllowed(cred.Uid, uint32(os.Getuid())), "this process runs as the daemon's user")

	for _, tc := range []struct {
		uid, self uint32
		want      bool
	}{
		{1000, 1000, true},
		{0, 1000, true},
		{1001, 1000, false},
		{1000, 0, false},
		{0, 0, true},
	} {
		assert.Equal(t, tc.want, uidAllowed(tc.uid, tc.self), "uid %d, daemon %d", tc.uid, tc.self)
	}
}
