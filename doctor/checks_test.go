package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// writeRunsc makes an executable at p, then gives it mode.
func writeRunsc(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho runsc version test\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// The oci engine runs airlock's runsc as root: one that another user can
// rewrite, or replace in a directory they may write (a --root under a
// shared directory), is no runsc to call OK.
func TestCheckRunscWritableByOthers(t *testing.T) {
	o := Options{Engine: "oci", Isolation: "gvisor"}

	o.Root = filepath.Join(t.TempDir(), "root")
	o.Runsc = filepath.Join(o.Root, "tools", "runsc")
	writeRunsc(t, o.Runsc, 0o777)
	c := checkRunsc(context.Background(), o)
	if c.Status != StatusFail || !strings.Contains(c.Detail, o.Runsc) || !strings.Contains(c.Detail, "0777") || c.Fix == "" {
		t.Errorf("runsc of mode 0777: %+v; want a FAIL naming it, its mode, and a fix", c)
	}

	o.Root = filepath.Join(t.TempDir(), "root")
	o.Runsc = filepath.Join(o.Root, "tools", "runsc")
	writeRunsc(t, o.Runsc, 0o755)
	if c := checkRunsc(context.Background(), o); c.Status != StatusOK {
		t.Errorf("runsc writable by root alone: %+v", c)
	}
	tools := filepath.Dir(o.Runsc)
	if err := os.Chmod(tools, 0o777); err != nil {
		t.Fatal(err)
	}
	c = checkRunsc(context.Background(), o)
	if c.Status != StatusFail || !strings.Contains(c.Detail, tools) || !strings.Contains(c.Detail, "0777") {
		t.Errorf("runsc in a directory of mode 0777: %+v; want a FAIL naming the directory", c)
	}
}

// Whoever can write airlock's root can put their own state there.
func TestCheckRootDirectoryWritableByOthers(t *testing.T) {
	roottest.Require(t, "the root row checks euid 0 first")
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := checkRoot(context.Background(), Options{Root: root}); c.Status != StatusOK {
		t.Errorf("a root of mode 0755: %+v", c)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	c := checkRoot(context.Background(), Options{Root: root})
	if c.Status != StatusFail || !strings.Contains(c.Detail, root) || !strings.Contains(c.Detail, "0777") || c.Fix == "" {
		t.Errorf("a root of mode 0777: %+v; want a FAIL naming it, its mode, and a fix", c)
	}
	if c := checkRoot(context.Background(), Options{Root: filepath.Join(root, "not", "yet")}); c.Status != StatusFail {
		t.Errorf("a root not made yet, under one of mode 0777: %+v", c)
	}
}
