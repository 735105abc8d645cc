package qp

import "unsafe"

// QueueBytes is the memory New allocates up front for a QP's queues: the
// send ring with its SGL and inline blocks (initSend), and the receive
// ring with its SGLs when the QP has no SRQ (pass recvWR 0 then). A server
// shared by untrusted programs charges it before creating the QP, since a
// queue at the device's advertised maxima runs to gigabytes.
func QueueBytes(sendWR, sendSGE, inline, recvWR, recvSGE int) int64 {
	return sendRingBytes(sendWR, sendSGE, inline) + RecvRingBytes(recvWR, recvSGE)
}

func sendRingBytes(wr, sge, inline int) int64 {
	n := int64(max(wr, 1))
	return n * (int64(unsafe.Sizeof(sendWQE{})) + int64(max(sge, 0))*int64(unsafe.Sizeof(SGE{})) + int64(max(inline, 0)))
}

// RecvRingBytes is the memory of a receive ring (a QP's own, or an SRQ's)
// of wr WQEs with sge SGEs each; zero for wr 0.
func RecvRingBytes(wr, sge int) int64 {
	if wr <= 0 {
		return 0
	}
	return int64(wr) * (int64(unsafe.Sizeof(recvWQE{})) + int64(max(sge, 1))*int64(unsafe.Sizeof(SGE{})))
}

// CQBytes is the memory of a CQ of depth completions (NewCQ).
func CQBytes(depth int) int64 { return int64(max(depth, 1)) * int64(unsafe.Sizeof(WC{})) }
