package qp_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// clockFuncs are the package time functions that read the wall clock or
// block on it. The engine is sans-I/O: it is handed the time and returns its
// next deadline, so none of them may appear in non-test code.
var clockFuncs = map[string]bool{
	"Now": true, "Sleep": true, "After": true, "NewTimer": true,
	"Since": true, "Until": true, "Tick": true, "NewTicker": true, "AfterFunc": true,
}

// purityViolations parses every non-test .go file in dir and lists calls or
// references to clock functions of package time (under whatever name it is
// imported), imports of "net", and go statements. It works on the syntax
// tree, so comments and string literals never count.
func purityViolations(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var bad []string
	files := 0
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files++
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		timeNames := map[string]bool{}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			switch path {
			case "net":
				bad = append(bad, fset.Position(imp.Pos()).String()+`: imports "net"`)
			case "time":
				local := "time"
				if imp.Name != nil {
					local = imp.Name.Name
				}
				if local == "." {
					bad = append(bad, fset.Position(imp.Pos()).String()+`: dot-imports "time"`)
				}
				timeNames[local] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				bad = append(bad, fset.Position(n.Pos()).String()+": go statement")
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && timeNames[id.Name] && clockFuncs[n.Sel.Name] {
					bad = append(bad, fset.Position(n.Pos()).String()+": uses time."+n.Sel.Name)
				}
			}
			return true
		})
	}
	require.NotZero(t, files, "no Go files in %s", dir)
	return bad
}

// TestEnginePurity enforces the sans-I/O rule on package qp.
func TestEnginePurity(t *testing.T) {
	bad := purityViolations(t, ".")
	require.Empty(t, bad, "package qp must not read clocks, sleep, use net or start goroutines")
}

// TestPurityCheckerCatchesViolations makes sure the checker is not vacuous:
// it flags a file that breaks every rule, including through an import
// alias, and ignores the same words in comments and strings.
func TestPurityCheckerCatchesViolations(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"net"
	clock "time"
)

// time.Now() and go func() in a comment do not count.
var s = "time.Sleep(1); go f()"

func f() {
	_ = clock.Now()
	clock.Sleep(1)
	<-clock.After(1)
	_ = clock.NewTimer(1)
	go f()
	_ = net.IPv4len
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644))
	clean := "package x\n\n// time.Now(); go f()\nvar s = \"net time.Sleep go\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "y.go"), []byte(clean), 0o644))
	// Test files are exempt.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "z_test.go"), []byte("package x\nimport \"time\"\nvar _ = time.Now\n"), 0o644))
	bad := purityViolations(t, dir)
	want := []string{`imports "net"`, "time.Now", "time.Sleep", "time.After", "time.NewTimer", "go statement"}
	require.Len(t, bad, len(want), "%v", bad)
	for _, w := range want {
		found := false
		for _, b := range bad {
			if strings.Contains(b, w) && strings.Contains(b, "x.go") {
				found = true
			}
		}
		require.True(t, found, "missing %q in %v", w, bad)
	}
}
