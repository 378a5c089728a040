// Package hygiene holds checks of the repository itself, not of one
// package's code.
package hygiene

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)

// TestFuzzTargetsListed: every fuzz target in the tree is in the
// Makefile's FUZZ_TARGETS, so that `make fuzz` and `make fuzz-ci` run it;
// every target listed exists; and each has a committed corpus under its
// package's testdata/fuzz/<Target>/.
func TestFuzzTargetsListed(t *testing.T) {
	root := moduleRoot(t)
	listed := makefileTargets(t, filepath.Join(root, "Makefile"))
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(root, filepath.Dir(p))
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			found = append(found, filepath.ToSlash(pkg)+":"+string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatal("no fuzz targets found: is the pattern still right?")
	}
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS: add it there", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("FUZZ_TARGETS lists %s, which is not in the tree: remove it from the Makefile", l)
		}
		pkg, name, _ := strings.Cut(l, ":")
		if ents, err := os.ReadDir(filepath.Join(root, pkg, "testdata", "fuzz", name)); err != nil || len(ents) == 0 {
			t.Errorf("fuzz target %s has no committed corpus in %s/testdata/fuzz/%s/: add a few inputs there", l, pkg, name)
		}
	}
}

// makefileTargets reads FUZZ_TARGETS, continuation lines included.
func makefileTargets(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "FUZZ_TARGETS :="); ok {
			in, line = true, rest
		}
		if !in {
			continue
		}
		more := strings.HasSuffix(strings.TrimSpace(line), `\`)
		out = append(out, strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), `\`))...)
		if !more {
			break
		}
	}
	if err := sc.Err(); err != nil || len(out) == 0 {
		t.Fatalf("reading FUZZ_TARGETS from %s: %v (%d targets)", path, err, len(out))
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
