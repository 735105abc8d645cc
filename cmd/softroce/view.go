package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/dropin"
)

func init() { register(newViewExecCmd) }

// newViewExecCmd is run's second stage, started in a mount namespace of its
// own: it lays the daemon's sysfs view over /sys/class and /dev there and
// then becomes the program. Not for users, hence hidden.
func newViewExecCmd() *cobra.Command {
	var uid, gid int
	cmd := &cobra.Command{
		Use:    "view-exec [--uid N --gid N] DIR -- PROGRAM [ARGS...]",
		Short:  "Run PROGRAM with a softroce sysfs view (used by run)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(2),
	}
	cmd.Flags().IntVar(&uid, "uid", -1, "run PROGRAM as this user again (from a user namespace)")
	cmd.Flags().IntVar(&gid, "gid", -1, "run PROGRAM as this group again")
	cmd.Flags().SetInterspersed(false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := dropin.EnterView(args[0]); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "softroce run: %v; programs that look for the device in /sys or /dev (UCX, Open MPI) will not find it\n", err)
		}
		code, err := dropin.ExecInView(args[1:], uid, gid)
		if err != nil {
			return exitError{exitTrouble, fmt.Errorf("run %s: %w", args[1], err)}
		}
		if code != 0 {
			return exitError{code: code}
		}
		return nil
	}
	return cmd
}
