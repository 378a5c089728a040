package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// snapshotting is an engine that snapshots by recording the id: the
// runner's states and refusals are what is under test.
type snapshotting struct {
	enginetest.Refusing
	taken []string
}

func (e *snapshotting) Snapshot(_ context.Context, id string) (string, error) {
	e.taken = append(e.taken, id)
	return strings.Repeat("a", 64), nil
}

func (e *snapshotting) Restore(context.Context, *engine.SandboxSpec, string) (engine.Sandbox, error) {
	return nil, errdefs.ErrNotImplemented
}
func (e *snapshotting) RemoveSnapshot(context.Context, string) error { return nil }
func (e *snapshotting) Snapshots(context.Context) (map[string]time.Time, error) {
	return nil, nil
}

var _ engine.Snapshotter = (*snapshotting)(nil)

// A snapshot is taken of a ready sandbox with no exec in progress, which
// is left paused; a busy one, one being created and an engine without
// snapshots are refused, and nothing is taken.
func TestSnapshotRecords(t *testing.T) {
	root := t.TempDir()
	const ready, busy, made = "sb-00000000000000000011", "sb-00000000000000000012", "sb-00000000000000000013"
	liveSandbox(t, root, ready, lifecycle.Created, lifecycle.Ready)
	busySandbox(t, root, busy)
	liveSandbox(t, root, made, lifecycle.Created)
	eng := &snapshotting{}
	rn, err := New(WithRoot(root), WithEngine(eng))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := rn.Snapshot(t.Context(), ready)
	if err != nil || snap != strings.Repeat("a", 64) {
		t.Fatalf("Snapshot: %q, %v", snap, err)
	}
	if si, _ := ReadSandbox(root, ready); si.State != lifecycle.Paused {
		t.Errorf("after its snapshot the sandbox is %q; want paused, for no exec to start", si.State)
	}
	if _, err := rn.Snapshot(t.Context(), busy); !errdefs.IsConflict(err) {
		t.Errorf("a snapshot of a sandbox with an exec in progress: %v", err)
	}
	if _, err := rn.Snapshot(t.Context(), made); !errdefs.IsUnavailable(err) {
		t.Errorf("a snapshot of a sandbox being created: %v", err)
	}
	if len(eng.taken) != 1 {
		t.Errorf("the engine took %v; want only %s", eng.taken, ready)
	}

	plain, err := New(WithRoot(root), WithEngine(&enginetest.Refusing{}))
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Snapshot": func() error { _, err := plain.Snapshot(t.Context(), ready); return err },
		"Create":   func() error { _, err := plain.Create(t.Context(), SandboxSpec{Snapshot: snap}); return err },
		"Warm": func() error {
			_, err := plain.Warm(t.Context(), SandboxSpec{}, WarmSpec{Argv: []string{"true"}, Timeout: time.Second})
			return err
		},
	} {
		if err := call(); !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "--engine oci") {
			t.Errorf("%s on an engine without snapshots: %v", name, err)
		}
	}
	if _, err := rn.Warm(t.Context(), SandboxSpec{}, WarmSpec{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Warm without a program: %v", err)
	}
}
