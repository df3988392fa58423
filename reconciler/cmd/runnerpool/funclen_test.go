package main

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxLongFunctions is how many product functions may be longer than longFunction lines: a
// ratchet that only goes down (lower it when you split a long function) towards goalLongFunctions
// (a function fits on one screen; a loop body that grows is a named step). The test logs the list.
const maxLongFunctions = 0

// goalLongFunctions is where maxLongFunctions is going (issue #34).
const goalLongFunctions = 5

// longFunction is the length, in lines from its signature to its closing brace, past which a
// function counts as long.
const longFunction = 80

// longFunc is one function over longFunction lines.
type longFunc struct {
	name  string // package-relative: "warmpool.(*Converger).converge"
	where string
	lines int
}

// TestFewLongFunctions counts the functions longer than longFunction lines in the product: every
// non-test file of this module's packages the two shipped binaries link (go list -deps of the
// runnerpool binary and of the provider), so harness code is left out wherever it lives. The
// provider's Schema methods are left out too: they are one schema literal each, the
// documentation of their attributes.
func TestFewLongFunctions(t *testing.T) {
	t.Parallel()
	long := longFunctions(t)
	for _, f := range long {
		t.Logf("%4d lines  %s (%s)", f.lines, f.name, f.where)
	}
	if len(long) > maxLongFunctions {
		t.Errorf("%d product functions are over %d lines, at most %d may be (the goal is %d): split the one you touched into named steps (observe, decide, act)",
			len(long), longFunction, maxLongFunctions, goalLongFunctions)
	}
}

// TestOneLaunchPath keeps internal/launch the one launch mechanism (issue #34): no other product
// package builds a fleet.Request or writes an instance record from a store.Instance literal (a
// launched instance's record; package launch writes it from its order's Record).
func TestOneLaunchPath(t *testing.T) {
	t.Parallel()
	for _, pf := range productFiles(t) {
		if pf.rel == "internal/launch" || pf.rel == "internal/fleet" {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, pf.path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parsing %s: %v", pf.path, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CompositeLit:
				if selector(x.Type, "fleet", "Request") {
					t.Errorf("%s builds a fleet.Request: launch through internal/launch", fset.Position(x.Pos()))
				}
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Create" && len(x.Args) == 2 {
					if lit, ok := x.Args[1].(*ast.CompositeLit); ok && selector(lit.Type, "store", "Instance") {
						t.Errorf("%s creates an instance record: launched instances are recorded by internal/launch", fset.Position(x.Pos()))
					}
				}
			}
			return true
		})
	}
}

func selector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// productFile is a non-test Go file of a package the shipped binaries link.
type productFile struct{ path, rel string }

func productFiles(t *testing.T) []productFile {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	listed, err := exec.CommandContext(t.Context(), goBin, "list", "-deps",
		"-f", `{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`,
		module+"/reconciler/cmd/runnerpool", module).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var out []productFile
	seen := map[string]bool{}
	for _, line := range strings.Fields(string(listed)) {
		pkg, rest, _ := strings.Cut(line, "|")
		dir, files, _ := strings.Cut(rest, "|")
		rel, ok := strings.CutPrefix(pkg, module+"/")
		if pkg == module {
			rel, ok = ".", true
		}
		if !ok || seen[pkg] || files == "" {
			continue
		}
		seen[pkg] = true
		for _, name := range strings.Split(files, ",") {
			out = append(out, productFile{filepath.Join(dir, name), rel})
		}
	}
	if len(seen) < 10 {
		t.Fatalf("go list -deps listed only %d packages of this module", len(seen))
	}
	return out
}

func longFunctions(t *testing.T) []longFunc {
	t.Helper()
	var long []longFunc
	for _, pf := range productFiles(t) {
		long = append(long, longIn(t, pf.path, pf.rel)...)
	}
	slices.SortFunc(long, func(a, b longFunc) int { return cmp.Or(b.lines-a.lines, strings.Compare(a.name, b.name)) })
	return long
}

func longIn(t *testing.T, path, rel string) []longFunc {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	var out []longFunc
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		if fn.Name.Name == "Schema" && fn.Recv != nil && (rel == "provider" || strings.HasPrefix(rel, "provider/")) {
			continue // a schema literal
		}
		start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
		n := end.Line - start.Line + 1
		if n <= longFunction {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = fmt.Sprintf("(%s).%s", types(fn.Recv.List[0].Type), name)
		}
		out = append(out, longFunc{name: f.Name.Name + "." + name, where: fmt.Sprintf("%s/%s:%d", rel, filepath.Base(path), start.Line), lines: n})
	}
	return out
}

// types prints a receiver type: T, *T, T[K].
func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + types(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return types(x.X)
	case *ast.IndexListExpr:
		return types(x.X)
	}
	return "?"
}
