package verbsapi

import "github.com/softroce/softroce/rxe"

// QueueBytes is the memory the device allocates for a QP created with a:
// its send queue, and its receive queue unless it uses an SRQ. A server
// shared by programs charges it before creating (see dropin).
func (a QPInitAttr) QueueBytes() int64 {
	init := rxe.QPInit{Type: a.QPType, Cap: a.Cap}
	if a.SRQ != nil {
		init.SRQ = a.SRQ.srq
	}
	return rxe.QPQueueBytes(init)
}

// QueueBytes is the memory the device allocates for an SRQ created with a.
func (a SRQInitAttr) QueueBytes() int64 { return rxe.SRQQueueBytes(rxe.SRQInit(a)) }

// CQQueueBytes is the memory the device allocates for a CQ of cqe entries.
func CQQueueBytes(cqe int) int64 { return rxe.CQQueueBytes(cqe) }
