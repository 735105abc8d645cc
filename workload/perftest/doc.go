// Package perftest runs perftest's benchmarks (ib_write_bw, ib_read_lat and
// their siblings) on a verbs context, speaking perftest's out-of-band
// protocol and printing its reports, so that either side may be the real
// perftest.
//
// The loops follow perftest 6.06's write_bw.c, read_lat.c and friends, and
// the reports its REPORT_FMT formats byte for byte: the interop suite parses
// both sides' output alike. Times come from Go's monotonic clock in
// nanoseconds instead of the CPU's cycle counter.
package perftest
