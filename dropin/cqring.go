package dropin

// cqring.go: a CQ's completions in memory the daemon shares with the
// program (struct sr_cq_ring in proto.h). The device writes each
// completion straight into the ring under its lock, as a NIC writes a CQE
// into host memory, and ibv_poll_cq reads the ring without a call: no
// socket round trip per poll, and no hand-off between the frame that
// completes a WR and the program that sees it.
//
// The program is not trusted with the ring either. The daemon keeps its
// own count of what it wrote and never reads it back; of the program's
// consumer count it takes only how much room is left, so a program that
// writes nonsense there overflows its own CQ and nothing else. The memfd
// is sealed against shrinking and growing before the program sees it, so
// the daemon's mapping can never fault.

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// The ring's layout (proto.h): the producer count, the consumer count and
// the flags each on a cache line of their own, then the entries.
const (
	cqRingProd     = 0
	cqRingCons     = 64
	cqRingFlags    = 128
	cqRingHeader   = 256
	cqRingOverflow = 1 // in flags: completions were lost
)

// wireCQRing is struct sr_cq_ring's header, for the size check.
type wireCQRing struct {
	Prod  uint32
	_     [cqRingCons - cqRingProd - 4]byte
	Cons  uint32
	_     [cqRingFlags - cqRingCons - 4]byte
	Flags uint32
	_     [cqRingHeader - cqRingFlags - 4]byte
}

// cqRingBytes is the size of the ring of n entries.
func cqRingBytes(n int) int { return cqRingHeader + n*sizeWC }

// cqRing is the daemon's side of one ring. Put and Len run under the
// device's lock; unmap after the CQ is destroyed or has moved to another
// ring, when the device no longer writes here.
type cqRing struct {
	mem  []byte
	n    uint32 // entries
	prod uint32 // completions written: the daemon's own count
	// onError, if set, is called for a completion in error, whose QP may
	// have entered the error state (the connection's kickPoller).
	onError func()
}

// newCQRing makes a ring of n entries and returns it with the memfd to
// hand the program (the caller closes it once sent).
func newCQRing(n int) (*cqRing, int, error) {
	mem, fd, err := sharedMemfd("softroce-cq", cqRingBytes(n))
	if err != nil {
		return nil, -1, fmt.Errorf("cq ring of %d entries: %w", n, err)
	}
	return &cqRing{mem: mem, n: uint32(n)}, fd, nil
}

// sharedMemfd makes size bytes of memory to share with a program: a memfd
// sealed against shrinking and growing (so that the daemon's mapping can
// never fault, whatever the program does with its descriptor), mapped
// shared. It returns the mapping and the memfd.
func sharedMemfd(name string, size int) ([]byte, int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) ([]byte, int, error) {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return mem, fd, nil
}

func (r *cqRing) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Put writes wc at the producer count and then publishes it: the entry's
// bytes are in place before the program can see the new count.
func (r *cqRing) Put(wc verbsapi.WC) bool {
	if wc.Status != verbsapi.WCSuccess && r.onError != nil {
		r.onError()
	}
	if r.prod-atomic.LoadUint32(r.word(cqRingCons)) >= r.n {
		atomic.StoreUint32(r.word(cqRingFlags), cqRingOverflow)
		return false
	}
	off := cqRingHeader + int(r.prod%r.n)*sizeWC
	encodeWC(r.mem[off:off+sizeWC], &wc)
	r.prod++
	atomic.StoreUint32(r.word(cqRingProd), r.prod)
	return true
}

// Len returns how many completions wait in the ring, as far as the
// program's consumer count can be believed.
func (r *cqRing) Len() int {
	return int(min(r.prod-atomic.LoadUint32(r.word(cqRingCons)), r.n))
}

// unmap releases the daemon's mapping.
func (r *cqRing) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}
