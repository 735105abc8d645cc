// Package rxe is softroce's device: a software RoCE v2 NIC in user space,
// modelled on Linux's Soft-RoCE (rdma_rxe). One Device sits on one link and
// one set of addresses and owns everything a verbs user creates on it:
// protection domains, memory regions, completion queues, shared receive
// queues, address handles and queue pairs, plus the GID table, port and
// device attributes, counters and asynchronous events.
//
// The device is split the way package qp is, so that the same code runs on
// the real clock and under the simulator's virtual time:
//
//   - The core (everything but runtime.go) never reads a clock, sleeps or
//     starts goroutines. It is driven by calls that carry the time: HandleFrame
//     hands it a received Ethernet frame, Output fills caller-owned frames with
//     the packets its QPs want sent (round-robin over QPs, a bounded burst
//     each), Tick runs the QPs' timers and Deadline says when Tick is next
//     due. Packets addressed to one of the device's own GIDs are looped back
//     inside Output without touching the link, as rxe does. The core is safe
//     for concurrent use: one mutex serializes the verbs calls (PostSend,
//     Poll, Modify, ...) with the data path. A device made SingleThreaded
//     (the simulator's, whose event loop is its only caller) skips the
//     mutex, and cannot be Started.
//   - The runtime (Start, Close) drives the core with the monotonic clock: a
//     receive goroutine reads batches of frames from the link, handles them
//     and sends one batch of what they caused (ACKs, or requests the ACKs
//     let into the window); a transmit goroutine flushes the rest of Output
//     whenever work was posted or more is pending; a timer goroutine sleeps
//     until Deadline and calls Tick; Close first sends the ACKs destroyed
//     QPs still owe. The simulator instead drives the core itself with
//     virtual time and carries the frames between devices.
//
// Wire choices follow rxe so that captures are byte-comparable: UDP source
// port 0xC000|hash(QPN) at creation and rdma_get_udp_sport(flow label, local
// QPN, remote QPN) once an address vector is set, IPv4 DF set, UDP checksum
// 0, IPv6 flow label 0, P_Key 0xFFFF. On a link that sends through a kernel
// UDP socket (link.FixedSourcePort) every frame carries the socket's port and
// IPv4 ID 0, which is what the kernel writes, so that the ICRC is right.
// Received packets go through rxe's checks in rxe's order (destination GID,
// opcode, QP, addresses, P_Key, QKey, then ICRC); each drop is counted by
// cause. Frames whose IPv4 ID the link could not see are checked by solving
// for the ID (packet.RecoverIPv4ID; why and how: packet/ipid.go).
//
// QP 1 (gsi.go) carries the connection manager's MADs: a UD SEND ONLY to
// QP 1 with the GSI Q_Key goes, after rxe's checks, to the device's
// cm.Manager, and what the manager sends leaves from QP 1 as kernel rxe's
// QP 1 sends it (source port 0xD872, PSNs from 0, hop limit 64). Its
// consumer (the rdma_cm layer) calls the manager through WithCM and is woken
// by CMReady; the manager's timers run in Tick and count in Deadline, so
// connection setup runs in real and virtual time alike.
//
// Congestion control (congestion.go) is where softroce leaves rxe, which has
// none: with Congestion.ECN the device sends RoCE packets ECT(0), with the
// engine's notification and reaction points on it answers CE marks with
// CNPs (DSCP np_cnp_dscp, Not-ECT) and cuts its QPs' rates on CNPs (DCQCN),
// all settable under mlx5's names. Off by default; a CNP that reaches the
// device then counts in rx_cnp and rp_cnp_ignored and changes nothing, as in
// rxe.
//
// replay_test.go puts a device in the place of either host of the kernel rxe
// captures in testdata/pcaps/rxe and requires it to send the same frames,
// byte for byte apart from the IPv4 ID.
//
// Memory regions are Go byte slices. RegMR gives a region the address of its
// first byte, as a NIC would see a process's buffer; RegMRIOVA gives it a
// chosen address instead (ibv_reg_mr_iova), which the simulator uses so that
// its captures do not depend on the Go heap. Keys are (MR index << 8) | a
// random byte, as rxe's.
package rxe
