// Package pingpong runs rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong exchange on a verbs context, speaking their out-of-band
// protocol (package oob) so that either side may be the C tool.
//
// The loop is the C tools' main: receives kept posted, one SEND in flight,
// the WR ids as bits of "pending", and -c's buffer check, page by page; its
// output lines are the tools' own.
package pingpong
