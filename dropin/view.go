package dropin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The view: programs that look for an RDMA device in the file system
// rather than through libibverbs (UCX stats /dev/infiniband/uverbsN and
// reads /sys/class/infiniband/DEV/ports/1/gid_attrs; pyverbs' rdmacm tests
// and hwloc list /sys/class/infiniband) find softroce's device there when
// they run in a mount namespace of their own in which the daemon's sysfs
// directory (SysfsDir) is laid over /sys/class and /dev. Nothing of the
// host's /sys or /dev changes: the overlays exist only in that namespace
// and vanish with its last process.

// ViewSysProcAttr returns the attributes that start a process in a mount
// namespace of its own, in which EnterView can then mount. As root that is
// a new mount namespace; otherwise also a new user namespace in which the
// caller's user and group are root, since mounting needs CAP_SYS_ADMIN
// there (ViewExec then gives the program back the caller's IDs).
func ViewSysProcAttr() *syscall.SysProcAttr {
	if os.Geteuid() == 0 {
		return &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	return &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
}

// EnterView lays the sysfs view in dir over /sys/class and /dev in the
// calling process's mount namespace, which must be its own (see
// ViewSysProcAttr). On error nothing stays mounted that would hide a host
// file.
func EnterView(dir string) error {
	if strings.ContainsAny(dir, ",:\\") {
		return fmt.Errorf("view %s: the path holds a character overlayfs options cannot carry", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "class")); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	// Nothing mounted here may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("view: make mounts private: %w", err)
	}
	if err := overlay(filepath.Join(dir, "class"), "/sys/class"); err != nil {
		return err
	}
	if err := viewDev(dir); err != nil {
		_ = unix.Unmount("/sys/class", unix.MNT_DETACH)
		return err
	}
	return nil
}

// overlay mounts a read-only union of top over under, at under.
func overlay(top, under string) error {
	opts := "lowerdir=" + top + ":" + under
	if err := unix.Mount("overlay", under, "overlay", unix.MS_RDONLY, opts); err != nil {
		return fmt.Errorf("view: overlay %s on %s: %w", top, under, err)
	}
	return nil
}

// viewDev replaces /dev by a tmpfs holding the same entries (each bound
// from the real /dev, so the file systems mounted below it, pts, shm and
// mqueue, come along) plus infiniband/, where /dev/null is bound over each
// of the view's device files: middleware checks for a character device it
// may open. (An overlay would be simpler, but overlayfs refuses devtmpfs
// as a lower layer in a user namespace.)
func viewDev(dir string) error {
	stage := filepath.Join(dir, "mnt")
	if err := unix.Mount("tmpfs", stage, "tmpfs", 0, "mode=0700,size=64k"); err != nil {
		return fmt.Errorf("view: staging tmpfs on %s: %w", stage, err)
	}
	old := filepath.Join(stage, "dev")
	if err := os.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if err := unix.Mount("/dev", old, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("view: bind /dev: %w", err)
	}
	entries, err := os.ReadDir(old)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("view: tmpfs on /dev: %w", err)
	}
	undo := func(err error) error {
		_ = unix.Unmount("/dev", unix.MNT_DETACH)
		return err
	}
	for _, e := range entries {
		if err := bindEntry(filepath.Join(old, e.Name()), filepath.Join("/dev", e.Name()), e.Type()); err != nil {
			return undo(err)
		}
	}
	devs, _ := filepath.Glob(filepath.Join(dir, "dev", "infiniband", "*"))
	if err := os.MkdirAll("/dev/infiniband", 0o755); err != nil {
		return undo(fmt.Errorf("view: %w", err))
	}
	for _, d := range devs {
		target := filepath.Join("/dev/infiniband", filepath.Base(d))
		if _, err := os.Lstat(target); err == nil {
			continue // the host's own device of that name stays
		}
		if err := bindEntry(filepath.Join(old, "null"), target, 0); err != nil {
			return undo(err)
		}
	}
	return nil
}

// bindEntry makes dst stand for src: a symbolic link is copied, anything
// else is bound (recursively, for a directory) onto a fresh mount point.
func bindEntry(src, dst string, mode fs.FileMode) error {
	switch {
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err == nil {
			err = os.Symlink(target, dst)
		}
		if err != nil {
			return fmt.Errorf("view: %s: %w", dst, err)
		}
		return nil
	case mode.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return fmt.Errorf("view: %w", err)
		}
	default:
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return fmt.Errorf("view: %w", err)
		}
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("view: bind %s: %w", dst, err)
	}
	return nil
}

// ExecInView replaces the calling process by argv (run in its view). With
// uid and gid at -1 it execs in place; otherwise the caller is root only
// in the user namespace ViewSysProcAttr made, and the program runs in a
// nested one as uid and gid again (so that, for one, mpirun does not see
// root), as a child whose exit status ExecInView returns.
func ExecInView(argv []string, uid, gid int) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 0, err
	}
	if uid < 0 {
		return 0, syscall.Exec(path, argv, os.Environ())
	}
	c := exec.Command(path, argv[1:]...)
	c.Args[0] = argv[0]
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: 0, Size: 1}},
	}
	if err := c.Start(); err != nil {
		return 0, err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = c.Process.Signal(s)
		}
	}()
	err = c.Wait()
	signal.Stop(sigs)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code, _ := ShellStatus(ee)
		return code, nil
	}
	return 0, err
}

// ShellStatus is the status a shell gives a program that ended as ee says:
// its exit code, or 128+N when signal N killed it (sig is then N, else 0).
func ShellStatus(ee *exec.ExitError) (code int, sig syscall.Signal) {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return ee.ExitCode(), 0
}
