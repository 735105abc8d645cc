package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/softroce/softroce/replay"
)

// runConformance replays every flow of every capture in paths (files, or
// directories of *.pcap and *.pcapng) from both sides, or from the
// responder where the flow shows loss, and prints one line per capture,
// flow and side: the verdict a conformance run needs, and an exit status
// for CI.
func runConformance(out io.Writer, paths []string, strict bool) error {
	files, err := captureFiles(paths)
	if err != nil {
		return exitError{exitTrouble, err}
	}
	matched, differ, trouble := 0, 0, 0
	for _, path := range files {
		c, err := replay.Load(path)
		if err != nil {
			fmt.Fprintf(out, "%s: not replayable: %v\n", path, err)
			trouble++
			continue
		}
		flows := c.Flows()
		if len(flows) == 0 {
			fmt.Fprintf(out, "%s: not replayable: no RC, UC or UD QP pair\n", path)
			trouble++
			continue
		}
		for i, f := range flows {
			for _, host := range []replay.Side{f.A, f.B} {
				opt := replay.Options{Strict: strict}
				label := fmt.Sprintf("%s flow %d (%s %s <-> %s) as %s", path, i+1, f.Type, f.A, f.B, host.Addr)
				if f.Lossy() {
					if host != f.Responder() {
						fmt.Fprintf(out, "%s: not replayable: the flow has loss, so only its responder can be\n", label)
						continue
					}
					opt.ResponderOnly = true
				}
				if _, err := c.CheckOOB(f); err != nil {
					fmt.Fprintf(out, "%s: differs: out-of-band: %v\n", label, err)
					differ++
					continue
				}
				if _, err := c.CheckCM(f); err != nil {
					fmt.Fprintf(out, "%s: differs: %v\n", label, err)
					differ++
					continue
				}
				r, err := replay.Run(f, host.Addr, opt)
				switch {
				case err != nil:
					fmt.Fprintf(out, "%s: not replayable: %v\n", label, err)
					trouble++
				case r.OK():
					fmt.Fprintf(out, "%s: matched, %d packets\n", label, r.Matched)
					matched++
				case r.Diff != nil:
					fmt.Fprintf(out, "%s: differs: %s\n", label, diffSummary(r.Diff))
					differ++
				default:
					fmt.Fprintf(out, "%s: differs: %s\n", label, r.Problems[0])
					differ++
				}
			}
		}
	}
	fmt.Fprintf(out, "%d captures: %d replays matched, %d differ, %d not replayable\n", len(files), matched, differ, trouble)
	// A capture with nothing to replay (an ARP sniff) is reported, not
	// failed; a difference fails, and so does a run that matched nothing.
	switch {
	case differ > 0:
		return exitError{code: exitFailed}
	case matched == 0:
		return exitError{code: exitTrouble}
	}
	return nil
}

// captureFiles expands directories to the capture files in them, sorted.
func captureFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		var in []string
		for _, pat := range []string{"*.pcap", "*.pcapng"} {
			m, _ := filepath.Glob(filepath.Join(p, pat))
			in = append(in, m...)
		}
		sort.Strings(in)
		files = append(files, in...)
	}
	return files, nil
}

// diffSummary is a difference in one line: where, and its first problem.
func diffSummary(d *replay.Difference) string {
	where := "after the capture's last packet"
	if d.Captured != nil {
		where = fmt.Sprintf("at frame %d", d.Captured.No)
	}
	what := "the packets differ"
	if len(d.Problems) > 0 {
		what = d.Problems[0]
	}
	return where + ": " + what
}
