package main

// pingpong.go: `softroce pingpong`, rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong and ibv_ud_pingpong on a softroce device: flags and wiring
// over package workload/pingpong.

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/workload/pingpong"
)

func init() { register(newPingpongCmd) }

// pingpongOpts are the flags: the C tools' and the link's.
type pingpongOpts struct {
	pingpong.Options
	lf *linkFlags
}

func newPingpongCmd() *cobra.Command {
	o := &pingpongOpts{}
	cmd := &cobra.Command{
		Use:   "pingpong [PEER]",
		Short: "Ping-pong SENDs with a peer, as ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong",
		Long: `pingpong bounces a message between two QPs, SEND against RECV, as rdma-core's
ibv_rc_pingpong (--transport rc, the default), ibv_uc_pingpong (uc) and
ibv_ud_pingpong (ud) do, and speaks their out-of-band protocol: the two sides
trade "lid:qpn:psn:gid" records over TCP (port 18515 by default), so either
side may be the C tool on a real RDMA device. With no PEER it is the server
and waits for a client; with PEER it connects to it.

The device runs on the link the link flags describe (by default a kernel UDP
socket on --addr, port 4791), so two processes on one host need no root:

  softroce pingpong --addr 127.0.0.2              # server
  softroce pingpong --addr 127.0.0.3 127.0.0.2    # client

Differences from the C tools: -g defaults to the GID of --addr (index 1 for
an IPv4 address) instead of "no GID", which cannot work on RoCE; the path
MTU flag is -m/--path-mtu because --mtu is the link's MTU; for ud the message
size defaults to 2048 or the port's active MTU if smaller (1024 on a
1500-byte link), where ibv_ud_pingpong would refuse to start; -c checks
every byte (0x7b, 0 at the start of each page, which is what the C client
sends with -c) and exits with status 1 on a mismatch. -l is accepted and
ignored (RoCE has no service levels in use), as are -d and -i.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") && o.Transport == "ud" {
				o.Size = 0 // chosen from the port's MTU
			}
			peer := ""
			if len(args) == 1 {
				peer = args[0]
			}
			return runPingpong(cmd.Context(), cmd.OutOrStdout(), o, peer)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&o.Port, "port", "p", 18515, "listen on/connect to TCP port `PORT` for the out-of-band exchange")
	fs.StringVarP(&o.IBDev, "ib-dev", "d", "rxe0", "device name (accepted for compatibility; the device is the one the link flags build)")
	fs.IntVarP(&o.IBPort, "ib-port", "i", 1, "port of the device (only 1 exists)")
	fs.IntVarP(&o.Size, "size", "s", 4096, "size of message to exchange (ud: default 2048, at most the port MTU)")
	fs.IntVarP(&o.PathMTU, "path-mtu", "m", 1024, "path MTU: 256, 512, 1024, 2048 or 4096 (rc, uc)")
	fs.IntVarP(&o.RxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fs.IntVarP(&o.Iters, "iters", "n", 1000, "number of exchanges")
	fs.IntVarP(&o.SL, "sl", "l", 0, "service level (ignored)")
	fs.BoolVarP(&o.Events, "events", "e", false, "sleep on CQ events (default poll)")
	fs.IntVarP(&o.GIDIndex, "gid-idx", "g", -1, "local port GID index (default: the GID of --addr)")
	fs.BoolVarP(&o.Check, "chk", "c", false, "validate received buffer")
	fs.StringVar(&o.Transport, "transport", "rc", "transport: rc, uc or ud")
	fs.DurationVar(&o.PeerTimeout, "peer-timeout", 10*time.Second, "fail when no completion arrives for this long (0: wait forever, as ibv_*_pingpong)")
	o.lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// runPingpong opens the device the flags describe and runs the exchange.
func runPingpong(cctx context.Context, out io.Writer, o *pingpongOpts, peer string) error {
	if o.GIDIndex < 0 {
		ap, err := parseAddr(o.lf.Addr)
		if err != nil {
			return usageError{err}
		}
		o.Addr = ap.Addr()
	}
	if err := pingpong.Check(&o.Options); err != nil {
		return usageError{err}
	}
	vctx, closeDev, err := openDevice(*o.lf, o.IBDev)
	if err != nil {
		return exitError{exitTrouble, err}
	}
	defer closeDev()
	err = pingpong.Run(cctx, vctx, out, &o.Options, peer)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pingpong.ErrUsage):
		return usageError{err}
	case errors.Is(err, pingpong.ErrSetup):
		return exitError{exitTrouble, err}
	}
	return exitError{exitFailed, err}
}
