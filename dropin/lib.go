package dropin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// LibName is the drop-in library's file name, the soname of Debian 12's
// libibverbs.
const LibName = "libibverbs.so.1"

// RdmacmName is the drop-in librdmacm's file name; it lives in a
// librdmacm/ directory beside the libibverbs/ one (RdmacmDir).
const RdmacmName = "librdmacm.so.1"

// RdmacmDir returns the directory of the drop-in librdmacm that goes with
// the libibverbs in libDir (its sibling librdmacm/), building it in a
// source checkout (needs librdmacm-dev), or "" when there is none: verbs
// programs still run then, rdma_cm programs find the system's librdmacm.
func RdmacmDir(libDir string) string {
	dir := filepath.Join(filepath.Dir(libDir), "librdmacm")
	if err := makeTarget(dir, RdmacmName); err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, RdmacmName)); err != nil {
		return ""
	}
	return dir
}

// FindLib returns the directory holding the built drop-in library: dir when
// given, else $SOFTROCE_LIBDIR, else a libibverbs/ directory next to the
// running binary (an installed copy), else dropin/libibverbs/ of the source
// checkout holding the current directory, else the sources embedded in the
// binary, built in the user's cache directory (a softroce installed with
// `go install`). In a checkout and in the cache it runs make first (gcc and
// libibverbs-dev), so the library is always built from the current sources.
func FindLib(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("SOFTROCE_LIBDIR")
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, LibName)); err != nil {
			return "", fmt.Errorf("library directory %s: %w (build it with make -C dropin/libibverbs)", dir, err)
		}
		return filepath.Abs(dir)
	}
	var cands []string
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "libibverbs"))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			cands = append(cands, filepath.Join(d, "dropin", "libibverbs"))
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	for _, cand := range cands {
		if err := Make(cand); err != nil {
			return "", err
		}
		if _, err := os.Stat(filepath.Join(cand, LibName)); err == nil {
			return cand, nil
		}
	}
	// No source tree: the sources this binary carries.
	if err := BuildTools(); err != nil {
		return "", fmt.Errorf("no built %s in %s, and the embedded sources cannot be built: %w", LibName, strings.Join(cands, ", "), err)
	}
	lib, err := embeddedLib()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(lib, LibName)); err != nil {
		return "", fmt.Errorf("building the embedded drop-in library in %s: %w", lib, err)
	}
	return lib, nil
}

// Make brings the library in dir up to date when dir is a source directory
// (it has a Makefile) and make is installed; otherwise it does nothing.
func Make(dir string) error { return makeTarget(dir, LibName) }

func makeTarget(dir, target string) error {
	if _, err := os.Stat(filepath.Join(dir, "Makefile")); err != nil {
		return nil
	}
	if _, err := exec.LookPath("make"); err != nil {
		return nil
	}
	out, err := exec.Command("make", "-s", "-C", dir, target).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make -C %s (needs gcc and libibverbs-dev): %w\n%s", dir, err, out)
	}
	return nil
}

// Env returns the environment a program needs to run on the drop-in
// library in libDir against the server on sock: env (os.Environ(), say)
// with SOFTROCE_SOCKET set and libDir (and the drop-in librdmacm beside it,
// RdmacmDir) put first in LD_LIBRARY_PATH.
//
// It also sets UCX_UD_VERBS_ETH_DGID_CHECK=n unless env sets it: UCX
// before 1.18 (Debian 12 ships 1.13) takes a UD completion's sl for the
// RoCE packet type, as mlx5 reports it, and so drops every UD packet from a
// device that leaves sl zero, kernel rxe and softroce among them (UCX
// pull request 10209 reads the type from the GRH instead).
func Env(env []string, libDir, sock string) []string {
	ld := libDir
	if d := RdmacmDir(libDir); d != "" {
		ld += string(os.PathListSeparator) + d
	}
	out := make([]string, 0, len(env)+3)
	dgid := "UCX_UD_VERBS_ETH_DGID_CHECK=n"
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "UCX_UD_VERBS_ETH_DGID_CHECK="):
			dgid = kv
		case strings.HasPrefix(kv, "LD_LIBRARY_PATH="):
			if rest := kv[len("LD_LIBRARY_PATH="):]; rest != "" {
				ld += string(os.PathListSeparator) + rest
			}
		case strings.HasPrefix(kv, "SOFTROCE_SOCKET="):
		default:
			out = append(out, kv)
		}
	}
	return append(out, "SOFTROCE_SOCKET="+sock, "LD_LIBRARY_PATH="+ld, dgid)
}

// BuildTools reports what building the drop-in libraries needs and this
// machine lacks, naming the Debian packages: make, a C compiler and the
// verbs headers (libibverbs-dev). librdmacm-dev is optional: without it only
// the libibverbs drop-in is built.
func BuildTools() error {
	var missing []string
	for _, t := range []struct{ tool, pkg string }{{"make", "make"}, {"gcc", "gcc"}} {
		if _, err := exec.LookPath(t.tool); err != nil {
			missing = append(missing, t.pkg)
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		missing = append(missing, "libibverbs-dev")
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (apt-get install %s)", strings.Join(missing, ", "), strings.Join(missing, " "))
	}
	return nil
}
