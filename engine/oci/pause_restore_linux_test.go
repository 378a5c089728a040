package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// A resume whose runsc restore returns but whose restored sandbox has
// already ended (its sandbox process gone, its gofer still running)
// leaves nothing running, as a restore that fails does: the sandbox stays
// paused, its checkpoint whole, the error says so and how to go on, and
// the next resume restores it.
func TestResumeEndedAtRestoreStaysPaused(t *testing.T) {
	r := newRecordRig(t, "sb-ended-at-restore")
	ctx := context.Background()
	if err := r.e.Pause(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	// The fake runsc's restore, with <root>/die: its sandbox process
	// ends at once, its "gofer" (the sleep) runs on in the cgroup.
	script := filepath.Join(r.root, "runsc")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	const start = "\techo $! > \"$pidfile\"\n"
	if !strings.Contains(string(b), start) {
		t.Fatal("the fake runsc's restore changed; update this test")
	}
	die := filepath.Join(r.root, "die")
	b = []byte(strings.Replace(string(b), start, "\tif [ -f "+die+" ]; then true & d=$!; wait $d; echo $d > \"$pidfile\"; else echo $! > \"$pidfile\"; fi\n", 1))
	if err := os.WriteFile(script, b, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(die, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	err = r.e.Resume(ctx, r.id)
	if !errdefs.IsUnavailable(err) || errors.Is(err, engine.ErrSandboxLost) || !strings.Contains(err.Error(), "stays paused") || !strings.Contains(err.Error(), "airlock sandbox resume "+r.id) {
		t.Errorf("Resume of a sandbox that ended as it was restored: %v; want unavailable, saying it stays paused and how to resume it", err)
	}
	if left := cgroupPids(r.id); len(left) > 0 {
		t.Errorf("processes %v of the sandbox run on after the failed resume; want its runtime stopped", left)
	}
	if paused, err := r.e.Paused(ctx, r.id); !paused || err != nil || !r.e.checkpointed(r.id) {
		t.Errorf("Paused = %v, %v, checkpoint whole %v; want it paused, its checkpoint kept", paused, err, r.e.checkpointed(r.id))
	}
	os.Remove(die)
	r.resumes(t)
}
