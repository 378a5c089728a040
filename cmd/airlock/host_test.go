package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/runner"
)

func TestRuntimeNames(t *testing.T) {
	if got, err := dockerRuntime(runner.DefaultRoot + "/"); err != nil || (got != docker.DefaultRuntime && !recorded(runner.DefaultRoot)) {
		t.Errorf("the default root registers %q (%v), want %q", got, err, docker.DefaultRuntime)
	}
	a, b := t.TempDir(), t.TempDir()
	na, _ := dockerRuntime(a)
	nb, _ := dockerRuntime(b)
	if !strings.HasPrefix(na, docker.DefaultRuntime+"-") || na == nb || checkRuntimeName(na) != nil {
		t.Errorf("roots %s and %s register %q and %q: want distinct valid names of their own", a, b, na, nb)
	}
	if again, _ := dockerRuntime(a + "/."); again != na {
		t.Errorf("the name of %s/. is %q, of %s %q", a, again, a, na)
	}
	// Until it registers one, a root's engine uses the default root's.
	if got, err := engineRuntime(a); err != nil || got != docker.DefaultRuntime {
		t.Errorf("engineRuntime of a root with no record = %q, %v", got, err)
	}
	if err := recordRuntime(a, "mine"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(string) (string, error){dockerRuntime, engineRuntime} {
		if got, err := f(a); err != nil || got != "mine" {
			t.Errorf("after recording: %q, %v", got, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(a, runtimeRecord)); fi.Mode().Perm() != 0o600 {
		t.Errorf("the record has mode %v", fi.Mode())
	}
	// A bad record is an error, never a silent fallback.
	os.WriteFile(filepath.Join(a, runtimeRecord), []byte("../x\n"), 0o600)
	if _, err := engineRuntime(a); err == nil || !strings.Contains(err.Error(), runtimeRecord) {
		t.Errorf("a bad record: %v", err)
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", strings.Repeat("x", 65)} {
		if checkRuntimeName(bad) == nil {
			t.Errorf("runtime name %q accepted", bad)
		}
	}
}

func recorded(root string) bool {
	_, ok, _ := recordedRuntime(root)
	return ok
}
