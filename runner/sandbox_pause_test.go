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

// pausing is an engine that pauses by flipping a flag: the runner's
// records and states are what is under test.
type pausing struct {
	enginetest.Refusing
	paused map[string]bool
}

func (e *pausing) Pause(_ context.Context, id string) error  { e.paused[id] = true; return nil }
func (e *pausing) Resume(_ context.Context, id string) error { e.paused[id] = false; return nil }
func (e *pausing) Paused(_ context.Context, id string) (bool, error) {
	return e.paused[id], nil
}

var _ engine.Pauser = (*pausing)(nil)

func TestPauseAndResumeRecords(t *testing.T) {
	root := t.TempDir()
	eng := &pausing{paused: map[string]bool{}}
	rn := newRunnerAt(t, root, eng)
	const id = "sb-00000000000000000001"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
	si, err := rn.Pause(t.Context(), id)
	if err != nil || si.State != lifecycle.Paused || !eng.paused[id] {
		t.Fatalf("Pause: %v, state %q, engine paused %v", err, si.State, eng.paused[id])
	}
	// Paused, only the TTL counts: the idle timeout passed an hour ago.
	if dl := si.Deadline(time.Now()); !dl.Equal(si.ExpiresAt) {
		t.Errorf("a paused sandbox's deadline is %v, want its TTL %v", dl, si.ExpiresAt)
	}
	if si, err = rn.Pause(t.Context(), id); err != nil || si.State != lifecycle.Paused {
		t.Errorf("pausing a paused sandbox: %v, %q", err, si.State)
	}
	before := time.Now()
	if si, err = rn.Resume(t.Context(), id); err != nil || si.State != lifecycle.Ready || eng.paused[id] {
		t.Fatalf("Resume: %v, state %q, engine paused %v", err, si.State, eng.paused[id])
	}
	if si.LastActivity.Before(before) {
		t.Errorf("a resume is activity: last activity %v", si.LastActivity)
	}
	if si, err = rn.Resume(t.Context(), id); err != nil || si.State != lifecycle.Ready {
		t.Errorf("resuming a ready sandbox: %v, %q", err, si.State)
	}
	// Open resumes a paused sandbox first.
	if _, err := rn.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	rn.Open(t.Context(), id) // the refusing engine opens nothing
	if si, _ := ReadSandbox(root, id); si.State != lifecycle.Ready || eng.paused[id] {
		t.Errorf("after Open: state %q, engine paused %v", si.State, eng.paused[id])
	}
}

func TestPauseRefusals(t *testing.T) {
	root := t.TempDir()
	const busy, made = "sb-00000000000000000002", "sb-00000000000000000003"
	busySandbox(t, root, busy)
	liveSandbox(t, root, made, lifecycle.Created)
	eng := &pausing{paused: map[string]bool{}}
	rn := newRunnerAt(t, root, eng)
	if _, err := rn.Pause(t.Context(), busy); !errdefs.IsConflict(err) || eng.paused[busy] {
		t.Errorf("pausing a sandbox with an exec in progress: %v", err)
	}
	if si, _ := ReadSandbox(root, busy); si.State != lifecycle.Running {
		t.Errorf("a refused pause changed the state to %q", si.State)
	}
	if _, err := rn.Pause(t.Context(), made); !errdefs.IsUnavailable(err) {
		t.Errorf("pausing a sandbox being created: %v", err)
	}
	// An engine that cannot pause says which one can.
	plain := newRunnerAt(t, root, &enginetest.Refusing{})
	_, err := plain.Pause(t.Context(), busy)
	if !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "--engine oci") {
		t.Errorf("pausing on an engine without Pauser: %v", err)
	}
}
