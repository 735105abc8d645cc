package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/replay"
)

func init() { register(newReplayCmd) }

// replayFlags are the flags of softroce replay.
type replayFlags struct {
	as            string
	flow          int
	strict        bool
	quiet         bool
	responderOnly bool
	to            string
	side          string
	fast          bool
	link          *linkFlags
}

func newReplayCmd() *cobra.Command {
	var rf replayFlags
	cmd := &cobra.Command{
		Use:   "replay [flags] FILE... | DIR...",
		Short: "Replay a captured RoCE conversation against softroce, or send one side of it to a live peer",
		Long: `replay puts softroce in the place of one host of a capture of two RoCE v2
peers (such as the kernel rxe captures) and checks that it answers as the
captured host did. The QP numbers, PSNs, keys, addresses, work requests and
memory of that host are rebuilt from the capture itself (the out-of-band
records of ibv_*_pingpong and perftest, on TCP port 18515, are cross-checked
when present). The other host's frames are fed to softroce in capture order
and every packet softroce sends is compared with the captured host's: by
opcode, destination QP, PSN, AckReq, AETH syndrome and MSN, RETH, DETH,
immediate data, atomic value and payload bytes, or with --strict byte for
byte from the IP header on apart from the IPv4 ID (and the IP checksum and
ICRC that cover it). One line is printed per matched packet (-q: a summary
per flow), and at the first difference both packets, decoded.

--as picks the host: A (the sender of the first frame of the capture's first
QP pair), B (the other one), an IP address, or "both" to replay each side in
turn. The default is the responder of the first RC QP pair. Every QP pair
(flow, numbered in the order of their first frames) of that host is
replayed, or only the one --flow names. A flow with loss (NAKs, retransmissions, gaps) can only be
replayed from its responder: its requests, retransmissions included, are
fed and softroce's responses compared; responses of softroce's that the
capture lacks are reported as lost before the capture point (the captured
ones must appear among softroce's, in order). Its requester side is skipped.

With --to ADDR, replay instead sends the frames of one side of the capture
(--side A|B|IP, default A) to a live peer at ADDR over a link (--link udp or
tap and the link flags; --addr is the local address), at the captured pace
or with --fast as fast as possible, readdressed (source: --addr, destination:
ADDR) and with the ICRC recomputed.

Given several files or a directory, replay checks conformance: every flow
of every capture (*.pcap, *.pcapng) from both sides, or from its responder
where it shows loss, one line each: matched, differs (the first
difference) or not replayable (why), then a total.

Exit status: 0 when softroce matches the capture (or every frame was sent),
1 at a difference, 2 when the capture cannot be replayed.`,
		Example: `  softroce replay testdata/pcaps/rxe/rc_pingpong.pcap
  softroce replay -q --as both --strict testdata/pcaps/rxe/read.pcap
  softroce replay --as 10.77.0.2 testdata/pcaps/rxe/loss.pcap
  softroce replay testdata/pcaps/rxe testdata/pcaps/interop        # conformance, one line per flow
  softroce replay --to 127.0.99.2 --link udp --addr 127.0.99.1:4792 --side A --fast testdata/pcaps/rxe/write.pcap`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if st, err := os.Stat(args[0]); len(args) > 1 || (err == nil && st.IsDir()) {
				if rf.to != "" {
					return usageError{errors.New("--to sends one capture: give one file")}
				}
				return runConformance(cmd.OutOrStdout(), args, rf.strict)
			}
			c, err := replay.Load(args[0])
			if err != nil {
				return exitError{exitTrouble, err}
			}
			if rf.to != "" {
				return runReplaySend(cmd, c, &rf)
			}
			return runReplayCompare(cmd.OutOrStdout(), c, &rf)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&rf.as, "as", "", "host softroce replaces: A, B, an IP address or both (default: the responder of the first RC flow)")
	fs.IntVar(&rf.flow, "flow", 0, "replay only this QP pair (1 is the first; 0: all of the host's)")
	fs.BoolVar(&rf.strict, "strict", false, "compare whole frames from the IP header on, apart from the IPv4 ID")
	fs.BoolVarP(&rf.quiet, "quiet", "q", false, "print a summary per flow instead of a line per packet")
	fs.BoolVar(&rf.responderOnly, "responder-only", false, "compare only the host's responses (automatic for flows with loss)")
	fs.StringVar(&rf.to, "to", "", "send one side's frames to the live peer at this address instead of comparing")
	fs.StringVar(&rf.side, "side", "A", "with --to: whose frames to send: A, B or an IP address")
	fs.BoolVar(&rf.fast, "fast", false, "with --to: send as fast as possible instead of at the captured pace")
	rf.link = addLinkFlags(cmd, linkFlags{Link: "udp"})
	return cmd
}

// captureHosts returns the capture's A and B: the sender and receiver of
// the first frame of its first flow.
func captureHosts(flows []*replay.Flow) (a, b netip.Addr) {
	if len(flows) == 0 {
		return
	}
	return flows[0].A.Addr, flows[0].B.Addr
}

// resolveSide turns A, B or an address into a host address.
func resolveSide(s string, flows []*replay.Flow) (netip.Addr, error) {
	a, b := captureHosts(flows)
	switch strings.ToUpper(s) {
	case "A":
		return a, nil
	case "B":
		return b, nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q: want A, B or an IP address", s)
	}
	addr = addr.Unmap()
	for _, f := range flows {
		if _, _, ok := f.Side(addr); ok {
			return addr, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s is not a host of the capture (A is %s, B is %s)", addr, a, b)
}

// defaultHost is the responder of the first RC flow, or of the first flow.
func defaultHost(flows []*replay.Flow) netip.Addr {
	for _, f := range flows {
		if f.Type == qp.RC {
			return f.Responder().Addr
		}
	}
	return flows[0].Responder().Addr
}

func runReplayCompare(out io.Writer, c *replay.Capture, rf *replayFlags) error {
	flows := c.Flows()
	if len(flows) == 0 {
		return exitError{exitTrouble, fmt.Errorf("%s: no RC, UC or UD QP pair to replay", c.Name)}
	}
	if rf.flow < 0 || rf.flow > len(flows) {
		return usageError{fmt.Errorf("--flow %d: the capture has %d QP pairs", rf.flow, len(flows))}
	}
	var hosts []netip.Addr
	switch {
	case rf.as == "":
		hosts = []netip.Addr{defaultHost(flows)}
	case strings.EqualFold(rf.as, "both"):
		a, b := captureHosts(flows)
		hosts = []netip.Addr{a, b}
	default:
		h, err := resolveSide(rf.as, flows)
		if err != nil {
			return usageError{fmt.Errorf("--as %w", err)}
		}
		hosts = []netip.Addr{h}
	}
	replayed, failed := 0, 0
	for _, h := range hosts {
		for i, f := range flows {
			host, _, ok := f.Side(h)
			if !ok || (rf.flow != 0 && rf.flow != i+1) {
				continue
			}
			fmt.Fprintf(out, "flow %d: %s: softroce as %s\n", i+1, f, host)
			if f.Start != "" && !rf.quiet {
				fmt.Fprintf(out, "  starts anew: %s\n", f.Start)
			}
			if recs, err := c.CheckOOB(f); err != nil {
				fmt.Fprintf(out, "  out-of-band: %v\n", err)
				failed++
				continue
			} else if !rf.quiet {
				for _, o := range recs {
					fmt.Fprintf(out, "  out-of-band %s: agrees\n", o)
				}
			}
			if recs, err := c.CheckCM(f); err != nil {
				fmt.Fprintf(out, "  %v\n", err)
				failed++
				continue
			} else if !rf.quiet {
				for _, r := range recs {
					fmt.Fprintf(out, "  rdma_cm %s: agrees\n", r)
				}
			}
			opt := replay.Options{Strict: rf.strict, ResponderOnly: rf.responderOnly}
			if f.Lossy() {
				if f.Responder() != host {
					fmt.Fprintf(out, "  skipped: the flow has loss, so the requester's messages cannot be rebuilt; replay its responder\n")
					continue
				}
				opt.ResponderOnly = true
				fmt.Fprintf(out, "  the flow has loss: replaying the responder only\n")
			}
			if !rf.quiet {
				opt.OnMatch = func(m replay.Match) { fmt.Fprintf(out, "  ok %s\n", m.Captured) }
			}
			r, err := replay.Run(f, h, opt)
			if err != nil {
				fmt.Fprintf(out, "  cannot replay: %v\n", err)
				continue
			}
			replayed++
			if !rf.quiet {
				for _, n := range r.Notes {
					fmt.Fprintf(out, "  inferred from the capture: %s\n", n)
				}
				for _, u := range r.Uncaptured {
					where := "after the last captured response"
					if u.Before != nil {
						where = fmt.Sprintf("before frame %d", u.Before.No)
					}
					fmt.Fprintf(out, "  not captured (lost before the capture point), %s: %s\n", where, replay.DescribeFrame(u.Ours))
				}
			}
			fmt.Fprintf(out, "  %d packets matched, %d frames fed", r.Matched, r.Fed)
			if r.Skipped > 0 {
				fmt.Fprintf(out, ", %d requests of the host not compared", r.Skipped)
			}
			if len(r.Uncaptured) > 0 {
				fmt.Fprintf(out, ", %d responses not in the capture", len(r.Uncaptured))
			}
			if r.AppWrites > 0 {
				fmt.Fprintf(out, ", %d bytes changed by the host's application between reads", r.AppWrites)
			}
			fmt.Fprintln(out)
			if err := r.Err(); err != nil {
				failed++
				var d *replay.Difference
				if errors.As(err, &d) {
					fmt.Fprintf(out, "  DIFFERENCE: %s\n", strings.ReplaceAll(d.Error(), "\n", "\n  "))
				} else {
					for _, p := range r.Problems {
						fmt.Fprintf(out, "  DIFFERENCE: %s\n", p)
					}
				}
			}
		}
	}
	switch {
	case failed > 0:
		fmt.Fprintf(out, "%s: %d of %d replays differ\n", c.Name, failed, replayed)
		return exitError{code: exitFailed}
	case replayed == 0:
		return exitError{exitTrouble, fmt.Errorf("%s: nothing could be replayed", c.Name)}
	}
	fmt.Fprintf(out, "%s: %d replays, softroce matches the capture\n", c.Name, replayed)
	return nil
}
