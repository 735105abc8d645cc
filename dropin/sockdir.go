package dropin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// defaultSocketDir is the directory of the default socket when there is no
// $XDG_RUNTIME_DIR: /tmp/softroce-UID, the user's own (mode 0700). A socket
// directly in /tmp could be created first by any other user, who would then
// hold the path: the owner's daemon could not listen and its programs would
// be told "connection refused". A directory of one's own is checked once,
// and names the squatter when someone else took it.
func defaultSocketDir() string { return fmt.Sprintf("/tmp/softroce-%d", os.Getuid()) }

// ErrSquatted reports a socket directory that is not the user's own.
var ErrSquatted = errors.New("not your own directory")

// PrepareSocketDir makes the default socket directory when sock lies in it
// (mode 0700), and checks that it is a directory of this user that nobody
// else may enter; an error names who holds it and what to do. Other paths
// (--socket, $SOFTROCE_SOCKET, $XDG_RUNTIME_DIR) are the user's choice and
// are left as they are.
func PrepareSocketDir(sock string) error {
	dir := defaultSocketDir()
	if filepath.Dir(sock) != dir {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	return checkSocketDir(dir)
}

// checkSocketDir accepts dir only as a real directory (not a link) owned
// by this user with no access for group or others.
func checkSocketDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("socket directory %s: no owner to check", dir)
	}
	me := os.Getuid()
	switch {
	case int(st.Uid) != me:
		return fmt.Errorf("socket directory %s belongs to %s, not to you (uid %d): another user created it first: %w; "+
			"have it removed, or set XDG_RUNTIME_DIR or --socket to a directory of your own", dir, userName(st.Uid), me, ErrSquatted)
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s is not a directory (%s): %w; remove it, or use --socket", dir, fi.Mode().Type(), ErrSquatted)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("socket directory %s has mode %04o: others may enter it: %w; chmod 700 it", dir, fi.Mode().Perm(), ErrSquatted)
	}
	return nil
}

func userName(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return fmt.Sprintf("uid %s (%s)", s, u.Username)
	}
	return "uid " + s
}
