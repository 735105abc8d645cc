package dropin

// mr.go: memory regions. The library has moved the pages of a region
// into memfds mapped at their old addresses in the program; the daemon maps
// the same memfd pages, in the same order, into one contiguous range of its
// own and registers that. Both processes then share the pages: RDMA writes
// land in the program's memory. Atomics (FETCH_ADD, CMP_SWAP) are atomic
// against every other operation of the device, which runs them under its
// lock, not against the program's own CPU accesses to the word: the device
// reports IBV_ATOMIC_HCA, as kernel rxe does, not IBV_ATOMIC_GLOB.

import (
	"errors"
	"fmt"
	"math"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

const mrPage = 4096 // proto.h's page: pieces are multiples of it

// regionMap is one mapping in the daemon of a program's pages: a range
// of its own, the pieces side by side as in the program. Every region of
// the program whose pages it already holds shares it (mrshare.go), so that
// registering the same buffer, or parts of one, again costs no mapping.
type regionMap struct {
	base   unsafe.Pointer // the whole page-rounded range
	size   uintptr
	start  uint64        // the program's address of base
	pieces []mappedPiece // in address order
	// owner is the connection whose cap counts the mapping (mapRegion),
	// nil for none; maps is how many mappings it counts.
	owner *conn
	maps  int64
	refs  int // the mrMappings using it
}

// fileID names a file the daemon has mapped; while it is mapped, no other
// file can have its device and inode numbers.
type fileID struct{ dev, ino uint64 }

// mappedPiece is where a piece of a regionMap comes from.
type mappedPiece struct {
	file            fileID
	vaddr, off, len uint64
}

// mrMapping is one region's view of a regionMap.
type mrMapping struct {
	r   *regionMap
	buf []byte // exactly [addr, addr+length) of the program's region
}

// view is the part of r that is [addr, addr+length) in the program.
func (r *regionMap) view(addr, length uint64) *mrMapping {
	r.refs++
	whole := unsafe.Slice((*byte)(r.base), r.size)
	lead := addr - r.start
	return &mrMapping{r: r, buf: whole[lead : lead+length : lead+length]}
}

// unmap drops the view; the last one unmaps the range and gives its bytes
// and mappings back to the owner's caps.
func (m *mrMapping) unmap() {
	r := m.r
	if r == nil {
		return
	}
	m.r, m.buf = nil, nil
	if r.refs--; r.refs == 0 {
		r.unmap()
	}
}

func (r *regionMap) unmap() {
	unix.MunmapPtr(r.base, r.size)
	if r.owner != nil {
		r.owner.releaseMR(uint64(r.size), r.maps)
		r.owner.forgetRegion(r)
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
// lie within its file, and the file must stay that long: touching a page
// past the end of a file raises SIGBUS, which would kill the daemon and
// every program it serves. Hence checkPieceFile before the size check.
func mapPieces(r *wireRegMR, pieces []wireMRPiece, fds []int) (*regionMap, error) {
	start, end, err := checkPieces(r, pieces, len(fds))
	if err != nil {
		return nil, err
	}
	m := &regionMap{size: uintptr(end - start), start: start, pieces: make([]mappedPiece, len(pieces))}
	for i, p := range pieces {
		if err := checkPieceFile(fds[i]); err != nil {
			return nil, fmt.Errorf("piece %d: %w", i, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fds[i], &st); err != nil {
			return nil, fmt.Errorf("piece %d: %w", i, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) < p.Offset+p.Len {
			return nil, fmt.Errorf("piece %d: [%d, %d) is not within its file", i, p.Offset, p.Offset+p.Len)
		}
		m.pieces[i] = mappedPiece{file: fileID{st.Dev, st.Ino}, vaddr: p.VAddr, off: p.Offset, len: p.Len}
	}
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
	return m, nil
}

// errBadPieceFile refuses a piece whose file the daemon cannot trust to
// stay mapped without faulting.
var errBadPieceFile = errors.New("not a memfd sealed against shrinking")

// checkPieceFile makes sure the file behind fd can never fault the daemon's
// mapping: it must be on tmpfs (a memfd: hugetlbfs raises SIGBUS when huge
// pages run out, FUSE or NFS can hang the daemon) and sealed with
// F_SEAL_SHRINK, which the daemon adds itself. A memfd made without
// MFD_ALLOW_SEALING, or another tmpfs file, cannot take the seal and is
// refused: its owner could ftruncate it under the daemon's feet. The
// library makes its memfds with MFD_ALLOW_SEALING.
func checkPieceFile(fd int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("file system %#x: %w", fs.Type, errBadPieceFile)
	}
	// Adding fails when sealing is not allowed (or the seals are sealed);
	// what counts is whether the seal is there afterwards.
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("get seals: %w: %w", err, errBadPieceFile)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("seals %#x: %w", seals, errBadPieceFile)
	}
	return nil
}

// Sizes of the MR records on the wire (proto.h).
const (
	sizeRegMR   = 40 // struct sr_reg_mr
	sizeReregMR = 48 // struct sr_rereg_mr
	sizeMRPiece = 24 // struct sr_mr_piece
)

// decodePieces decodes b as exactly n struct sr_mr_piece.
func decodePieces(b []byte, n uint32) ([]wireMRPiece, bool) {
	if n > srMaxMRPieces || uint64(len(b)) != uint64(n)*sizeMRPiece {
		return nil, false
	}
	pieces := make([]wireMRPiece, n)
	for i := range pieces {
		decode(b[i*sizeMRPiece:(i+1)*sizeMRPiece], &pieces[i])
	}
	return pieces, true
}

// putMR answers with the MR's keys. The rkey is the lkey even when the MR
// allows no remote access, as current rxe reports it: a peer may be handed
// the rkey before a REREG_MR grants remote access, and it must work then.
// Until then the device refuses it (its own rkey for the MR is 0).
func (c *conn) putMR(h uint32, mr *verbsapi.MR) {
	c.w.put(wireMR{Handle: h, LKey: mr.LKey(), RKey: mr.LKey()})
}

// regMR answers SR_OP_REG_MR. The fds are the caller's to close.
func (c *conn) regMR(b []byte, fds []int) syscall.Errno {
	var r wireRegMR
	if len(b) < sizeRegMR || !decode(b[:sizeRegMR], &r) {
		return syscall.EINVAL
	}
	pieces, ok := decodePieces(b[sizeRegMR:], r.NPieces)
	pd := c.pds[r.PD]
	if !ok || pd == nil {
		return syscall.EINVAL
	}
	m, errno := c.mapRegion(&r, pieces, fds)
	if errno != 0 {
		return errno
	}
	mr, err := pd.RegMRIOVA(m.buf, r.IOVA, verbsapi.Access(r.Access))
	if err != nil {
		m.unmap()
		return c.errnoOf(err)
	}
	h := c.handle()
	c.mrs[h] = &connMR{mr: mr, mem: m}
	c.putMR(h, mr)
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
		return c.errnoOf(err)
	}
	m.mem.unmap()
	delete(c.mrs, h)
	return 0
}

// IBV_REREG_MR_CHANGE_* (enum ibv_rereg_mr_flags).
const (
	reregTranslation = 1 << 0
	reregPD          = 1 << 1
	reregAccess      = 1 << 2
	reregAll         = reregTranslation | reregPD | reregAccess
)

// reregMR answers SR_OP_REREG_MR. rxe keeps an MR's keys across
// ibv_rereg_mr and programs rely on it (pyverbs grants remote access to an
// MR whose rkey the peer already holds), so the MR is registered again under
// its old key, with the new PD, access or pages; the handle stays. A new
// mapping replaces the old one only once the registration succeeded. The
// fds are the caller's to close.
func (c *conn) reregMR(b []byte, fds []int) syscall.Errno {
	var r wireReregMR
	if len(b) < sizeReregMR || !decode(b[:sizeReregMR], &r) {
		return syscall.EINVAL
	}
	pieces, ok := decodePieces(b[sizeReregMR:], r.NPieces)
	cm := c.mrs[r.Handle]
	// As the kernel: no flags at all, or unknown ones, is EINVAL.
	if !ok || cm == nil || r.Flags == 0 || r.Flags&^reregAll != 0 {
		return syscall.EINVAL
	}
	pd, access, mem, iova := cm.mr.PD(), cm.mr.Access(), cm.mem, cm.mr.Addr()
	if r.Flags&reregPD != 0 {
		if pd = c.pds[r.PD]; pd == nil {
			return syscall.EINVAL
		}
	}
	if r.Flags&reregAccess != 0 {
		access = verbsapi.Access(r.Access)
	}
	if r.Flags&reregTranslation != 0 {
		reg := wireRegMR{Access: r.Access, Addr: r.Addr, Length: r.Length, IOVA: r.IOVA, NPieces: r.NPieces}
		var errno syscall.Errno
		if mem, errno = c.mapRegion(&reg, pieces, fds); errno != 0 {
			return errno
		}
		iova = r.IOVA
	} else if r.NPieces != 0 || len(fds) != 0 {
		return syscall.EINVAL
	}
	// One step on the device, keys kept (rxe's rereg): no packet finds the
	// region missing, and on failure it is as it was.
	err := cm.mr.Rereg(pd, mem.buf, iova, access)
	if err == nil {
		cm.mem, mem = mem, cm.mem
		c.putMR(r.Handle, cm.mr)
	}
	if mem != cm.mem {
		mem.unmap() // the replaced mapping, or the one that was not used
	}
	return c.errnoOf(err)
}
