package tailcut

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The parts of the module's core, as docs/DESIGN.md's layers draw them:
// every non-test file of the root package is on one part, and each
// internal package stands for itself. TestLayers holds the code to the
// rules below.
var layerParts = map[string][]string{
	// The user's settings and the package's doc.
	"config": {"config.go", "doc.go"},
	// Per-request options carried in a context, which the executor and
	// the adapters read.
	"options": {"reqopts.go", "chain.go"},
	// The executor's API: Do, Hedger, Gather, DoReplicas and what they
	// run attempts with; tied requests (tied.go) are run by the Hedger.
	// Their state machines are internal/exec's, which the root's per-call
	// states (do.go's state, tied.go's tiedState) wrap.
	"execute": {"do.go", "gather.go", "replicas.go", "classify.go", "observer.go", "tied.go"},
	// The policy: the key map, the fuses, the decisions and what they
	// learn. A key's own state and schedule are internal/key's.
	"decide": {"policy.go", "keyindex.go", "counters.go", "features.go", "auto.go", "warmup.go", "model.go", "regress.go", "diagnosis.go", "fuses.go", "gain.go", "fleet.go", "onattempt.go", "chainpay.go"},
	// The reports read from the policy.
	"report": {"stats.go", "statsview.go", "counts.go", "predict.go"},
}

// layerNever are the root package's parts that must not use a name
// declared in another: the policy decides and learns, and never runs an
// attempt, reads a context or depends on a report's types.
var layerNever = [][2]string{
	{"decide", "execute"},
	{"decide", "options"},
	{"decide", "report"},
	{"config", "execute"},
	{"config", "report"},
}

// layerImportNever are the packages a part's files must not import: the
// executor's machinery is the execute part's alone.
var layerImportNever = map[string][]string{
	"decide": {"github.com/tailcut/tailcut/internal/exec", "github.com/tailcut/tailcut/internal/attemptctx"},
	"config": {"github.com/tailcut/tailcut/internal/exec", "github.com/tailcut/tailcut/internal/attemptctx"},
	"report": {"github.com/tailcut/tailcut/internal/exec", "github.com/tailcut/tailcut/internal/attemptctx"},
}

// layerAllowed are the uses a layerNever rule lets through, each with its
// reason: part, the name used, and the part that declares it.
var layerAllowed = map[[3]string]string{}

// rootImporters are the internal packages allowed to import the root
// package, each with its reason; no other may.
var rootImporters = map[string]string{
	"internal/metricstest": "the metrics packages' test helpers drive a Policy and read its AutoChoice; only tests import it",
}

// TestLayers holds the code to layerParts: every root file is on a part;
// no file of a part uses a top-level name (a type, function, variable or
// constant, or a method declared on another part's type) declared in a
// part it must never reach (layerNever), nor imports a package it must
// not (layerImportNever); and no internal package imports the root
// package (but rootImporters). Names are matched by the parser's
// resolution: an identifier a file does not declare itself is the
// package's, and it is looked up among the other parts' declarations.
func TestLayers(t *testing.T) {
	fset := token.NewFileSet()
	partOf := map[string]string{}
	for part, files := range layerParts {
		for _, f := range files {
			partOf[f] = part
		}
	}
	names, _ := filepath.Glob("*.go")
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if _, ok := partOf[name]; !ok {
			t.Errorf("%s is on no part of layerParts", name)
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	for name := range partOf {
		if _, ok := files[name]; !ok {
			t.Errorf("layerParts lists %s, which is not a file of the package", name)
		}
	}
	// declared[part] holds the part's top-level names, and methods[part]
	// the methods it declares on other parts' types.
	declared, methods := map[string]map[string]bool{}, map[string]map[string]bool{}
	typeOf := map[string]string{} // a type's name → its part
	for name, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, s := range g.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						typeOf[ts.Name.Name] = partOf[name]
					}
				}
			}
		}
	}
	for name, f := range files {
		part := partOf[name]
		if declared[part] == nil {
			declared[part], methods[part] = map[string]bool{}, map[string]bool{}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declared[part][d.Name.Name] = true
				} else if typeOf[recvType(d.Recv.List[0].Type)] != part {
					methods[part][d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						declared[part][s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							declared[part][n.Name] = true
						}
					}
				}
			}
		}
	}
	for _, never := range layerNever {
		from, to := never[0], never[1]
		for name, f := range files {
			if partOf[name] != from {
				continue
			}
			for _, use := range usesOf(f) {
				if _, ok := layerAllowed[[3]string{from, use.name, to}]; ok {
					continue
				}
				if use.sel && methods[to][use.name] || !use.sel && declared[to][use.name] {
					t.Errorf("%s (%s) uses %s, declared in %s: %s must not reach %s", fset.Position(use.pos), from, use.name, to, from, to)
				}
			}
		}
	}
	for name, f := range files {
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if slices.Contains(layerImportNever[partOf[name]], p) {
				t.Errorf("%s (%s) imports %s: %s must not", name, partOf[name], p, partOf[name])
			}
		}
	}
	checkInternalImports(t)
}

// recvType returns the name of a method's receiver type.
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// use is an identifier a file uses and does not declare: a package-level
// name (sel false), or the selected name of a selector (sel true).
type use struct {
	name string
	sel  bool
	pos  token.Pos
}

// usesOf returns the identifiers f uses that it does not declare: the
// unresolved ones, less struct fields' and composite literal keys' names
// and the names of other packages.
func usesOf(f *ast.File) []use {
	imported := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imported[name] = true
	}
	var out []use
	var walk func(n ast.Node) bool
	walk = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Obj == nil && imported[x.Name] {
				return false // a name of another package
			}
			ast.Inspect(n.X, walk)
			out = append(out, use{name: n.Sel.Name, sel: true, pos: n.Sel.Pos()})
			return false
		case *ast.KeyValueExpr:
			if _, ok := n.Key.(*ast.Ident); !ok {
				ast.Inspect(n.Key, walk)
			}
			ast.Inspect(n.Value, walk)
			return false
		case *ast.Field:
			if n.Type != nil {
				ast.Inspect(n.Type, walk)
			}
			return false
		case *ast.Ident:
			if n.Obj == nil {
				out = append(out, use{name: n.Name, pos: n.Pos()})
			}
		}
		return true
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			// The receiver and the signature are fields; the body is code.
			ast.Inspect(fd.Type, walk)
			if fd.Recv != nil {
				ast.Inspect(fd.Recv, walk)
			}
			if fd.Body != nil {
				ast.Inspect(fd.Body, walk)
			}
			continue
		}
		ast.Inspect(d, walk)
	}
	return out
}

// checkInternalImports fails for an internal package that imports the
// root package, but those of rootImporters.
func checkInternalImports(t *testing.T) {
	const root = "github.com/tailcut/tailcut"
	err := filepath.WalkDir("internal", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p != root {
				continue
			}
			if _, ok := rootImporters[strings.Join(strings.Split(dir, "/")[:2], "/")]; !ok {
				t.Errorf("%s imports the root package: internal packages must not", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
