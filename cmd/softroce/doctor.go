package main

// doctor.go: `softroce doctor`, what running unmodified programs on
// softroce needs and what this machine lacks.

import (
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/dropin"
)

func init() { register(newDoctorCmd) }

func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Say what running unmodified RDMA programs on softroce needs, and what is missing",
		Long: `doctor checks what 'softroce run' needs to put its drop-in libibverbs.so.1 and
librdmacm.so.1 in front of a program: a C compiler, make and Debian's verbs
headers to build them (once, from the sources in a checkout or carried by the
binary), where they are, whether a daemon serves the default socket, and
which of Debian's RDMA tools are installed. It ends with the GID index to
pass (-g) and exits 1 when something needed is missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !doctor(cmd.OutOrStdout()) {
				return exitError{exitFailed, fmt.Errorf("something softroce run needs is missing (see above)")}
			}
			return nil
		},
	}
}

// doctor prints its findings and reports whether softroce run can work.
func doctor(w io.Writer) bool {
	ok := true
	line := func(good bool, what, detail string) {
		mark := "ok  "
		if !good {
			mark = "MISS"
		}
		fmt.Fprintf(w, "%s %-28s %s\n", mark, what, detail)
	}
	if err := dropin.BuildTools(); err != nil {
		line(false, "build tools", err.Error())
		ok = false
	} else {
		line(true, "build tools", "gcc, make, libibverbs-dev")
	}
	_, cmaErr := os.Stat("/usr/include/rdma/rdma_cma.h")
	line(cmaErr == nil, "librdmacm-dev (optional)", "rdma_cm programs (rping, perftest -R) need the drop-in librdmacm.so.1 it builds")
	lib, err := dropin.FindLib("")
	if err != nil {
		line(false, "drop-in libibverbs.so.1", err.Error())
		ok = false
	} else {
		line(true, "drop-in libibverbs.so.1", lib)
		if d := dropin.RdmacmDir(lib); d != "" {
			line(true, "drop-in librdmacm.so.1", d)
		} else {
			line(false, "drop-in librdmacm.so.1", "not built: apt-get install librdmacm-dev")
		}
	}
	sock := dropin.SocketPath("")
	if dropin.Answers(sock) {
		line(true, "daemon", "answers on "+sock)
	} else {
		line(true, "daemon", "none on "+sock+": softroce run starts a shared one")
	}
	for _, t := range []struct{ prog, pkg string }{
		{"ibv_devinfo", "ibverbs-utils"}, {"ib_write_bw", "perftest"}, {"rping", "rdmacm-utils"},
	} {
		_, err := exec.LookPath(t.prog)
		line(err == nil, t.prog+" (optional)", "Debian package "+t.pkg)
	}
	fmt.Fprintln(w, "GID index: pass -g 1 (the IPv4-mapped GID ::ffff:a.b.c.d of the device's address, as on kernel rxe); -g 0 is the link-local GID")
	return ok
}
