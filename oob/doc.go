// Package oob implements the out-of-band exchanges that rdma-core's
// ibv_{rc,uc,ud}_pingpong and linux-rdma's perftest (ib_write_bw and friends)
// run over TCP, port 18515 by default, to trade queue-pair addresses before
// any RDMA traffic flows, byte for byte as the C tools do, so that softroce's
// pingpong and perf commands can pair with the originals.
//
// The C tools exchange fixed-size, NUL-terminated ASCII records written with
// sprintf and read with read(2) of the same size; the client always writes
// first and the server reads first. This package keeps those sizes exactly
// and reads with io.ReadFull, so a record split by TCP still arrives whole.
//
// perftest keeps its connection open for the whole test, and a side learns
// that the other died from it closing: WatchHangup notices that without
// reading a byte the protocol wants.
package oob
