package main

// rstream.go: `softroce rstream`, librdmacm's rstream test over a Go
// rsocket (packages rsocket and workload/rstream): flags and wiring.

import (
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/workload/rstream"
)

func init() { register(newRstreamCmd) }

func newRstreamCmd() *cobra.Command {
	var (
		server string
		port   uint16
		o      rstream.Options
		test   []string
		bufSz  int
		lf     *linkFlags
	)
	cmd := &cobra.Command{
		Use:   "rstream [SERVER]",
		Short: "Stream over rsockets as librdmacm's rstream does (its custom test), from Go",
		Long: `rstream runs librdmacm's rstream test in its custom mode (-S size, -C count,
-I iterations) over softroce's Go rsockets (package rsocket): stream
sockets over RC queue pairs, in librdmacm's rsocket protocol. With no -s it
is the server and waits for one client; with -s SERVER (or SERVER as the
argument) it is the client.
The peer may be Debian's rstream on kernel rxe, on an RNIC, or on softroce's
drop-in library:

  softroce rstream --addr 127.0.0.2 -S 65536 -C 100              # server
  softroce rstream --addr 127.0.0.3 -s 127.0.0.2 -S 65536 -C 100 # client
  rstream -s 127.0.0.2 -S 65536 -C 100 -T v                      # or the C one

-T v verifies the data, as rstream's does.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				server = args[0]
			}
			for _, t := range test {
				if t != "v" && t != "verify" {
					return usageError{fmt.Errorf("-T %s: only v (verify) is served", t)}
				}
				o.Verify = true
			}
			if bufSz > 0 {
				o.Conn = &rsocket.Options{SendBuffer: 2 * bufSz, RecvBuffer: 2 * bufSz}
			}
			vctx, closeDev, err := openDevice(*lf, "rxe0")
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer closeDev()
			ctx := cmd.Context()
			if server == "" {
				err = rstream.Server(ctx, vctx, cmd.OutOrStdout(), port, o)
			} else {
				a, perr := netip.ParseAddr(server)
				if perr != nil {
					return usageError{fmt.Errorf("-s %q: not an IP address: %w", server, perr)}
				}
				err = rstream.Client(ctx, vctx, cmd.OutOrStdout(), netip.AddrPortFrom(a, port), o)
			}
			settleCM(vctx)
			if err != nil {
				return exitError{exitFailed, err}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&server, "server", "s", "", "connect to the rstream server at `ADDR` (default: be the server)")
	f.Uint16VarP(&port, "port", "p", rstream.DefaultPort, "rdma_cm `PORT`")
	f.IntVarP(&o.Size, "size", "S", 1000, "bytes per transfer")
	f.IntVarP(&o.Count, "count", "C", 1000, "transfers per iteration and direction")
	f.IntVarP(&o.Iterations, "iterations", "I", 1, "iterations")
	f.IntVarP(&bufSz, "buffer", "B", 1<<19, "socket buffer size, as rstream's SO_SNDBUF and SO_RCVBUF")
	f.StringSliceVarP(&test, "test", "T", nil, "test option: v (verify)")
	lf = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}
