package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/replay"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/verbsapi"
)

// runReplaySend sends one side's frames of the capture to a live peer
// (softroce replay --to).
func runReplaySend(cmd *cobra.Command, c *replay.Capture, rf *replayFlags) error {
	out := cmd.OutOrStdout()
	flows := c.Flows()
	if len(flows) == 0 {
		return exitError{exitTrouble, fmt.Errorf("%s: no RC, UC or UD QP pair in the capture", c.Name)}
	}
	side, err := resolveSide(rf.side, flows)
	if err != nil {
		return usageError{fmt.Errorf("--side %w", err)}
	}
	to, err := netip.ParseAddr(rf.to)
	if err != nil {
		return usageError{fmt.Errorf("--to %q: want an IP address", rf.to)}
	}
	to = to.Unmap()
	lf := rf.link
	ap, err := parseAddr(lf.Addr)
	if err != nil {
		return usageError{err}
	}
	if ap.Addr().Is4() != to.Is4() {
		return usageError{fmt.Errorf("--addr %s and --to %s are not of one IP family", ap.Addr(), to)}
	}
	var frames []*replay.Frame
	for _, f := range c.Frames {
		if f.Src == side {
			frames = append(frames, f)
		}
	}
	if len(frames) == 0 {
		return exitError{exitTrouble, fmt.Errorf("%s: %s sent no RoCE frames", c.Name, side)}
	}

	mtu := orDefault(lf.MTU, verbsapi.DefaultMTU)
	var closeLink func() error
	defer func() {
		if closeLink != nil {
			closeLink()
		}
	}()
	var l link.Link
	var tap *link.TAP
	switch lf.Link {
	case "udp":
		u, err := link.ListenUDP(link.UDPOptions{Addr: ap, PeerPort: lf.PeerPort, MTU: mtu})
		if err != nil {
			return exitError{exitTrouble, err}
		}
		l = u
	case "tap":
		if !ap.Addr().Is4() {
			return usageError{fmt.Errorf("--addr %s: a tap link needs an IPv4 address", ap.Addr())}
		}
		t, err := link.OpenTAP(link.TAPOptions{Name: lf.Tap, IPv4: ap.Addr(), MTU: mtu})
		if err != nil {
			return exitError{exitTrouble, err}
		}
		l, tap = t, t
	default:
		return usageError{fmt.Errorf("--link %q: replay --to needs udp or tap", lf.Link)}
	}
	cfg, err := lf.config()
	if err != nil {
		l.Close()
		return usageError{err}
	}
	l, closeCapture, err := cfg.Middleware(l, "replay")
	if err != nil {
		return exitError{exitTrouble, err}
	}
	closeLink = func() error {
		errLink := l.Close()
		if err := closeCapture(); err != nil {
			return err
		}
		return errLink
	}

	rw := replay.Rewrite{Src: ap.Addr(), Dst: to, SrcMAC: l.MAC()}
	if port, ok := link.FixedSourcePort(l); ok {
		rw.SrcPort, rw.ZeroIPID = port, true
	}
	fmt.Fprintf(out, "sending %d frames of %s from %s to %s over %s", len(frames), side, ap.Addr(), to, lf.Link)
	if rf.fast {
		fmt.Fprintln(out, ", fast")
	} else {
		fmt.Fprintf(out, ", at the captured pace (%v)\n", (frames[len(frames)-1].Time - frames[0].Time).Round(time.Microsecond))
	}
	start := time.Now()
	one := make([]link.Frame, 1)
	var buf []byte
	for i, f := range frames {
		if buf, err = rw.Apply(buf[:0], f); err != nil {
			return exitError{exitTrouble, err}
		}
		if !rf.fast {
			if d := time.Until(start.Add(f.Time - frames[0].Time)); d > 0 {
				time.Sleep(d)
			}
		}
		one[0] = link.Frame{Data: buf}
		if _, err := l.Send(one); err != nil {
			return exitError{exitTrouble, fmt.Errorf("send frame %d: %w", f.No, err)}
		}
		if i == 0 && tap != nil {
			// Let the link resolve the peer's MAC before the rest: it
			// holds a bounded number of bytes per unresolved peer.
			waitTAP(tap, 1)
		}
		if !rf.quiet {
			fmt.Fprintf(out, "  sent %s\n", f)
		}
	}
	if tap != nil {
		waitTAP(tap, uint64(len(frames)))
	}
	fmt.Fprintf(out, "sent %d frames\n", len(frames))
	counters := link.Counters(l)
	closeFn := closeLink
	closeLink = nil
	if err := closeFn(); err != nil {
		return exitError{exitTrouble, err}
	}
	dropped := uint64(0)
	for _, ct := range counters {
		if ct.Value != 0 && isDropCounter(ct.Name) {
			fmt.Fprintf(out, "  link counter %s: %d\n", ct.Name, ct.Value)
			dropped += ct.Value
		}
	}
	if dropped > 0 {
		return exitError{exitFailed, fmt.Errorf("the link dropped or refused %d frames", dropped)}
	}
	return nil
}

// isDropCounter tells the link counters that count frames the link failed
// to send (faults injected on purpose are not failures).
func isDropCounter(name string) bool {
	switch name {
	case "udp_tx_oversize", "udp_tx_bad_frame", "udp_tx_mismatch", "udp_tx_errors",
		"tap_tx_oversize", "tap_tx_bad_frame", "tap_tx_resolve_drop", "tap_tx_queue_drop", "tap_tx_errors":
		return true
	}
	return false
}

// waitTAP waits, up to the TAP link's neighbour resolution time, until it has
// written or dropped n RoCE frames: frames to a peer whose MAC is not known
// yet wait in the link, and closing it would discard them.
func waitTAP(t *link.TAP, n uint64) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		s := t.Stats()
		nd := s.ARPRequests + s.ARPReplies + s.NDPSolicits + s.NDPAdverts
		done := s.TxOversize + s.TxBadFrame + s.TxResolveDrop + s.TxQueueDrop + s.TxErrors
		if s.TxFrames >= nd && s.TxFrames-nd+done >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
