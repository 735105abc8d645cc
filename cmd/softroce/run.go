package main

// run.go: `softroce run -- PROGRAM ARGS`, running an unmodified verbs
// program on a softroce device through the drop-in libibverbs.so.1.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
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
libibverbs/ directory next to the softroce binary or in the current directory
or one of its parents; in a source checkout it runs make there first (gcc and
libibverbs-dev), so the library is always built from the current sources.

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
		libDir, err := findLibDir(lib)
		if err != nil {
			return exitError{exitTrouble, err}
		}
		sock := defaultSocket(socket)
		if !daemonAnswers(sock) {
			dir, err := os.MkdirTemp("", "softroce-run-")
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer os.RemoveAll(dir)
			sock = filepath.Join(dir, "softroce.sock")
			d, err := startDaemon(*lf, name, sock)
			if err != nil {
				return exitError{exitTrouble, err}
			}
			defer d.Close()
		}
		prog := exec.Command(args[0], args[1:]...)
		prog.Stdin = os.Stdin
		prog.Stdout = cmd.OutOrStdout()
		prog.Stderr = cmd.ErrOrStderr()
		prog.Env = append(os.Environ(), "SOFTROCE_SOCKET="+sock,
			"LD_LIBRARY_PATH="+joinPath(libDir, os.Getenv("LD_LIBRARY_PATH")))
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

func joinPath(dir, rest string) string {
	if rest == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + rest
}

// daemonAnswers reports whether something accepts connections on path.
func daemonAnswers(path string) bool {
	c, err := net.Dial("unix", path)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// findLibDir locates the directory of the built libibverbs.so.1.
func findLibDir(flag string) (string, error) {
	const so = "libibverbs.so.1"
	if flag == "" {
		flag = os.Getenv("SOFTROCE_LIBDIR")
	}
	if flag != "" {
		if _, err := os.Stat(filepath.Join(flag, so)); err != nil {
			return "", fmt.Errorf("--lib %s: %w (build it with make -C libibverbs)", flag, err)
		}
		return filepath.Abs(flag)
	}
	var tried []string
	var starts []string
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			starts = append(starts, d)
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	for _, d := range starts {
		cand := filepath.Join(d, "libibverbs")
		tried = append(tried, cand)
		if err := makeLib(cand); err != nil {
			return "", err
		}
		if _, err := os.Stat(filepath.Join(cand, so)); err == nil {
			return cand, nil
		}
	}
	return "", fmt.Errorf("no built %s in %s: run make -C libibverbs, or pass --lib", so, strings.Join(tried, ", "))
}

// makeLib brings the library in a source checkout's libibverbs/ up to date,
// so that run works straight after a clone or a pull: nothing to do where
// dir holds no Makefile (an installed copy) or make is not installed.
func makeLib(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "Makefile")); err != nil {
		return nil
	}
	if _, err := exec.LookPath("make"); err != nil {
		return nil
	}
	out, err := exec.Command("make", "-s", "-C", dir, "libibverbs.so.1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("make -C %s (needs gcc and libibverbs-dev): %w\n%s", dir, err, out)
	}
	return nil
}
