package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// TestReapWaitsForLock: Reap frees nothing of a sandbox whose lock
// another holds (a runsc creating, checkpointing or restoring it, whose
// airlock process died), until that one lets go; past its context it
// fails and leaves the sandbox whole.
func TestReapWaitsForLock(t *testing.T) {
	root := t.TempDir()
	e, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-0123456789abcdef0123"
	for _, d := range []string{e.bundleDir(id), e.checkpointDir(id)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	whole := func() bool {
		_, berr := os.Stat(e.bundleDir(id))
		_, cerr := os.Stat(e.checkpointDir(id))
		return berr == nil && cerr == nil
	}
	held, err := e.lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.Reap(ctx, id); !errdefs.IsUnavailable(err) || !whole() {
		t.Fatalf("Reap while the lock is held, past its context: %v, sandbox whole %v", err, whole())
	}

	done := make(chan error, 1)
	go func() { done <- e.Reap(context.Background(), id) }()
	select {
	case err := <-done:
		t.Fatalf("Reap returned (%v) while the lock was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	if !whole() {
		t.Fatal("Reap freed the sandbox while its lock was held")
	}
	// As a process that dies lets go: the file stays.
	held.File().Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reap did not go on once the lock was let go")
	}
	for _, p := range []string{e.bundleDir(id), e.checkpointDir(id), e.lockPath(id)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after Reap: %v", filepath.Base(filepath.Dir(p))+"/"+filepath.Base(p), err)
		}
	}
}

// A used checkpoint a resume left to remove (its process ended first)
// names its sandbox among the leftovers, and goes with it.
func TestReapUsedCheckpoint(t *testing.T) {
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-0123456789abcdef0123"
	used := filepath.Join(e.checkpointsDir(), usedPrefix+id+"-k2x9")
	if err := os.MkdirAll(used, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "pages.img"), []byte("pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := e.Leftovers(context.Background())
	if err != nil || !slices.Contains(ids, id) || slices.ContainsFunc(ids, func(s string) bool { return strings.HasPrefix(s, usedPrefix) }) {
		t.Fatalf("Leftovers: %v, %v; want %s, and no used checkpoint's name", ids, err, id)
	}
	if err := e.Reap(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(used); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the used checkpoint is left after Reap: %v", err)
	}
}

// Reaping sandbox "a" takes its used checkpoints and half-written
// snapshots, and not those of sandbox "a-b" (ids may hold '-'), which
// ".used-a-*" and ".new-a-*" would match too.
func TestReapKeepsAnotherSandboxesFiles(t *testing.T) {
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mine := []string{filepath.Join(e.snapshotsDir(), newPrefix+"a-123456"), filepath.Join(e.checkpointsDir(), usedPrefix+"a-xyz")}
	others := []string{filepath.Join(e.snapshotsDir(), newPrefix+"a-b-123456"), filepath.Join(e.checkpointsDir(), usedPrefix+"a-b-xyz")}
	for _, d := range append(mine, others...) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Reap(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, d := range mine {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("reaping sandbox %q left its %s (%v)", "a", filepath.Base(d), err)
		}
	}
	for _, d := range others {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("reaping sandbox %q removed %s, sandbox %q's (%v)", "a", filepath.Base(d), "a-b", err)
		}
	}
}

func TestUsedOwner(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		ok       bool
	}{
		{".used-sb-0123456789abcdef0123-k2x9", "sb-0123456789abcdef0123", true},
		{".used-plain-1", "plain", true},
		{"sb-0123456789abcdef0123", "", false},
		{".used-", "", false},
		{".used--x", "", false},
		{".new-sb-1-x", "", false},
	} {
		id, ok := usedOwner(tc.name)
		if id != tc.id || ok != tc.ok {
			t.Errorf("usedOwner(%q) = %q, %v; want %q, %v", tc.name, id, ok, tc.id, tc.ok)
		}
	}
}

// A runsc killed while it wrote its state file (with airlock, whose
// death it follows) leaves that file empty: runsc lists it for ever and
// cannot delete it. Reap removes it, and only it: a state file that parses
// is runsc's to delete, and its failure to is reported.
func TestReapUnreadableRunscState(t *testing.T) {
	e := withRunscState(t)
	file := func(id, ext string) string {
		return filepath.Join(e.runscState(), namePrefix+id+"_sandbox:"+namePrefix+id+"."+ext)
	}
	const torn, whole = "0123456789abcdef0123", "fedcba98765432100123"
	for p, body := range map[string]string{
		file(torn, "state"):  "",
		file(torn, "lock"):   "",
		file(whole, "state"): `{"id":"airlock-` + whole + `","status":"running"}`,
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := e.Leftovers(context.Background())
	if err != nil || !slices.Contains(ids, torn) || !slices.Contains(ids, whole) {
		t.Fatalf("Leftovers: %v, %v; want %s and %s", ids, err, torn, whole)
	}
	if err := e.Reap(context.Background(), torn); err != nil {
		t.Fatalf("Reap of a torn state: %v", err)
	}
	for _, ext := range []string{"state", "lock"} {
		if _, err := os.Stat(file(torn, ext)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the torn container's %s file is left: %v", ext, err)
		}
	}
	err = e.Reap(context.Background(), whole)
	if err == nil || !strings.Contains(err.Error(), "delete --force airlock-"+whole) {
		t.Errorf("Reap of a state runsc did not delete: %v; want an error saying how to delete it", err)
	}
	if _, err := os.Stat(file(whole, "state")); err != nil {
		t.Errorf("a state file that parses was removed: %v", err)
	}
}

// A state file a live runsc holds its lock on (one writing it) is left
// alone, however it reads.
func TestReapLeavesLockedRunscState(t *testing.T) {
	e := withRunscState(t)
	name := namePrefix + "0123456789abcdef0123"
	state := filepath.Join(e.runscState(), name+"_sandbox:"+name+".state")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := flock.Acquire(context.Background(), filepath.Join(e.runscState(), name+"_sandbox:"+name+".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(false)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := forgetRunsc(ctx, e.runscState(), name); !errdefs.IsUnavailable(err) {
		t.Errorf("forgetRunsc under a held lock: %v; want unavailable", err)
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("the state file was removed under a held lock: %v", err)
	}
}

// withRunscState is an engine on a new root whose runsc state directory
// exists.
func withRunscState(t *testing.T) *Engine {
	t.Helper()
	e, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.runscState(), 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

// The engine's root is absolute with its symlinks resolved, as the
// runner's (runner.ResolveRoot): the paths it records and mounts under
// it are then those the kernel reports, and mean the same from any
// working directory.
func TestNewResolvesRoot(t *testing.T) {
	base := roottest.LinkedDir(t)
	e, err := New("link")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "real"); e.root != want || e.runsc != RunscPath(want) {
		t.Errorf("New(%q): root %q, runsc %q; want root %q (realpath.Of)", "link", e.root, e.runsc, want)
	}
}
