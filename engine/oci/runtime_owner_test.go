package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// A runsc that a user other than root could change is not run: every
// sandbox's runtime runs as root.
func TestCheckRefusesRunscOthersCanChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the oci engine needs root")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(RunscPath(root)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(RunscPath(root), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(open, "runsc")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := &engine.SandboxSpec{ID: "00112233445566778899"}
	e, err := New(root, WithRunsc(bad))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Check(t.Context(), spec); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), open) {
		t.Errorf("a runsc in a directory anyone may write: %v; want unavailable, naming it", err)
	}
	// The root's own, root's alone, passes that check: what refuses the
	// spec next is the image, which the store lacks.
	if e, err = New(root); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(t.Context(), spec); !errdefs.IsNotFound(err) {
		t.Errorf("setup's runsc: %v; want the image's refusal (not found)", err)
	}
}
