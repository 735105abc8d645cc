package main

// daemon.go: `softroce daemon`, a dropin.Server on a device the link flags
// describe, until interrupted.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/dropin"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newDaemonCmd) }

func newDaemonCmd() *cobra.Command {
	var (
		socket   string
		name     string
		idle     time.Duration
		nice     int
		realtime int
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Serve a softroce device to programs using the drop-in libibverbs.so.1",
		Long: `daemon starts a softroce device on the link the flags describe and serves it,
on a Unix socket, to programs linked against libibverbs.so.1 that run with
softroce's drop-in library (dropin/libibverbs, see 'softroce run'). It runs
until interrupted.

Each connection to the socket is one ibv_context of a program: the objects it
creates (PDs, MRs, CQs, QPs, SRQs, AHs, completion channels) are its own, and
when the program exits or crashes the daemon destroys whatever it left. Memory
regions are shared, not copied: the library backs registered memory with
memfds that the daemon maps too, so RDMA reads, writes and atomics act on the
program's own pages. Refused requests and dropped programs are logged to
stderr, rate-limited.

The socket is --socket, else $SOFTROCE_SOCKET, else $XDG_RUNTIME_DIR/softroce.sock,
else /tmp/softroce-UID/softroce.sock: the rule the library follows too.
That directory is made private to the user (mode 0700); if another user
created it first, the daemon names them and refuses to serve there.

The daemon does a NIC's work, which the kernel does ahead of user threads:
it raises its nice value to --nice (default -5) where it may (root,
CAP_SYS_NICE or RLIMIT_NICE), and on a udp or tap link, while its device
moves data in bulk (more than 250,000 packets a second), it runs its threads
under the real-time policy SCHED_RR at --realtime (default 1, the lowest)
where it may (RLIMIT_RTPRIO), so that programs spinning on their completion
queues give way the moment it has work; on the mem link only when
--realtime is given, on a machine of one CPU always. Elsewhere it runs at
the priority it was started with, and says so only when --nice or
--realtime was given. --realtime 0 keeps it an ordinary process, as does
--ring-spin (a poller spinning at real-time priority would keep the
programs it waits for off the CPU).`,
		Example: `  softroce daemon --link udp --addr 127.0.0.2
  LD_LIBRARY_PATH=$PWD/dropin/libibverbs ibv_devinfo -v`,
		Args: cobra.NoArgs,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket to serve (default: see above)")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name")
	cmd.Flags().DurationVar(&idle, "idle-exit", 0, "exit once no program has used the device for this long (0: run until interrupted)")
	cmd.Flags().IntVar(&nice, "nice", dropin.DefaultNice, "scheduling priority (nice value, -20..19) the daemon raises itself to where it may")
	cmd.Flags().IntVar(&realtime, "realtime", dropin.DefaultRealtime, "SCHED_RR priority (1..99) the daemon's threads take while the device moves bulk data, where they may; 0: never")
	var lim daemonLimits
	cmd.Flags().Int64Var(&lim.progQueueMiB, "max-program-queue-mem", dropin.DefaultMaxConnQueueBytes>>20,
		"MiB of queue memory (QPs, SRQs, CQs) one program may hold; beyond it creating one fails with ENOMEM")
	cmd.Flags().Int64Var(&lim.queueMiB, "max-queue-mem", dropin.DefaultMaxQueueBytes>>20,
		"MiB of queue memory all programs together may hold")
	cmd.Flags().IntVar(&lim.conns, "max-conns", dropin.DefaultMaxConns, "programs' connections served at once")
	cmd.Flags().Int64Var(&lim.progMRMaps, "max-program-mr-maps", dropin.DefaultMaxConnMRMaps,
		"memory mappings one program's registered regions may take in the daemon (about one per region)")
	cmd.Flags().DurationVar(&lim.ringSpin, "ring-spin", 0,
		"how long a program's ring poller keeps looking for posts before it sleeps (0: sleep at once, best on a 2-core machine)")
	cmd.Flags().Int64Var(&lim.mrMaps, "max-mr-maps", 0,
		"memory mappings all programs' regions may take (0: the kernel's vm.max_map_count less 8192)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if nice < -20 || nice > 19 {
			return exitError{exitTrouble, fmt.Errorf("--nice %d: a nice value runs from -20 to 19", nice)}
		}
		if realtime < 0 || realtime > 99 {
			return exitError{exitTrouble, fmt.Errorf("--realtime %d: a SCHED_RR priority runs from 1 to 99 (0: none)", realtime)}
		}
		if lim.ringSpin > 0 && realtime > 0 {
			if cmd.Flags().Changed("realtime") {
				return exitError{exitTrouble, fmt.Errorf("--realtime %d with --ring-spin %v: a poller spinning at real-time priority keeps the programs it waits for off the CPU; give --realtime 0", realtime, lim.ringSpin)}
			}
			realtime = 0
		}
		rt := setPriority(cmd, realtime, nice)
		srv, stop, path, err := serveDevice(*lf, name, dropin.SocketPath(socket), cmd.ErrOrStderr(), lim)
		if err != nil {
			return exitError{exitTrouble, err}
		}
		if rt {
			realtimePlan(srv.Device.RXE(), lf.Link, realtime, nice, cmd.Flags().Changed("realtime"))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "softroce daemon: %s on %s\n", name, path)
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		waitIdle(sig, srv, idle)
		signal.Stop(sig)
		if err := stop(); err != nil {
			return exitError{exitTrouble, err}
		}
		return nil
	}
	return cmd
}

// setPriority raises this process's threads to nice where it may and
// reports whether the real-time policy is allowed too, trying it once (the
// right to it does not change later) and leaving the threads under the
// ordinary one; it says why not when the user asked for either.
func setPriority(cmd *cobra.Command, realtime, nice int) (rt bool) {
	niceErr := dropin.SetNice(nice)
	if realtime > 0 {
		err := dropin.SetRealtime(realtime)
		if err == nil {
			return dropin.SetNormal(nice) == nil
		}
		if cmd.Flags().Changed("realtime") {
			fmt.Fprintf(cmd.ErrOrStderr(), "softroce daemon: no real-time priority: %v (it needs root, CAP_SYS_NICE or RLIMIT_RTPRIO)\n", err)
		}
	}
	if niceErr != nil && (cmd.Flags().Changed("nice") || cmd.Flags().Changed("realtime")) {
		fmt.Fprintf(cmd.ErrOrStderr(), "softroce daemon: runs at its inherited priority: %v (raising it needs root, CAP_SYS_NICE or RLIMIT_NICE)\n", niceErr)
	}
	return false
}

// realtimePlan decides when a process serving dev on link, allowed the
// real-time policy, takes it: always on a machine of one CPU (the device
// and a program spinning on its CQ share it, and the device gets it only by
// preempting: Debian's ib_write_bw between two one-CPU QEMU guests went
// from 17 to 28 MB/s, 0.56 to 0.95 of kernel rxe's, 2026-11-27); elsewhere
// while the device moves bulk data (boost), except on the mem link unless
// asked (asked): there both ends are programs of one process, and the
// policy gave their bulk transfers nothing measurable and cost UCX's
// latency-bound tests (dropin.Boost).
func realtimePlan(dev *rxe.Device, link string, realtime, nice int, asked bool) {
	switch {
	case runtime.NumCPU() == 1:
		dropin.SetRealtime(realtime)
	case link != "mem" || asked:
		go boost(dev, realtime, nice)
	}
}

// boost runs for the process's life: it moves the threads between SCHED_RR
// at realtime and their nice value as dropin.DefaultBoost decides from the
// device's packet rate, measured every boostEvery (threads started
// meanwhile inherit the policy of the thread that starts them).
func boost(dev *rxe.Device, realtime, nice int) {
	b := dropin.DefaultBoost
	packets := func() uint64 { c := dev.Counters(); return c.SentPkts + c.RcvdPkts }
	b.Run(time.Tick(boostEvery), packets, func(on bool) {
		if on {
			dropin.SetRealtime(realtime)
		} else {
			dropin.SetNormal(nice)
		}
	})
}

// boostEvery is how often the daemon measures its packet rate for boost.
const boostEvery = 50 * time.Millisecond

// waitIdle returns on a signal, or once srv has served no program for idle
// (when idle > 0).
func waitIdle(sig <-chan os.Signal, srv *dropin.Server, idle time.Duration) {
	if idle <= 0 {
		<-sig
		return
	}
	tick := time.NewTicker(min(idle/4+time.Millisecond, time.Second))
	defer tick.Stop()
	busy := time.Now()
	for {
		select {
		case <-sig:
			return
		case now := <-tick.C:
			if srv.Conns() > 0 {
				busy = now
			} else if now.Sub(busy) >= idle {
				return
			}
		}
	}
}

// serveDevice starts the device the flags describe and a dropin.Server for
// it on the socket path, logging to logw. stop closes the server, then the
// device.
// daemonLimits are the daemon's caps on what programs may take (0: the
// dropin defaults).
type daemonLimits struct {
	progQueueMiB, queueMiB int64
	progMRMaps, mrMaps     int64
	conns                  int
	ringSpin               time.Duration
}

func serveDevice(lf linkFlags, name, path string, logw io.Writer, lim daemonLimits) (srv *dropin.Server, stop func() error, _ string, err error) {
	cfg, err := lf.config()
	if err != nil {
		return nil, nil, "", fmt.Errorf("open %s: %w", name, err)
	}
	dev, err := verbsapi.NewDevice(name, cfg)
	if err != nil {
		return nil, nil, "", flagError(err, cfg)
	}
	ln, err := dropin.Listen(path)
	if err != nil {
		dev.Close()
		return nil, nil, "", err
	}
	srv = &dropin.Server{Device: dev, Logf: func(format string, args ...any) {
		fmt.Fprintf(logw, "softroce daemon: "+format+"\n", args...)
	}, MaxConnQueueBytes: lim.progQueueMiB << 20, MaxQueueBytes: lim.queueMiB << 20, MaxConns: lim.conns, RingSpin: lim.ringSpin,
		MaxConnMRMaps: lim.progMRMaps, MaxMRMaps: lim.mrMaps}
	sys := dropin.SysfsDir(path)
	if err := dropin.WriteSysfs(sys, dev); err != nil {
		srv.Logf("%v; programs that read /sys/class/infiniband will not find %s", err, name)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return srv, func() error {
		srv.Close()
		<-done
		// Programs' connections end with them; let the peers hear the
		// last DREPs and timewaits run out, as after a kernel's.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = dev.DrainCM(ctx)
		_ = os.RemoveAll(sys)
		return dev.Close()
	}, path, nil
}
