package dropin

// mrlimit.go: how much of its address space the daemon lends to
// memory regions. The device's MR size is unlimited (MaxMRSize is 2^64-1,
// as rxe reports), and a region costs the program nothing but a sparse
// memfd, yet the daemon maps every region whole: without a cap one program
// could fill the daemon's 128 TiB of user address space and leave no room
// for anyone else's regions, or for the daemon itself.

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The caps themselves are Server.MaxConnMRBytes and MaxMRBytes (defaults
// DefaultMaxConnMRBytes, DefaultMaxMRBytes in server.go).

// reserveMR counts n more mapped bytes in maps more mappings against the
// connection's and the daemon's caps, or answers ENOMEM (as the kernel
// does when registering would exceed a limit) and counts nothing. Bytes
// guard the daemon's address space; mappings its vm.max_map_count (65,530
// by default), which one program's registrations could otherwise use up
// for everyone. Called with c.mu held.
func (c *conn) reserveMR(n uint64, maps int64) syscall.Errno {
	if n > c.d.maxConnMRBytes()-c.mrBytes {
		return syscall.ENOMEM
	}
	if maps > c.d.maxConnMRMaps()-c.mrMaps {
		return c.refuse(syscall.ENOMEM, "this program's regions use %d of its %d memory mappings in the daemon "+
			"(softroce daemon --max-program-mr-maps)", c.mrMaps, c.d.maxConnMRMaps())
	}
	for {
		all := c.d.mrMaps.Load()
		if maps > c.d.maxMRMaps()-all {
			return c.refuse(syscall.ENOMEM, "all programs' regions use %d of the daemon's %d memory mappings "+
				"(softroce daemon --max-mr-maps; the kernel's vm.max_map_count bounds it)", all, c.d.maxMRMaps())
		}
		if c.d.mrMaps.CompareAndSwap(all, all+maps) {
			break
		}
	}
	for {
		all := c.d.mrBytes.Load()
		if n > c.d.maxMRBytes()-all {
			c.d.mrMaps.Add(-maps)
			return syscall.ENOMEM
		}
		if c.d.mrBytes.CompareAndSwap(all, all+n) {
			break
		}
	}
	c.mrBytes += n
	c.mrMaps += maps
	return 0
}

// releaseMR gives back what reserveMR counted. Called with c.mu held.
func (c *conn) releaseMR(n uint64, maps int64) {
	c.mrBytes -= n
	c.d.mrBytes.Add(-n)
	c.mrMaps -= maps
	c.d.mrMaps.Add(-maps)
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
	if m := c.shareRegion(r, pieces, fds); m != nil {
		return m, 0
	}
	maps := int64(len(pieces))
	if errno := c.reserveMR(end-start, maps); errno != 0 {
		return nil, errno
	}
	m, err := mapPieces(r, pieces, fds)
	if err != nil {
		c.releaseMR(end-start, maps)
		if errno, ok := errors.AsType[syscall.Errno](err); ok {
			return nil, errno
		}
		return nil, syscall.EINVAL
	}
	m.owner, m.maps = c, maps
	c.addRegion(m)
	return m.view(r.Addr, r.Length), 0
}

// systemMRMaps is the mappings the kernel lets the server make
// (vm.max_map_count, 65,530 unless raised) less 8,192 for the server's own
// (the Go runtime, libraries, queues), at least 1,024; read once.
var systemMRMaps = sync.OnceValue(func() int64 {
	limit := int64(65530)
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			limit = v
		}
	}
	return max(limit-8192, 1024)
})
