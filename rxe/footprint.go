package rxe

import "github.com/softroce/softroce/qp"

// QPQueueBytes is the memory CreateQP allocates for init's queues, with the
// send capabilities granted as CreateQP grants them; an SRQ's ring is the
// SRQ's (SRQQueueBytes).
func QPQueueBytes(init QPInit) int64 {
	c := init.Cap
	grantSendCaps(&c)
	recvWR := c.MaxRecvWR
	if init.SRQ != nil {
		recvWR = 0
	}
	return qp.QueueBytes(c.MaxSendWR, c.MaxSendSGE, c.MaxInline, recvWR, c.MaxRecvSGE)
}

// SRQQueueBytes is the memory CreateSRQ allocates for init's ring.
func SRQQueueBytes(init SRQInit) int64 { return qp.RecvRingBytes(max(init.MaxWR, 1), init.MaxSGE) }

// CQQueueBytes is the memory CreateCQ allocates for depth completions.
func CQQueueBytes(depth int) int64 { return qp.CQBytes(depth) }
