package hygiene

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	e2eTag     = regexp.MustCompile(`(?m)^//go:build e2e$`)
	testFunc   = regexp.MustCompile(`(?m)^func (Test\w*)\(\w+ \*testing\.T\)`)
	enginesRun = regexp.MustCompile(`-run '([^']+)'[^\n]* \./engine/oci/ \./engine/docker/`)
)

// TestEngineE2EListed: `make test` runs the engines' end-to-end tests
// with a -run pattern, so a test it does not match never runs in CI.
// Every e2e test of engine/oci and engine/docker must match it.
func TestEngineE2EListed(t *testing.T) {
	root := moduleRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := enginesRun.FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile runs no -run pattern over ./engine/oci/ ./engine/docker/: is this check's pattern still right?")
	}
	run := regexp.MustCompile(string(m[1]))
	found := 0
	for _, pkg := range []string{"engine/oci", "engine/docker"} {
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !e2eTag.Match(b) {
				continue
			}
			for _, fn := range testFunc.FindAllSubmatch(b, -1) {
				found++
				if name := string(fn[1]); !run.MatchString(name) {
					t.Errorf("%s's %s does not match the Makefile's -run %q, so CI never runs it: rename it or widen the pattern", strings.TrimPrefix(f, root+"/"), name, run)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no e2e tests found in the engines: is this check's pattern still right?")
	}
}
