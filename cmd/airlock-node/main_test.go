package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// TestServiceCapsExecs: the node's service admits kubectl execs as
// airlock serve's does: --max-execs in progress at once in all, and
// service.DefaultMaxExecsPerSandbox in one pod's sandbox; past either an
// exec is refused, over_limit.
func TestServiceCapsExecs(t *testing.T) {
	root := t.TempDir()
	host := engines.New(root, engines.Shared())
	defer host.Close()
	admit := func(svc *service.Service, id string, n int) []func() {
		t.Helper()
		var held []func()
		for i := 0; i < n; i++ {
			release, err := svc.AdmitExec(id)
			if err != nil {
				t.Fatalf("exec %d in %s: %v", i+1, id, err)
			}
			held = append(held, release)
		}
		return held
	}
	refused := func(svc *service.Service, id, why string) {
		t.Helper()
		var over *service.ExecsOverLimitError
		if _, err := svc.AdmitExec(id); !errors.As(err, &over) || !errdefs.IsResourceExhausted(err) {
			t.Errorf("%s: an exec in %s admitted: %v", why, id, err)
		}
	}

	svc := newService(&flags{root: root, maxSandboxes: 8, maxExecs: 3}, host, slog.New(slog.DiscardHandler))
	admit(svc, "sb-a", 2)
	admit(svc, "sb-b", 1)
	refused(svc, "sb-c", "--max-execs 3, 3 in progress")

	svc = newService(&flags{root: root, maxSandboxes: 8, maxExecs: service.DefaultMaxExecs}, host, slog.New(slog.DiscardHandler))
	admit(svc, "sb-a", service.DefaultMaxExecsPerSandbox)
	refused(svc, "sb-a", strconv.Itoa(service.DefaultMaxExecsPerSandbox)+" in one sandbox")
	admit(svc, "sb-b", 1)
}

// TestMaxExecsFlag: --max-execs defaults to airlock serve's, and a
// number below 1 is a usage error.
func TestMaxExecsFlag(t *testing.T) {
	if got := newCmd().Flags().Lookup("max-execs").DefValue; got != strconv.Itoa(service.DefaultMaxExecs) {
		t.Errorf("--max-execs defaults to %s, want %d", got, service.DefaultMaxExecs)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := newCmd()
	cmd.SetArgs([]string{"--root", t.TempDir(), "--airlock", self, "--name", "n", "--max-execs", "0"})
	if err := cmd.ExecuteContext(context.Background()); !errdefs.IsInvalidArgument(err) {
		t.Errorf("--max-execs 0: %v, want invalid argument", err)
	}
}

// TestRootIsResolved: a relative --root, or one through a symlink, reaches
// the supervisors and the engines as the kernel names it (they start in
// /, and the docker engine labels containers with it).
func TestRootIsResolved(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(link))
	f := &flags{root: "link", address: "not an address"}
	if err := run(newCmd(), f); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("run: %v, want the --address refusal", err)
	}
	if want := runner.ResolveRoot(real); f.root != want {
		t.Errorf("--root link became %q, want %q", f.root, want)
	}
}
