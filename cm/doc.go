// Package cm is the InfiniBand communication manager (IBTA vol. 1, chapter
// 12) as a deterministic, sans-I/O state machine: it sets up, tears down and
// resolves connections by exchanging CM MADs with a peer's QP 1, the way the
// Linux kernel's ib_cm does, byte-compatible with it.
//
// A Manager is driven by calls, like a qp.QP: Receive hands it a MAD that
// arrived on QP 1 with the sender's address; Listen, Connect, Accept, Ready,
// Reject, Disconnect and the SIDR calls are its consumer's requests; Tick
// tells it the time. It hands back MADs to send (Output, each with the
// address it goes to), events for its consumer (Event: a request arrived, the
// peer answered, rejected, disconnected, or stopped answering) and the next
// timer deadline (Deadline). It never reads a clock, sleeps, starts a
// goroutine or touches a socket, so the device runs it in real time and the
// simulator in virtual time. It does not touch QPs either: its consumer (the
// rdma_cm layer) moves the QP through INIT, RTR and RTS with what the events
// carry, as the kernel's rdma_cm does with ib_cm's.
//
// What it follows from the kernel (drivers/infiniband/core/cm.c), as
// reference/rdma-cm.md §1 records: comm IDs and transaction IDs formed the
// same way; REQ, REP and DREQ retransmitted on the response timeouts and
// retry counts the REQ carries, SIDR_REQ on its own; a duplicate REQ dropped
// while the consumer decides, answered with an MRA once the consumer has it,
// with a REJ "stale connection" in timewait; a duplicate REP answered with
// the RTU again; a REQ from a QP already connected refused as stale; a REQ
// nobody listens for refused with "invalid service ID"; a DREQ for an
// unknown connection answered with a DREP; timewait for the connection's ACK
// timeout before a remote QP may connect again.
//
// Input from the wire is hostile: a MAD that is not a CM MAD, names no
// connection, or arrives in a state that does not take it is dropped and
// counted (Counters), never trusted; the number of connections and of queued
// outputs is bounded, a REQ beyond the bound is refused with "no resources".
//
// A Manager is not safe for concurrent use; its owner serializes calls.
package cm
