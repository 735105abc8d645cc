package qp

import "errors"

// Memory resolves keys to bytes within one protection domain, as one QP
// sees it (a type 2 memory window is usable only by the QP it is bound to):
// the device implements it with its memory regions and windows, tests with
// fakes.
// Implementations return the sentinel errors below (possibly wrapped) so that
// the engine can pick the right NAK or completion status, and should not
// allocate on success.
type Memory interface {
	// Local returns the bytes [va, va+length) of the region that lkey names,
	// checking that the region allows access (0 for a local read, or
	// AccessLocalWrite for a local write).
	Local(lkey uint32, va uint64, length uint32, access Access) ([]byte, error)
	// Remote returns the bytes [va, va+length) of the region or window that
	// rkey names, checking the remote access a request needs
	// (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic).
	Remote(rkey uint32, va uint64, length uint32, access Access) ([]byte, error)
	// Invalidate invalidates the region or window a key names: for
	// SEND_WITH_INV (remote) or LOCAL_INV (local).
	Invalidate(key uint32, remote bool) error
	// BindMW binds (or, with a zero length, unbinds) the window b names on
	// behalf of the QP the Memory belongs to: the BIND_MW work request,
	// executed in send-queue order. Any error completes the WR with
	// MW_BIND_ERR.
	BindMW(b *BindMW) error
}

// Memory errors.
var (
	ErrBadKey = errors.New("no memory region or window with that key in this protection domain")
	ErrBounds = errors.New("access outside the memory region")
	ErrAccess = errors.New("memory region does not allow that access")
)
