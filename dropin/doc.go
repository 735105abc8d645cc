// Package dropin serves softroce devices to unmodified C programs through
// drop-in libraries: the C libibverbs.so.1 and librdmacm.so.1 in
// dropin/libibverbs/ and dropin/librdmacm/ (rsockets included), the preload
// library in dropin/librspreload/ that makes a program's TCP sockets
// rsockets, and the Server that gives them a device over a Unix socket.
//
// A program started with `softroce run` loads dropin/libibverbs in place of
// the system's libibverbs. Each ibv_open_device is one connection to a
// Server, and each connection is one verbsapi.Context on the served device:
// the objects a program creates are its own, the asynchronous events about
// them reach only it, and when the program exits or crashes the server
// destroys whatever it left, as the kernel does when a uverbs file closes.
// Verbs are calls on the connection (the wire format is
// dropin/libibverbs/proto.h, mirrored in proto.go); the library names the
// protocol version it speaks and a server of another version refuses it by
// name.
//
// Queues are shared too, as a kernel provider maps its queues. Every CQ is
// a ring in a sealed memfd that the daemon sends with CREATE_CQ's answer
// (cqring.go): the device writes each completion into it as it happens,
// and ibv_poll_cq reads it without a call. Every QP has a send and a
// receive ring the same way (wqring.go): ibv_post_send and ibv_post_recv
// write WRs into slots; a send rings the context's doorbell (an eventfd)
// only when the daemon's poller for the program sleeps, a receive only when
// its QP is also in the error state, since the device reads the receive
// ring when a message needs a WR, as an RNIC reads its receive queue. An
// SRQ has a receive ring too, read at every take from it. What
// cannot go through a ring (binds, local invalidation, READ and atomics
// on a QP with max_rd_atomic 0, a full queue) goes by
// a call, which takes what waits in the rings first.
//
// Registered memory is shared, not copied: ibv_reg_mr moves the region's
// pages into sealed memfds mapped at the same addresses in the program,
// passes them to the server (SCM_RIGHTS), and the server maps the same
// pages, so RDMA WRITE, READ and atomics from peers act on the program's
// own memory. Programs are not trusted: every request is checked, every
// count bounded, the memfds must be sealed against shrinking (a shrunk
// mapping would fault in the server), registered bytes are capped per
// program and in all, and only the server's user (and root) may connect.
// Refused requests and dropped programs are logged through Server.Logf,
// rate-limited, with the reason.
//
// rdma_cm (cm*.go). librdmacm.so.1 opens a connection of its own and plays
// the kernel's rdma_cm through it: the server keeps the program's ids and
// event channels (an eventfd each, counting queued events), connects them
// through the device's connection manager (verbsapi.CMPort, CM MADs on QP
// 1), and answers rdma_init_qp_attr with the attributes the REQ and REP
// imply; the library moves the program's QPs with them, as librdmacm does.
// Ids, channels and queued events are bounded per program, like the rest.
//
// The file system view (sysfs.go, view.go). Middleware finds RDMA devices
// in /sys/class/infiniband and /dev/infiniband as well as through
// libibverbs. WriteSysfs writes what the kernel shows for an rxe device
// into SysfsDir(socket), where the library's ibv_get_sysfs_path and
// ibdev_path point; EnterView lays that directory over /sys/class and
// /dev in a mount namespace of the program's own (softroce run's
// view-exec stage), without touching the host's.
//
// Library location and build: FindLib finds (and in a source checkout
// builds) the library for `softroce run`.
//
// The daemon's priority (priority.go): the daemon does the work the kernel
// does for rxe in softirq context, ahead of user threads, so `softroce
// daemon` raises every thread of itself to DefaultNice with SetNice where
// it may, and Boost moves them under SCHED_RR (SetRealtime, SetNormal)
// while the device moves bulk data; programs that spin on their CQs then
// do not keep it waiting for a time slice.
package dropin
