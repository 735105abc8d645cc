// Package replay replays captured RoCE conversations against a softroce
// device.
//
// A capture of two peers talking RoCE v2 (such as the kernel rxe captures in
// testdata/pcaps/rxe) holds everything needed to stand in for either of them:
// the QP numbers and PSNs are in the BTHs, the peer's remote keys and
// addresses in its RETHs and AtomicETHs, the messages a host posted in the
// requests it sent, the memory it exposed in the read responses and atomic
// ACKs it returned, and the flow label rdma_cm gave its address vector in the
// UDP source port rxe derived from it. Run rebuilds one side (the "host") of
// one QP pair (a Flow) as a softroce device and QP from those, then walks the
// capture in order: the other side's frames go into the device, and every
// time the capture shows the host sending, the device must have sent the
// same packet. The comparison is by fields (opcode, destination QP, PSN,
// AckReq, SE, AETH syndrome and MSN, RETH, AtomicETH, DETH, immediate data,
// atomic ACK value and payload bytes) or, in strict mode, by the bytes of the
// whole frame from the IP header on, apart from the IPv4 ID (rxe's is a
// per-destination counter) and the IP checksum and ICRC that cover it. At the
// end the host's completions, the data its reads and atomics returned, the
// messages it received and the memory the peer wrote are checked too.
//
// The host's application may change its memory while the peer reads it
// (rping rewrites its buffer every round): before each of the peer's reads,
// bytes no peer request has written are set to what the host's responses to
// that read carry, and counted (Result.AppWrites). Bytes the peer wrote are
// left alone, so that softroce's handling of those writes is what the read
// responses check.
//
// The out-of-band records of ibv_*_pingpong ("LID:QPN:PSN:GID", 52 bytes)
// and perftest (its RoCE key record, which adds the rkey and address of the
// sender's buffer), on TCP port 18515, are parsed when the capture has them
// and cross-checked against the RoCE frames (Capture.CheckOOB); so are the
// REQ and REP of flows connected with rdma_cm, which carry the same facts
// on QP 1 (Capture.CheckCM).
//
// A capture with loss (Flow.Lossy) allows only a responder replay: the
// requester's messages have packets the capture lacks. Options.ResponderOnly
// feeds the peer's requests, retransmissions included, and compares only the
// device's responses. A capture taken at one end lacks the responses the
// network lost on the way, so there the captured responses must appear, in
// order, among the device's; those that do not are reported as Uncaptured
// rather than as differences.
//
// Rewrite prepares captured frames for sending to a live peer (softroce
// replay --to): it gives them other addresses and recomputes the ICRC.
package replay
