package dropin

// mrlimit.go: how much of its address space the daemon lends to
// memory regions. The device's MR size is unlimited (MaxMRSize is 2^64-1,
// as rxe reports), and a region costs the program nothing but a sparse
// memfd, yet the daemon maps every region whole: without a cap one program
// could fill the daemon's 128 TiB of user address space and leave no room
// for anyone else's regions, or for the daemon itself.

import (
	"errors"
	"syscall"
)

// The caps themselves are Server.MaxConnMRBytes and MaxMRBytes (defaults
// DefaultMaxConnMRBytes, DefaultMaxMRBytes in server.go).

// reserveMR counts n more mapped bytes against the connection's and the
// daemon's caps, or answers ENOMEM (as the kernel does when registering
// would exceed a limit) and counts nothing. Called with c.mu held.
func (c *conn) reserveMR(n uint64) syscall.Errno {
	if n > c.d.maxConnMRBytes()-c.mrBytes {
		return syscall.ENOMEM
	}
	for {
		all := c.d.mrBytes.Load()
		if n > c.d.maxMRBytes()-all {
			return syscall.ENOMEM
		}
		if c.d.mrBytes.CompareAndSwap(all, all+n) {
			break
		}
	}
	c.mrBytes += n
	return 0
}

// releaseMR gives back n bytes reserveMR counted. Called with c.mu held.
func (c *conn) releaseMR(n uint64) {
	c.mrBytes -= n
	c.d.mrBytes.Add(-n)
}

// mapRegion maps a region the library sent, within the device's MR size
// and the caps above. A failed system call passes its errno on (ENOMEM
// when the daemon is out of address space); a bad request is EINVAL.
func (c *conn) mapRegion(r *wireRegMR, pieces []wireMRPiece, fds []int) (*mrMapping, syscall.Errno) {
	if r.Length > c.ctx.QueryDevice().MaxMRSize {
		return nil, syscall.EINVAL
	}
	start, end, err := checkPieces(r, pieces, len(fds))
	if err != nil {
		return nil, syscall.EINVAL
	}
	if errno := c.reserveMR(end - start); errno != 0 {
		return nil, errno
	}
	m, err := mapPieces(r, pieces, fds)
	if err != nil {
		c.releaseMR(end - start)
		if errno, ok := errors.AsType[syscall.Errno](err); ok {
			return nil, errno
		}
		return nil, syscall.EINVAL
	}
	m.owner = c
	return m, 0
}
