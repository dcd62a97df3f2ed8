package scripts_test

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// archRef is a code reference in docs/architecture.md: a package folder
// (`agent/http`), a file (`fsm/apply.go`) or a function in a file
// (`fsm/apply.go:deploymentCreate`, a method given by its name alone).
var archRef = regexp.MustCompile("`((?:cmd|agent|fsm|reconcile|rpc|structs|scripts|testutil)(?:/[A-Za-z0-9_.]+)*)(?::([A-Za-z_][A-Za-z0-9_]*))?`")

// TestArchitectureDoc keeps docs/architecture.md true: every package,
// file and function it names exists, and every package of the module is
// named in it (test-only folders aside), so a package moved, renamed or added without the page fails
// here.
func TestArchitectureDoc(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range archRef.FindAllStringSubmatch(string(doc), -1) {
		path, fn := m[1], m[2]
		full := filepath.Join(root, filepath.FromSlash(path))
		info, err := os.Stat(full)
		if err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", path)
			continue
		}
		if info.IsDir() {
			named[path] = true
			continue
		}
		named[filepath.ToSlash(filepath.Dir(path))] = true
		if fn == "" {
			continue
		}
		src, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		decl := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?` + regexp.QuoteMeta(fn) + `[\[(]`)
		if !decl.Match(src) {
			t.Errorf("docs/architecture.md names %s:%s, but %s declares no function %s", path, fn, path, fn)
		}
	}
	for _, pkg := range modulePackages(t, root) {
		if !named[pkg] {
			t.Errorf("package %s is not named in docs/architecture.md: give it its line among the rooms", pkg)
		}
	}
}

// modulePackages lists the folders of the module that hold a non-test Go
// package, as slash paths from the root, leaving out testdata and the tool
// modules (which are modules of their own).
func modulePackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		if pkg, err := build.ImportDir(path, 0); err != nil || len(pkg.GoFiles) == 0 {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		pkgs = append(pkgs, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pkgs)
	return pkgs
}
