// Package rsocket gives Go programs stream sockets over RDMA: a
// net.Listener and net.Conn carried by RC queue pairs of a softroce device
// (package verbsapi), speaking librdmacm's rsocket protocol, so a Go
// server serves C programs using rsockets (rstream, or anything under
// librspreload.so) and a Go client talks to their servers, on softroce,
// kernel rxe or an RNIC.
//
// The protocol (rdma-core's librdmacm/docs/rsocket): rdma_cm connects the
// QPs, the REQ and REP carrying each side's struct rs_conn_data (wire.go).
// Each side owns a receive buffer in two halves and tells the peer where to
// write by RDMA-writing an rs_sge into the peer's two-entry target SGL;
// data goes as RDMA WRITE WITH IMMEDIATE into the current target, the
// immediate saying how many bytes; credit grants, shutdown and disconnect
// are zero-length writes with immediates. Every immediate consumes a
// receive WQE, so the sender also keeps the credits the receiver grants.
//
// A Conn runs one goroutine that takes its completions and rdma_cm's
// disconnect; Read, Write and Close may be called from any goroutines, with
// deadlines, as net.Conn requires (golang.org/x/net/nettest's conformance
// test runs in this package's tests). Input from the peer is hostile: data
// longer than the half it went to, more messages than credits, writes
// without an immediate or unknown opcodes fail the connection with
// ErrProtocol; nothing outside the registered buffers is read or written.
package rsocket
