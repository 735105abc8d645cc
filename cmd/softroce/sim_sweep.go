package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/sim"
	"github.com/softroce/softroce/sim/sweep"
)

func newSimSweepCmd() *cobra.Command {
	var (
		seeds   string
		params  []string
		workers int
		out     string
		shard   string
	)
	cmd := &cobra.Command{
		Use:   "sweep FILE",
		Short: "Run a scenario over seeds and parameter values on every core, and tabulate",
		Long: `sweep runs the scenario in FILE once per seed (--seeds N for 1..N, or A-B)
and per combination of the --param values (congestion-control parameters
under their mlx5 names, as --cc takes them: --param rp_ai_rate=5,20,40), on
--workers cores, writes each run's outcome.json under --out, and prints a
table: per combination, how many seeds held their invariants and the mean
(min..max) of goodput, deepest queue, CNPs, PFC pauses, drops and FCT
slowdown.

--shard I/N runs only the runs I, I+N, I+2N, ... (I from 0), so that N
machines share a sweep: for example the pods of a Kubernetes Indexed Job,
each with --shard $JOB_COMPLETION_INDEX/N and its own --out; 'softroce sim
merge DIR...' then tabulates their outputs together.

Exit status: 0 when every run held its invariants, 1 when one did not.`,
		Example: `  softroce sim sweep testdata/scenarios/dcqcn-convergence.json --seeds 8 --param rp_ai_rate=5,20 --out /tmp/sweep
  softroce sim sweep testdata/scenarios/fat-tree-websearch.json --seeds 1-16 --shard 0/4 --out /tmp/shard0
  softroce sim merge /tmp/shard0 /tmp/shard1 /tmp/shard2 /tmp/shard3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := sim.Load(args[0])
			if err != nil {
				return exitError{exitTrouble, err}
			}
			ss, err := sweep.ParseSeeds(seeds)
			if err != nil {
				return exitError{exitTrouble, fmt.Errorf("--seeds: %w", err)}
			}
			var ps []sweep.Param
			for _, p := range params {
				x, err := sweep.ParseParam(p)
				if err != nil {
					return exitError{exitTrouble, fmt.Errorf("--param: %w", err)}
				}
				ps = append(ps, x)
			}
			i, n, err := parseShard(shard)
			if err != nil {
				return exitError{exitTrouble, err}
			}
			jobs, err := sweep.Jobs(ss, ps, i, n)
			if err != nil {
				return exitError{exitTrouble, err}
			}
			errOut := cmd.ErrOrStderr()
			done := 0
			outs, err := sweep.Run(sc, jobs, workers, out, func(o sweep.Outcome) {
				done++
				state := "ok"
				switch {
				case o.Error != "":
					state = "error: " + o.Error
				case !o.OK:
					state = "FAILED"
				}
				fmt.Fprintf(errOut, "[%d/%d] %s: %s\n", done, len(jobs), o.Name(), state)
			})
			if err != nil {
				return exitError{exitTrouble, err}
			}
			fmt.Fprint(cmd.OutOrStdout(), sweep.Merge(outs))
			return sweepStatus(outs)
		},
	}
	cmd.Flags().StringVar(&seeds, "seeds", "4", "seeds: N for 1..N, or A-B")
	cmd.Flags().StringArrayVar(&params, "param", nil, "a congestion parameter and its values, NAME=V1,V2,... (repeatable: every combination runs)")
	cmd.Flags().IntVar(&workers, "workers", runtime.NumCPU(), "runs at once")
	cmd.Flags().StringVar(&out, "out", "", "directory for each run's outcome.json (for 'sim merge')")
	cmd.Flags().StringVar(&shard, "shard", "0/1", "run only this machine's share I/N of the runs")
	return cmd
}

func newSimMergeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "merge DIR...",
		Short: "Tabulate the outcomes that sweeps (or their shards) wrote",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			outs, err := sweep.Load(args...)
			if err != nil {
				return exitError{exitTrouble, err}
			}
			if len(outs) == 0 {
				return exitError{exitTrouble, fmt.Errorf("no outcome.json under %s: give the --out directories of sweeps", strings.Join(args, ", "))}
			}
			fmt.Fprint(cmd.OutOrStdout(), sweep.Merge(outs))
			return sweepStatus(outs)
		},
	}
}

func sweepStatus(outs []sweep.Outcome) error {
	for _, o := range outs {
		if o.Error != "" {
			return exitError{exitTrouble, fmt.Errorf("run %s: %s", o.Name(), o.Error)}
		}
	}
	for _, o := range outs {
		if !o.OK {
			return exitError{exitFailed, fmt.Errorf("run %s: invariants failed:\n%s", o.Name(), o.Failures)}
		}
	}
	return nil
}

// parseShard reads "I/N".
func parseShard(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("--shard %q: want I/N with 0 <= I < N", s)
	}
	return i, n, nil
}
