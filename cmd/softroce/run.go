package main

// run.go: `softroce run -- PROGRAM ARGS`, running an unmodified verbs
// program on a softroce device through the drop-in libibverbs.so.1.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/dropin"
)

func init() { register(newRunCmd) }

func newRunCmd() *cobra.Command {
	var (
		socket string
		lib    string
		name   string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- PROGRAM [ARGS...]",
		Short: "Run an unmodified libibverbs program on a softroce device",
		Long: `run runs PROGRAM with softroce's drop-in libibverbs.so.1 in place of the
system's, talking to a softroce daemon. If a daemon answers on the socket
(--socket, $SOFTROCE_SOCKET, $XDG_RUNTIME_DIR/softroce.sock or
/tmp/softroce-UID.sock) run uses it and the link flags are ignored; otherwise
run starts a device on the link the flags describe, serves it on a private
socket for as long as PROGRAM runs, and closes it afterwards.

run finds the library with --lib, else $SOFTROCE_LIBDIR, else in a
libibverbs/ directory next to the softroce binary, else in dropin/libibverbs/
of the source checkout holding the current directory; in a checkout it runs
make there first (gcc and libibverbs-dev), so the library is always built
from the current sources.

run is equivalent to starting 'softroce daemon' and running
  SOFTROCE_SOCKET=SOCKET LD_LIBRARY_PATH=LIBDIR PROGRAM ARGS
It exits with PROGRAM's status.`,
		Example: `  softroce run -- ibv_devices
  softroce run --link udp --addr 127.0.0.2 -- ibv_devinfo -v`,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().StringVar(&socket, "socket", "", "daemon socket (default: see above)")
	cmd.Flags().StringVar(&lib, "lib", "", "directory holding the built libibverbs.so.1 (default: see above)")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name, when run starts the device")
	// Flags after PROGRAM are PROGRAM's, with or without "--".
	cmd.Flags().SetInterspersed(false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError{errNoProgram}
		}
		libDir, err := dropin.FindLib(lib)
		if err != nil {
			return exitError{exitTrouble, err}
		}
		sock := dropin.SocketPath(socket)
		if !dropin.Answers(sock) {
			dir, err := os.MkdirTemp("", "softroce-run-")
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer os.RemoveAll(dir)
			sock = filepath.Join(dir, "softroce.sock")
			stop, _, err := serveDevice(*lf, name, sock, cmd.ErrOrStderr())
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer stop()
		}
		prog := exec.Command(args[0], args[1:]...)
		prog.Stdin = os.Stdin
		prog.Stdout = cmd.OutOrStdout()
		prog.Stderr = cmd.ErrOrStderr()
		prog.Env = dropin.Env(os.Environ(), libDir, sock)
		err = prog.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return exitError{code: ee.ExitCode()}
		case err != nil:
			return exitError{exitTrouble, fmt.Errorf("run %s: %w", args[0], err)}
		}
		return nil
	}
	return cmd
}

var errNoProgram = errors.New("no program to run: softroce run [flags] -- PROGRAM [ARGS]")
