package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockFuncs are the package time functions that read the wall clock or
// block on it. A sans-I/O core is handed the time and returns its next
// deadline, so none of them may appear in its non-test code.
var clockFuncs = map[string]bool{
	"Now": true, "Sleep": true, "After": true, "NewTimer": true,
	"Since": true, "Until": true, "Tick": true, "NewTicker": true, "AfterFunc": true,
}

// impureImports are packages a sans-I/O core must not import: they reach
// sockets and the operating system.
var impureImports = map[string]bool{"net": true, "os": true, "syscall": true, "golang.org/x/sys/unix": true}

// PurityViolations parses every non-test .go file in dir but the exempt
// ones (file name -> the reason it may) and lists, with their positions,
// uses of time's clock functions (under whatever name time is imported),
// imports of net, os or syscall, and go statements. It reads the syntax
// tree, so comments and string literals never count. It is what the
// sans-I/O promise of qp/, rxe's core, sim/ and sim/netsim (and the coming
// connection manager) is tested with.
func PurityViolations(dir string, exempt map[string]string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var bad []string
	files := 0
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if _, ok := exempt[name]; ok {
			continue
		}
		files++
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		timeNames := map[string]bool{}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return nil, err
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			switch {
			case impureImports[path]:
				bad = append(bad, fmt.Sprintf("%s: imports %q", fset.Position(imp.Pos()), path))
			case path == "time" && local == ".":
				bad = append(bad, fmt.Sprintf("%s: dot-imports \"time\"", fset.Position(imp.Pos())))
			case path == "time":
				timeNames[local] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				bad = append(bad, fmt.Sprintf("%s: go statement", fset.Position(n.Pos())))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && timeNames[id.Name] && clockFuncs[n.Sel.Name] {
					bad = append(bad, fmt.Sprintf("%s: uses time.%s", fset.Position(n.Pos()), n.Sel.Name))
				}
			}
			return true
		})
	}
	if files == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	return bad, nil
}
