package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/softroce/softroce/sim"
	"github.com/softroce/softroce/sim/netsim"
	simreport "github.com/softroce/softroce/sim/report"
	"github.com/spf13/cobra"
)

func init() { register(newSimCmd) }

func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run deterministic simulations of softroce devices on a simulated network",
		Long: `sim runs real softroce devices on a simulated network, on virtual time, under a
scenario's topology, faults and workloads, and checks transport invariants
(integrity, exactly-once in-order RC delivery, a reference model of remote
memory for WRITE/READ/atomics, completion order and status, liveness after
faults heal, counters against the trace). A run is a pure function of the
scenario and the seed: the same seed gives byte-identical captures and event
logs. Scenario format: see the documentation of package sim.`,
	}
	cmd.AddCommand(newSimRunCmd(), newSimFuzzCmd(), newSimGenCmd(), newSimSweepCmd(), newSimMergeCmd())
	return cmd
}

func newSimRunCmd() *cobra.Command {
	var (
		seed    uint64
		pcap    string
		logPath string
		asJSON  bool
		report  string
		every   time.Duration
		hpccFCT string
		cpuProf string
	)
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run one scenario file with a seed",
		Long: `run runs the scenario in FILE (JSON) with --seed and prints a summary, or with
--json the full result. --pcap writes a pcapng capture of every frame on
every link direction (delivered or dropped, with a comment naming the link
and what the fault model did), stamped with virtual time from the epoch.
--log writes the event log whose SHA-256 the result reports. --report DIR
samples the run every --interval of virtual time and writes result.json,
per-flow throughput and rate (flows.csv), queue depths (queues.csv), a
summary and plots (PNG) into DIR; with a flows workload, FCTs (fct.csv,
fct.txt in the HPCC simulator's format, fct.png), and with --compare-fct
FILE the slowdown by size group beside that HPCC run's. --cpuprofile
writes a CPU profile of the run (Go's pprof format; bench/pgo.sh makes the
binary's own profile-guided optimization from such profiles).

Exit status: 0 when every invariant holds, 1 when one fails, 2 when the
scenario cannot run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := sim.Load(args[0])
			if err != nil {
				return exitError{exitTrouble, err}
			}
			var opt sim.Options
			var closers []io.Closer
			defer func() {
				for _, c := range closers {
					c.Close()
				}
			}()
			open := func(path string) (io.Writer, error) {
				f, err := os.Create(path)
				if err != nil {
					return nil, err
				}
				closers = append(closers, f)
				return f, nil
			}
			if pcap != "" {
				if opt.Pcap, err = open(pcap); err != nil {
					return exitError{exitTrouble, err}
				}
			}
			if logPath != "" {
				if opt.Log, err = open(logPath); err != nil {
					return exitError{exitTrouble, err}
				}
			}
			if report != "" {
				if every <= 0 {
					return exitError{exitTrouble, fmt.Errorf("--interval %s: must be positive", every)}
				}
				opt.Report = netsim.Time(every)
			}
			if cpuProf != "" {
				f, err := open(cpuProf)
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					return exitError{exitTrouble, fmt.Errorf("--cpuprofile: %w", err)}
				}
			}
			res, err := sim.RunWith(sc, seed, opt)
			if cpuProf != "" {
				pprof.StopCPUProfile()
			}
			if err != nil {
				return exitError{exitTrouble, err}
			}
			if report != "" {
				if err := simreport.Write(report, res); err != nil {
					return exitError{exitTrouble, err}
				}
				if hpccFCT != "" {
					ref, err := simreport.ReadHPCCFCT(hpccFCT)
					if err == nil {
						err = simreport.WriteComparison(report, res, "HPCC ns-3", ref)
					}
					if err != nil {
						return exitError{exitTrouble, err}
					}
				}
			}
			for _, c := range closers {
				if err := c.Close(); err != nil {
					return exitError{exitTrouble, err}
				}
			}
			closers = nil
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return exitError{exitTrouble, err}
				}
			} else {
				fmt.Fprint(out, res.Summary())
			}
			if !res.OK() {
				return exitError{exitFailed, fmt.Errorf("scenario %s seed %d: invariants failed:\n%s", sc.Name, seed, res.Failures())}
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of every random choice in the run")
	cmd.Flags().StringVar(&pcap, "pcap", "", "write a pcapng capture of every frame to this file")
	cmd.Flags().StringVar(&logPath, "log", "", "write the event log to this file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the full result as JSON")
	cmd.Flags().StringVar(&report, "report", "", "write time series, CSVs, plots and a summary into this directory")
	cmd.Flags().DurationVar(&every, "interval", 100*time.Microsecond, "sampling period of --report, in virtual time")
	cmd.Flags().StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile of the run (pprof format) to this file")
	cmd.Flags().StringVar(&hpccFCT, "compare-fct", "", "with --report: the HPCC ns-3 simulator's fct.txt for the same flows, set beside this run's in fct-compare.png and .txt")
	return cmd
}

func newSimFuzzCmd() *cobra.Command {
	var (
		seeds    int
		from     uint64
		workers  int
		verbose  bool
		asJSON   bool
		progress string
		parallel bool
	)
	cmd := &cobra.Command{
		Use:   "fuzz",
		Short: "Run randomly generated scenarios, VOPR-style",
		Long: `fuzz runs --seeds generated scenarios, seeds --from, --from+1, ...: each seed
draws a topology, a fault mix (rates up to 30%) and workloads (see 'sim gen'),
runs it with every invariant, and reports the seeds that fail with the
command that replays each. Runs are spread over --workers (default: the
number of CPUs); each run is single-threaded and deterministic.

Exit status: 0 when every seed passes, 1 when one fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			bar := newProgress(cmd.ErrOrStderr(), seeds, progress)
			each := func(seed uint64, res *sim.Result, err error) {
				bar.step(err != nil || (res != nil && !res.OK()))
				if !verbose {
					return
				}
				switch {
				case err != nil:
					fmt.Fprintf(out, "seed %d: error: %v\n", seed, err)
				default:
					fmt.Fprint(out, res.Summary())
				}
			}
			rep := sim.FuzzOpts(seeds, from, sim.FuzzOptions{Workers: workers, Parallel: parallel, Each: each})
			bar.done()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return exitError{exitTrouble, err}
				}
			} else {
				fmt.Fprintf(out, "%d runs, %d events, %d frames, %d failed\n", rep.Runs, rep.Events, rep.Frames, len(rep.Failures))
				for _, f := range rep.Failures {
					fmt.Fprintf(out, "FAIL seed %d: reproduce with: %s\n%s%s", f.Seed, f.Command, f.Error, f.Failures)
				}
			}
			if len(rep.Failures) > 0 {
				return exitError{exitFailed, nil}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&seeds, "seeds", 100, "how many seeds to run")
	cmd.Flags().Uint64Var(&from, "from", 1, "first seed")
	cmd.Flags().IntVar(&workers, "workers", runtime.NumCPU(), "parallel runs")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every run's summary")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), on or off")
	cmd.Flags().BoolVar(&parallel, "parallel", false, "run the scenarios that can run parallel (hosts on a switch, no timed faults or partitions) on two shards")
	return cmd
}

func newSimGenCmd() *cobra.Command {
	var (
		seed     uint64
		parallel bool
	)
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Print the scenario fuzz generates for a seed",
		Long: `gen prints, as a scenario file, the scenario 'sim fuzz' runs for --seed, to
save, edit and run with 'sim run FILE --seed N' (the same seed gives the
same run).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gen := sim.Generate
			if parallel {
				gen = sim.GenerateParallel
			}
			b, err := sim.MarshalScenario(gen(seed))
			if err != nil {
				return exitError{exitTrouble, err}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	}
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed")
	cmd.Flags().BoolVar(&parallel, "parallel", false, "the scenario 'sim fuzz --parallel' runs")
	return cmd
}
