package dropin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// The drop-in libraries' sources travel inside the binary, so that a
// softroce installed with `go install` (no source tree) builds them on
// first use: into a per-user cache directory named by the sources' hash,
// with the system's C compiler and the distribution's verbs headers.
//
//go:embed libibverbs/*.c libibverbs/*.h libibverbs/Makefile libibverbs/libibverbs.map libibverbs/abi/*.sh libibverbs/abi/*.symbols
//go:embed librdmacm/*.c librdmacm/*.h librdmacm/Makefile librdmacm/librdmacm.map librdmacm/abi/*.symbols
//go:embed librspreload/*.c librspreload/*.h librspreload/Makefile
var sources embed.FS

// sourcesHash is a hash of every embedded file, naming the cache directory.
func sourcesHash() (string, error) {
	var names []string
	err := fs.WalkDir(sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := sources.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// cacheDir is where the embedded sources are built: the user's cache
// directory ($XDG_CACHE_HOME, else ~/.cache) under softroce/dropin-HASH.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the drop-in libraries: %w", err)
	}
	hash, err := sourcesHash()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "softroce", "dropin-"+hash), nil
}

// embeddedLib writes the embedded sources to the cache directory (once per
// version of them) and builds the libraries there, returning the
// libibverbs directory.
func embeddedLib() (string, error) {
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "libibverbs", "Makefile")); err != nil {
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "tmp-")
		if err != nil {
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return "", fmt.Errorf("cache directory %s: %w", filepath.Dir(dir), err)
			}
			if tmp, err = os.MkdirTemp(filepath.Dir(dir), "tmp-"); err != nil {
				return "", fmt.Errorf("cache directory %s: %w", filepath.Dir(dir), err)
			}
		}
		if err := os.CopyFS(tmp, sources); err != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("write the drop-in sources to %s: %w", tmp, err)
		}
		for _, sh := range []string{"libibverbs/abi/check.sh", "libibverbs/abi/symbols.sh"} {
			os.Chmod(filepath.Join(tmp, sh), 0o755)
		}
		if err := os.Rename(tmp, dir); err != nil {
			os.RemoveAll(tmp)
			if _, serr := os.Stat(filepath.Join(dir, "libibverbs", "Makefile")); serr != nil {
				return "", fmt.Errorf("write the drop-in sources to %s: %w", dir, err)
			}
			// Another softroce wrote them first.
		}
	}
	lib := filepath.Join(dir, "libibverbs")
	if err := Make(lib); err != nil {
		return "", err
	}
	return lib, nil
}
