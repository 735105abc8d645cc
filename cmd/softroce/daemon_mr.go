package main

// daemon_mr.go: memory regions. The library has moved the pages of a region
// into memfds mapped at their old addresses in the program; the daemon maps
// the same memfd pages, in the same order, into one contiguous range of its
// own and registers that. Both processes then share the pages: RDMA writes
// land in the program's memory, and atomics are atomic for both.

import (
	"fmt"
	"math"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

const mrPage = 4096 // proto.h's page: pieces are multiples of it

// mrMapping is the daemon's mapping of a region's pages.
type mrMapping struct {
	base unsafe.Pointer // the whole page-rounded range
	size uintptr
	buf  []byte // exactly [addr, addr+length) of the program's region
}

func (m *mrMapping) unmap() {
	if m.base != nil {
		unix.MunmapPtr(m.base, m.size)
		m.base, m.buf = nil, nil
	}
}

// checkPieces validates a REG_MR's pieces: they must tile the page-rounded
// range of [addr, addr+length) in address order, page-aligned, one fd each.
func checkPieces(r *wireRegMR, pieces []wireMRPiece, nfds int) (start, end uint64, err error) {
	switch {
	case r.Length == 0:
		return 0, 0, fmt.Errorf("empty region")
	case r.Addr > math.MaxUint64-mrPage || r.Length > math.MaxUint64-mrPage-r.Addr:
		return 0, 0, fmt.Errorf("region %#x+%d wraps the address space", r.Addr, r.Length)
	case r.NPieces == 0 || r.NPieces > srMaxMRPieces:
		return 0, 0, fmt.Errorf("%d pieces (1..%d)", r.NPieces, srMaxMRPieces)
	case nfds != int(r.NPieces):
		return 0, 0, fmt.Errorf("%d pieces but %d fds", r.NPieces, nfds)
	}
	start = r.Addr &^ (mrPage - 1)
	end = (r.Addr + r.Length + mrPage - 1) &^ (mrPage - 1)
	if end-start > math.MaxInt/2 {
		return 0, 0, fmt.Errorf("region of %d bytes", end-start)
	}
	at := start
	for i, p := range pieces {
		switch {
		case p.VAddr != at:
			return 0, 0, fmt.Errorf("piece %d starts at %#x, want %#x", i, p.VAddr, at)
		case p.Len == 0 || p.Len%mrPage != 0 || p.Offset%mrPage != 0:
			return 0, 0, fmt.Errorf("piece %d: length %d or offset %d not whole pages", i, p.Len, p.Offset)
		case p.Len > end-at:
			return 0, 0, fmt.Errorf("piece %d ends past the region", i)
		case p.Offset > math.MaxInt64-p.Len:
			return 0, 0, fmt.Errorf("piece %d: offset %d too large", i, p.Offset)
		}
		at += p.Len
	}
	if at != end {
		return 0, 0, fmt.Errorf("pieces end at %#x, the region at %#x", at, end)
	}
	return start, end, nil
}

// mapPieces maps the pieces side by side into a fresh range. A piece must
// lie within its file: touching a page past the end of a file raises SIGBUS,
// which would kill the daemon. For the same reason it seals the files
// against shrinking where the library allowed sealing.
func mapPieces(r *wireRegMR, pieces []wireMRPiece, fds []int) (*mrMapping, error) {
	start, end, err := checkPieces(r, pieces, len(fds))
	if err != nil {
		return nil, err
	}
	for i, p := range pieces {
		var st unix.Stat_t
		if err := unix.Fstat(fds[i], &st); err != nil {
			return nil, fmt.Errorf("piece %d: %w", i, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) < p.Offset+p.Len {
			return nil, fmt.Errorf("piece %d: [%d, %d) is not within its file", i, p.Offset, p.Offset+p.Len)
		}
		unix.FcntlInt(uintptr(fds[i]), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK) // best effort
	}
	m := &mrMapping{size: uintptr(end - start)}
	m.base, err = unix.MmapPtr(-1, 0, nil, m.size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes: %w", m.size, err)
	}
	var off uintptr
	for i, p := range pieces {
		at := unsafe.Add(m.base, off)
		_, err := unix.MmapPtr(fds[i], int64(p.Offset), at, uintptr(p.Len),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			m.unmap()
			return nil, fmt.Errorf("map piece %d: %w", i, err)
		}
		off += uintptr(p.Len)
	}
	whole := unsafe.Slice((*byte)(m.base), m.size)
	lead := r.Addr - start
	m.buf = whole[lead : lead+r.Length : lead+r.Length]
	return m, nil
}

// regMR answers SR_OP_REG_MR. The fds are the caller's to close.
func (c *conn) regMR(b []byte, fds []int) syscall.Errno {
	const head = 40 // struct sr_reg_mr
	const piece = 24
	if len(b) < head {
		return syscall.EINVAL
	}
	var r wireRegMR
	if !decode(b[:head], &r) || uint64(len(b)-head) != uint64(r.NPieces)*piece || r.NPieces > srMaxMRPieces {
		return syscall.EINVAL
	}
	pieces := make([]wireMRPiece, r.NPieces)
	for i := range pieces {
		decode(b[head+i*piece:head+(i+1)*piece], &pieces[i])
	}
	pd := c.pds[r.PD]
	if pd == nil {
		return syscall.EINVAL
	}
	if r.Length > c.d.ctx.QueryDevice().MaxMRSize {
		return syscall.EINVAL
	}
	m, err := mapPieces(&r, pieces, fds)
	if err != nil {
		return syscall.EINVAL
	}
	mr, err := pd.RegMRIOVA(m.buf, r.IOVA, verbsapi.Access(r.Access))
	if err != nil {
		m.unmap()
		return errnoOf(err)
	}
	h := c.handle()
	c.mrs[h] = &connMR{mr: mr, mem: m}
	c.w.put(wireMR{Handle: h, LKey: mr.LKey(), RKey: mr.RKey()})
	return 0
}

// deregMR answers SR_OP_DEREG_MR: deregister, then unmap.
func (c *conn) deregMR(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok {
		return syscall.EINVAL
	}
	m := c.mrs[h]
	if m == nil {
		return syscall.EINVAL
	}
	if err := m.mr.Dereg(); err != nil {
		return errnoOf(err)
	}
	m.mem.unmap()
	delete(c.mrs, h)
	return 0
}
