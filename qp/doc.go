// Package qp is the InfiniBand transport engine: RC, UC and UD queue pairs as
// deterministic, sans-I/O state machines.
//
// A QP is driven by calls: PostSend and PostRecv queue work, Receive hands it
// a decoded packet that arrived, Tick tells it the time, and Transmit hands
// back, one at a time, the packets it wants sent. Completions go to the CQs it
// was created with; the next timer deadline comes from Deadline. The engine
// never reads a clock, sleeps, starts goroutines or touches a socket: the
// caller passes the current time (Time, in nanoseconds on any monotonic or
// virtual clock), so the same code runs under real time (package rxe) and
// under the simulator's virtual time (package sim).
//
// The engine follows kernel rxe's split: the requester (req.go) turns send
// WQEs into request packets; the completer (comp.go) processes ACKs, NAKs and
// read/atomic responses and retires WQEs; the responder (resp.go) checks and
// executes incoming requests and generates ACKs, NAKs and read/atomic
// responses. Memory is reached only through the Memory interface.
//
// Loss recovery is rxe's go-back-N (PSN sequence NAKs, the local ACK timeout
// restarted by any response, as rxe's completer does), except for READ: a
// gap in a READ's responses is repaired at once (read_repair.go) by keeping
// the responses after it and asking for the missing range alone, a subset
// READ that rxe's responder answers too; a gap that runs to the end of a
// READ goes back N at once, and the responder drops the responses still
// queued behind such a go-back-N instead of sending them first. With
// Config.FastRecovery it does more
// (recovery.go): an early retry when an answer is a few measured round trips
// late after a loss, and a second NAK when a resend is lost again.
//
// Congestion control runs in the same engine (congestion.go): a QP answers
// CE-marked packets with CNPs (np.go), and a CNP starts its rate control
// (dcqcn.go, behind the RateControl interface) and the pacer that holds its
// requester to that rate (pace.go).
//
// A QP allocates its queues when it is made, never per packet; a program
// that drops QPs whole and makes more (the simulator, run after run) can
// have New build them in the dropped ones instead (spares.go).
//
// A QP is not safe for concurrent use; its owner serializes calls.
package qp
