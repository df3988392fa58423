package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// handWired are the constructors that only the composition root's path may call: a replica's scale
// set listeners come from scalesets.Listeners, which controlplane.New calls over the pool job queue
// (controlplane.Warm.ScaleSets), and the listeners make their own scale set clients.
var handWired = map[string]string{
	module + "/reconciler/scalesets": "New",
	module + "/internal/scaleset":    "New",
}

// wiredHere are the packages allowed to call them: their own, and their own tests.
var wiredHere = []string{"reconciler/scalesets", "internal/scaleset"}

// TestListenersWiredThroughTheCompositionRoot (issue #34): nothing outside the listeners' own package
// (the service, the bench, the demo, the sandbox, the fault matrix) builds a scale set listener or a
// scale set client by hand, so what the bench measures and the tests check is wired as `runnerpool
// serve` wires it: through controlplane.New and scalesets.Listeners.
func TestListenersWiredThroughTheCompositionRoot(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(wiredHere, rel) || (rel != "." && strings.HasPrefix(d.Name(), ".")) || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, call := range handWiredCalls(f) {
			t.Errorf("%s: %s wires a scale set listener or client by hand: build the replica through controlplane.New with scalesets.Listeners", rel, call)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files read under %s", files, root)
	}
}

// handWiredCalls lists the calls of handWired constructors in f.
func handWiredCalls(f *ast.File) []string {
	names := map[string]string{} // local name -> constructor it may not call
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		fn, ok := handWired[p]
		if !ok {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = fn
	}
	var calls []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] == sel.Sel.Name {
			calls = append(calls, x.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return calls
}

func TestHandWiredCalls(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		src  string
		want []string
	}{
		"listener by hand": {`package p; import "` + module + `/reconciler/scalesets"; var _, _ = scalesets.New(scalesets.Config{})`, []string{"scalesets.New"}},
		"client renamed":   {`package p; import ss "` + module + `/internal/scaleset"; var _, _ = ss.New(ss.Config{})`, []string{"ss.New"}},
		"through the root": {`package p; import "` + module + `/reconciler/scalesets"; var _ = scalesets.Listeners(scalesets.Config{}, nil)`, nil},
		"another New":      {`package p; import "` + module + `/internal/warmpool"; var _ = warmpool.NewCatalog(nil, 0, nil)`, nil},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), name+".go", tc.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := handWiredCalls(f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
