package archtest

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/softroce/softroce"

// rank places every package of the module on one floor of the building
// ARCHITECTURE.md describes. Non-test code may import only packages on a
// lower floor: imports run one way, from commands down to the wire. Packages
// on one floor are siblings and never import each other. A new package fails
// TestImportRule until it is given its floor here, on purpose: placing it is
// a design decision.
var rank = map[string]int{
	// Leaves: wire formats, fault models, out-of-band records, test support.
	"packet":            0,
	"fault":             0,
	"oob":               0,
	"internal/archtest": 0,
	"internal/testenv":  0,
	"internal/bytepool": 0,
	"internal/prefetch": 0,

	"pcapio":     1, // capture files, over packet
	"qp":         1, // the transport engine, over packet
	"cm":         1, // the connection manager, over packet
	"sim/netsim": 1, // the simulated network, over fault

	"rxe/link": 2, // links a device sends on

	"rxe": 3, // the device

	// The device's users, siblings of one another.
	"verbsapi": 4,
	"sim":      4,
	"replay":   4,

	// Protocols over the verbs API.
	"rsocket": 5, // stream sockets over RC, librdmacm's rsocket protocol

	// Subsystems over the verbs API.
	"dropin":            6,
	"sim/report":        6, // a run's report on disk, over sim
	"sim/sweep":         6, // seeds and parameter values across cores and machines, over sim
	"workload/perftest": 6,
	"workload/pingpong": 6,
	"workload/rdmacm":   6,
	"workload/rstream":  6,

	// Commands and the kernel-interop harness wire everything together.
	"cmd/softroce":      7,
	"interop":           7,
	"bench/udppingpong": 7,
}

// packages returns the module's package directories (relative, slash
// separated) with the module-internal imports of their non-test files.
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(p, module+"/"); ok {
				out[pkg] = append(out[pkg], dep)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the module's packages: %v", err)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module "+module+"\n") {
		t.Fatalf("%s is not the module root (go.mod: %v)", root, err)
	}
	return root
}

// violations lists, for the packages and imports given, every import that
// does not run down to a lower floor, every package without a floor and
// every floor given to a package that does not exist.
func violations(pkgs map[string][]string, rank map[string]int) []string {
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	var out []string
	for _, p := range names {
		r, ok := rank[p]
		if !ok {
			out = append(out, fmt.Sprintf("package %s has no floor: give it one in rank (internal/archtest/imports_test.go) and in ARCHITECTURE.md", p))
			continue
		}
		for _, dep := range pkgs[p] {
			d, ok := rank[dep]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s imports %s, which has no floor in rank", p, dep))
			case d >= r:
				out = append(out, fmt.Sprintf("%s (floor %d) imports %s (floor %d): imports must run down to a lower floor; move the shared code down or invert the dependency", p, r, dep, d))
			}
		}
	}
	listed := make([]string, 0, len(rank))
	for p := range rank {
		listed = append(listed, p)
	}
	sort.Strings(listed)
	for _, p := range listed {
		if _, ok := pkgs[p]; !ok {
			out = append(out, fmt.Sprintf("rank lists %s, which is not a package of the module: remove it", p))
		}
	}
	return out
}

// TestImportRule checks the module as it is against rank.
func TestImportRule(t *testing.T) {
	for _, v := range violations(packages(t, moduleRoot(t)), rank) {
		t.Error(v)
	}
}

// TestViolations shows the rule catches what it must: an import up or
// across a floor, an unplaced package, a stale entry.
func TestViolations(t *testing.T) {
	r := map[string]int{"packet": 0, "qp": 1, "rxe": 2, "sim": 3, "verbsapi": 3}
	for _, tc := range []struct {
		name string
		pkgs map[string][]string
		want int
	}{
		{"down is fine", map[string][]string{"packet": nil, "qp": {"packet"}, "rxe": {"qp", "packet"}, "sim": {"rxe"}, "verbsapi": {"rxe"}}, 0},
		{"up", map[string][]string{"packet": nil, "qp": {"rxe"}, "rxe": nil, "sim": nil, "verbsapi": nil}, 1},
		{"across", map[string][]string{"packet": nil, "qp": nil, "rxe": nil, "sim": {"verbsapi"}, "verbsapi": nil}, 1},
		{"self floor", map[string][]string{"packet": {"packet"}, "qp": nil, "rxe": nil, "sim": nil, "verbsapi": nil}, 1},
		{"unplaced package", map[string][]string{"packet": nil, "qp": nil, "rxe": nil, "sim": nil, "verbsapi": nil, "cm": {"qp"}}, 1},
		{"unplaced import", map[string][]string{"packet": nil, "qp": {"cm"}, "rxe": nil, "sim": nil, "verbsapi": nil}, 1},
		{"stale entry", map[string][]string{"packet": nil, "qp": nil, "rxe": nil, "sim": nil}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := violations(tc.pkgs, r); len(got) != tc.want {
				t.Errorf("violations = %q, want %d", got, tc.want)
			}
		})
	}
}
