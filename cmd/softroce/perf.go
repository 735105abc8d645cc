package main

// perf.go: `softroce perf`, perftest's ib_{write,read,send,atomic}_{bw,lat}
// on a softroce device: flags and wiring over package workload/perftest.

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/workload/perftest"
)

func init() { register(newPerfCmd) }

// perfOpts are the perf command's flags: perftest's options and the link.
type perfOpts struct {
	perftest.Options
	lf       *linkFlags
	counters bool // --counters: the device's counters after the report
}

func newPerfCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Measure bandwidth or latency with a peer, as perftest's ib_*_bw / ib_*_lat",
		Long: `perf runs perftest's benchmarks on a softroce device: "perf write" is
ib_write_bw (or ib_write_lat with --lat), and likewise read, send and atomic.
It speaks perftest's out-of-band protocol over TCP (port 18515 by default):
version, system data and MTU exchange, the per-QP key records with the GID,
hand-shake barriers, the exchange of bandwidth reports and the closing
"done", so either side may be perftest on a real RDMA device. With no PEER it
is the server; with PEER the client. The output follows perftest's: the test
header, the local and remote address lines, and the result table.

  softroce perf write --addr 127.0.0.2                 # server
  softroce perf write --addr 127.0.0.3 127.0.0.2       # client

Differences from perftest: the path MTU flag is -m/--path-mtu (--mtu is the
link MTU); -x defaults to the GID of --addr; only RC (and UC for write and
send) connections; times are from Go's monotonic clock, in nanoseconds,
not the CPU cycle counter.`,
	}
	for _, v := range []struct {
		name string
		verb perftest.Verb
	}{{"send", perftest.VerbSend}, {"write", perftest.VerbWrite}, {"read", perftest.VerbRead}, {"atomic", perftest.VerbAtomic}} {
		cmd.AddCommand(newPerfVerbCmd(v.name, v.verb))
	}
	return cmd
}

func newPerfVerbCmd(name string, verb perftest.Verb) *cobra.Command {
	o := &perfOpts{Options: perftest.Options{Verb: verb}}
	cmd := &cobra.Command{
		Use:   name + " [PEER]",
		Short: fmt.Sprintf("ib_%s_bw / ib_%s_lat", name, name),
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			if o.Lat && o.BW {
				return usageError{errors.New("--lat and --bw exclude each other")}
			}
			if !fs.Changed("size") {
				o.Size = 65536
				if o.Lat {
					o.Size = 2
				}
			}
			if o.Verb == perftest.VerbAtomic {
				o.Size = 8
			}
			if !fs.Changed("iters") {
				o.Iters = 5000
				if o.Lat {
					o.Iters = 1000
				}
			}
			if !fs.Changed("tx-depth") {
				o.TxDepth = 128
				if o.Lat {
					o.TxDepth = 1
				}
			}
			peer := ""
			if len(args) == 1 {
				peer = args[0]
			}
			return runPerf(cmd.Context(), cmd.OutOrStdout(), o, peer)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.Lat, "lat", false, "measure latency (ib_*_lat)")
	fs.BoolVar(&o.BW, "bw", false, "measure bandwidth (ib_*_bw, the default)")
	fs.Uint64VarP(&o.Size, "size", "s", 65536, "size of message to exchange (default 65536 for bw, 2 for lat; atomic: 8)")
	fs.IntVarP(&o.Iters, "iters", "n", 5000, "number of exchanges (at least 5; default 5000 for bw, 1000 for lat)")
	fs.IntVarP(&o.QPs, "qp", "q", 1, "number of QPs (bw)")
	fs.IntVarP(&o.PathMTU, "path-mtu", "m", 0, "path MTU: 256 - 4096 (default: the port's active MTU)")
	fs.BoolVarP(&o.All, "all", "a", false, "run sizes from 2 till 2^23")
	fs.BoolVar(&o.Gbits, "report_gbits", false, "report bandwidth in Gbit/sec instead of MiB/sec")
	fs.StringVarP(&o.IBDev, "ib-dev", "d", "rxe0", "device name")
	fs.IntVarP(&o.IBPort, "ib-port", "i", 1, "port of the device (only 1 exists)")
	fs.IntVarP(&o.GIDIndex, "gid-index", "x", -1, "GID index (default: the GID of --addr)")
	fs.IntVarP(&o.Port, "port", "p", 18515, "listen on/connect to TCP port `PORT`")
	fs.IntVarP(&o.TxDepth, "tx-depth", "t", 128, "size of tx queue (default 128 for bw, 1 for lat)")
	fs.IntVarP(&o.RxDepth, "rx-depth", "r", 512, "size of rx queue (send)")
	fs.IntVarP(&o.CQMod, "cq-mod", "Q", 100, "generate a completion only every N sends (bw)")
	fs.IntVarP(&o.OutReads, "outs", "o", 0, "outstanding reads/atomics (default: the device maximum)")
	fs.StringVarP(&o.AtomicType, "atomic_type", "A", "FETCH_AND_ADD", "atomic: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.StringVarP(&o.Conn, "connection", "c", "RC", "connection type: RC (or UC for write and send)")
	fs.BoolVarP(&o.NoPeak, "noPeak", "N", false, "cancel peak-bw calculation")
	fs.BoolVar(&o.DontXchg, "dont_xchg_versions", false, "do not exchange versions and MTU with the other side")
	fs.BoolVar(&o.counters, "counters", false, "after the report, print the device's counters that are not zero (retransmits, NAKs, early_retries...)")
	var cpuFreq bool
	fs.BoolVarP(&cpuFreq, "CPU-freq", "F", false, "accepted for compatibility (there is no cycle counter to warn about)")
	o.lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// runPerf opens the device the flags describe and runs the test on it.
func runPerf(cctx context.Context, out io.Writer, o *perfOpts, peer string) error {
	if err := perftest.Check(&o.Options); err != nil {
		return usageError{err}
	}
	if o.GIDIndex < 0 {
		ap, err := parseAddr(o.lf.Addr)
		if err != nil {
			return usageError{err}
		}
		o.Addr = ap.Addr()
	}
	vctx, closeDev, err := openDevice(*o.lf, o.IBDev)
	if err != nil {
		return exitError{exitTrouble, err}
	}
	defer closeDev()
	if err := perftest.Run(cctx, vctx, out, &o.Options, peer); err != nil {
		if errors.Is(err, perftest.ErrUsage) {
			return usageError{err}
		}
		return exitError{exitFailed, err}
	}
	if o.counters {
		c := vctx.Counters()
		fmt.Fprintln(out, "device counters:")
		for _, n := range c.List() {
			if n.Value != 0 {
				fmt.Fprintf(out, " %-28s %d\n", n.Name, n.Value)
			}
		}
	}
	return nil
}
