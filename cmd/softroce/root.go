// Command softroce is the command-line front end of softroce, a userspace
// RoCE v2 stack and deterministic simulation testbed.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommands holds the constructors of every subcommand. Each command lives
// in its own file and registers itself from an init function:
//
//	func init() { register(newFooCmd) }
//
// Constructors rather than commands are kept so that every root built by
// newRootCmd (tests build many) has fresh flag state.
var subcommands []func() *cobra.Command

// register adds a subcommand constructor; call it from init.
func register(newCmd func() *cobra.Command) { subcommands = append(subcommands, newCmd) }

// newRootCmd builds the whole command tree.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "softroce",
		Short: "Userspace RoCE v2 stack and deterministic simulation testbed",
		Long: `softroce is a userspace RoCE v2 (InfiniBand transport over UDP port 4791)
stack that aims to be byte-exact with Linux Soft-RoCE (rdma_rxe), and a
deterministic simulation testbed for it.`,
		Version: versionString(),
		// Commands report their own failures through exitError; usage is
		// printed only for flag and argument mistakes (see run).
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("softroce {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nRun '%s --help' for usage.", err, cmd.CommandPath())}
	})
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	return root
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1 // the command ran and found a problem (e.g. bad packets)
	exitTrouble = 2 // the command could not do its job (bad usage, unreadable file)
)

// exitError makes a command end with a given status. Err, when non-nil, is
// printed to stderr.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e exitError) Unwrap() error { return e.err }

// usageError marks a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run executes the command line args and returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitStatus(root.Execute(), stderr)
}

// exitStatus prints err, if any, and maps it to an exit status.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "softroce: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "softroce: %v\n", err)
	return exitTrouble
}
