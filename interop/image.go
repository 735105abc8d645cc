package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// Image is a bootable guest: a kernel and an initramfs built by
// build-image.sh.
type Image struct {
	Kernel string // bzImage from Debian's linux-image package
	Initrd string // gzip'd cpio with init.sh, cmdloop.sh, modules and tools
}

// buildTimeout bounds the image build; a cold build (apt-get install of the
// host tools, kernel download) takes about a minute, a warm one nothing.
const buildTimeout = 10 * time.Minute

// DefaultCacheDir is where images and downloaded packages are kept between
// runs: $SOFTROCE_INTEROP_CACHE, else $XDG_CACHE_HOME/softroce-interop, else
// the user cache folder's softroce-interop.
func DefaultCacheDir() string {
	if d := os.Getenv("SOFTROCE_INTEROP_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "softroce-interop")
	}
	return filepath.Join(os.TempDir(), "softroce-interop")
}

// scriptDir is the folder holding build-image.sh, init.sh and cmdloop.sh:
// this source file's folder.
func scriptDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("interop: cannot locate the package's scripts")
	}
	return filepath.Dir(file), nil
}

// BuildImage builds (or reuses from cacheDir) the guest image. Its log goes
// to stderr.
func BuildImage(ctx context.Context, cacheDir string) (Image, error) {
	dir, err := scriptDir()
	if err != nil {
		return Image{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "build-image.sh"), cacheDir)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return Image{}, fmt.Errorf("build guest image in %s: %w", cacheDir, err)
	}
	img := Image{Kernel: filepath.Join(cacheDir, "vmlinuz"), Initrd: filepath.Join(cacheDir, "initramfs.gz")}
	for _, f := range []string{img.Kernel, img.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, fmt.Errorf("build guest image: %w", err)
		}
	}
	return img, nil
}
