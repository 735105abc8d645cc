package verbsapi

import (
	"errors"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
)

// Errors the API returns, always wrapped with what was being done to which
// object; test them with errors.Is. Most come from the layers below and are
// re-exported so that callers need not import them.
var (
	// ErrClosed: the Context (or completion channel) was closed.
	ErrClosed = errors.New("verbs context closed")
	// ErrCQOverflow: the CQ overflowed and lost completions; it takes no
	// more and its QPs went to the error state.
	ErrCQOverflow = errors.New("completion queue overflowed")
	// ErrHasChannel: Wait on a CQ that reports to a completion channel
	// (wait on the channel instead).
	ErrHasChannel = errors.New("cq reports to a completion channel")

	ErrBusy        = rxe.ErrBusy        // destroying an object still in use
	ErrDestroyed   = rxe.ErrDestroyed   // using an object already destroyed
	ErrWrongDevice = rxe.ErrWrongDevice // mixing objects of two devices
	ErrInvalid     = rxe.ErrInvalid     // an argument out of range
	ErrLimit       = rxe.ErrLimit       // a device limit reached
	ErrNoGID       = rxe.ErrNoGID       // no GID at that index

	ErrQPState       = qp.ErrQPState       // the QP's state does not allow the call
	ErrQueueFull     = qp.ErrQueueFull     // the work queue is full
	ErrInvalidWR     = qp.ErrInvalidWR     // a malformed work request
	ErrTooManySGE    = qp.ErrTooManySGE    // a receive WR with too many SGEs
	ErrHasSRQ        = qp.ErrHasSRQ        // PostRecv on a QP that uses an SRQ
	ErrInvalidAttr   = qp.ErrInvalidAttr   // Modify: missing, extra or bad attribute
	ErrBadTransition = qp.ErrBadTransition // Modify: no such state transition
	ErrNotSupported  = qp.ErrNotSupported  // a feature softroce does not offer
)
