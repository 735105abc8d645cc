package qp

import "errors"

// Work-request errors. PostSend and PostRecv wrap them with the QP number and
// the detail, so callers test with errors.Is and people read the message.
var (
	// ErrQPState: the QP's state does not allow the call (e.g. posting a
	// send in RESET, INIT or RTR).
	ErrQPState = errors.New("qp state does not allow this")
	// ErrQueueFull: the work queue already holds its capacity of requests.
	ErrQueueFull = errors.New("work queue full")
	// ErrInvalidWR: the work request is malformed or not allowed on this QP
	// (opcode for the QP type, too many SGEs, inline too long, misaligned
	// atomic, missing address handle, ...).
	ErrInvalidWR = errors.New("invalid work request")
)

// Receive-queue and Modify errors (recvqueue.go, srq.go, modify.go).
var (
	// ErrTooManySGE: a receive WR has more SGEs than the queue allows.
	ErrTooManySGE = errors.New("too many scatter/gather elements")
	// ErrHasSRQ: PostRecv on a QP whose receives come from an SRQ.
	ErrHasSRQ = errors.New("qp takes its receive WQEs from an SRQ")
	// ErrInvalidAttr: Modify got an attribute mask the transition does not
	// allow or require, or an attribute value out of range.
	ErrInvalidAttr = errors.New("invalid qp attribute")
	// ErrBadTransition: Modify asked for a state transition the IBTA state
	// machine (Linux's qp_state_table) does not have.
	ErrBadTransition = errors.New("qp state transition not allowed")
	// ErrNotSupported: a feature softroce (like rxe on RoCE) does not offer,
	// such as alternate paths or resizing a QP.
	ErrNotSupported = errors.New("not supported")
)
