package main

// rdmacm.go: `softroce rdmacm`, librdmacm's rdma_server and rdma_client
// examples on a softroce device: flags and wiring over package
// workload/rdmacm.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/verbsapi"
	"github.com/softroce/softroce/workload/rdmacm"
)

func init() { register(newRdmacmCmd) }

func newRdmacmCmd() *cobra.Command {
	var port uint16
	var lf *linkFlags
	cmd := &cobra.Command{
		Use:   "rdmacm [SERVER]",
		Short: "Connect with the RDMA connection manager, as librdmacm's rdma_server and rdma_client",
		Long: `rdmacm connects two QPs with the RDMA connection manager (CM MADs on QP 1,
no out-of-band socket), as librdmacm's example programs rdma_server and
rdma_client do: the client SENDs 16 bytes, the server SENDs 16 back, and both
disconnect. With no SERVER it is rdma_server and waits for one client; with
SERVER (an IP address) it is rdma_client -s SERVER. Either side may be the C
program on kernel rxe or a real RNIC:

  softroce rdmacm --addr 127.0.0.2              # server
  softroce rdmacm --addr 127.0.0.3 127.0.0.2    # client

The output lines are the programs' own; the exit status is 0 when the
exchange completed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var server netip.Addr
			if len(args) == 1 {
				a, err := netip.ParseAddr(args[0])
				if err != nil {
					return usageError{fmt.Errorf("server %q: not an IP address: %w", args[0], err)}
				}
				server = a
			}
			return runRdmacm(cmd.Context(), cmd.OutOrStdout(), *lf, port, server)
		},
	}
	cmd.Flags().Uint16VarP(&port, "port", "p", rdmacm.DefaultPort, "rdma_cm `PORT` to listen on or connect to")
	lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// runRdmacm opens the device the flags describe and runs one side.
func runRdmacm(cctx context.Context, out io.Writer, lf linkFlags, port uint16, server netip.Addr) error {
	vctx, closeDev, err := openDevice(lf, "rxe0")
	if err != nil {
		return exitError{exitTrouble, err}
	}
	defer closeDev()
	if server.IsValid() {
		err = rdmacm.Client(cctx, vctx, out, netip.AddrPortFrom(server, port))
	} else {
		err = rdmacm.Server(cctx, vctx, out, port)
	}
	settleCM(vctx)
	if err != nil {
		return exitError{exitFailed, err}
	}
	return nil
}

// settleCM waits (5 s at most) until the last DREP has reached the peer,
// and the peer's late DREQ has its answer, before the device goes.
func settleCM(vctx *verbsapi.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = vctx.Flush(ctx)
	_ = vctx.DrainCM(ctx)
}
