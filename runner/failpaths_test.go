package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// fakeEngine runs nothing: run plays the part of a task's program, from
// its start (Run returned) to its end. It makes no long-lived sandbox.
type fakeEngine struct {
	run        func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error)
	runtimeErr error
	runs       atomic.Int32
	// destroyErr is every task's Destroy's; reaped lists the ids Reap was
	// asked to free.
	destroyErr error
	mu         sync.Mutex
	reaped     []string
}

func (f *fakeEngine) Name() string                                     { return "fake" }
func (f *fakeEngine) Check(context.Context, *engine.SandboxSpec) error { return nil }
func (f *fakeEngine) Run(_ context.Context, s *engine.SandboxSpec) (engine.Task, error) {
	return &fakeRun{f: f, s: s}, nil
}
func (f *fakeEngine) Create(_ context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	return nil, fmt.Errorf("%w: the fake engine makes no long-lived sandbox", errdefs.ErrNotImplemented)
}
func (f *fakeEngine) Leftovers(context.Context) ([]string, error) { return nil, nil }
func (f *fakeEngine) Reap(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reaped = append(f.reaped, id)
	return nil
}
func (f *fakeEngine) Open(_ context.Context, id string) (engine.Sandbox, error) {
	return nil, fmt.Errorf("%w: no sandbox %q", errdefs.ErrNotFound, id)
}
func (f *fakeEngine) Runtime(context.Context, isolation.Mode) (engine.Runtime, error) {
	return engine.Runtime{Name: "fake", Version: "fake 1", Flags: []string{}}, f.runtimeErr
}

// fakeRun is a task of the fake engine.
type fakeRun struct {
	f *fakeEngine
	s *engine.SandboxSpec
}

func (r *fakeRun) ID() string { return r.s.ID }
func (r *fakeRun) Wait(ctx context.Context) (engine.Exit, error) {
	r.f.runs.Add(1)
	return r.f.run(ctx, r.s)
}
func (r *fakeRun) Destroy(context.Context) error { return r.f.destroyErr }

func fakeSpec() Spec {
	return Spec{Image: "sha256:" + strings.Repeat("ab", 32), Argv: []string{"true"}, Output: Output{Disabled: true}}
}

func newFakeRunner(t *testing.T, fe *fakeEngine, opts ...Option) (*Runner, string) {
	t.Helper()
	root := t.TempDir()
	r, err := New(append([]Option{WithRoot(root), WithEngine(fe)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r, root
}

// leftovers lists the state files and run directories under root.
func leftovers(root string) []string {
	states, _ := filepath.Glob(filepath.Join(root, "state", "*.json"))
	runs, _ := filepath.Glob(filepath.Join(root, "runs", "*"))
	return append(states, runs...)
}

func breakAuditLog(t *testing.T, root string) string {
	t.Helper()
	p := filepath.Join(root, "audit.jsonl")
	os.Remove(p)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// A run longer than the lock's bound must still wait, at teardown, for a
// destroyer that holds the run lock, and not remove the run directory
// under it.
func TestTeardownWaitsForADestroyerAfterALongRun(t *testing.T) {
	const bound = time.Second // with room for a loaded host: the destroy holds the lock bound/2
	for _, tc := range []struct {
		name string
		end  func() (engine.Exit, error) // how the engine sees the destroy
	}{
		{"killed", func() (engine.Exit, error) { return engine.Exit{Code: 137}, nil }},
		{"lost", func() (engine.Exit, error) { return engine.Exit{}, engine.Lost("killed from outside") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := &fakeEngine{}
			r, root := newFakeRunner(t, fe, withLockWait(bound))
			lc, err := lifecycle.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			var dirDuringDestroy error
			destroyed := make(chan error, 1)
			fe.run = func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
				time.Sleep(bound + 200*time.Millisecond) // the run outlasts the bound
				holding := make(chan struct{})
				go func() {
					destroyed <- lc.Destroy(context.Background(), j.ID, "", func() error {
						close(holding)
						time.Sleep(bound / 2) // freeing takes a while
						_, dirDuringDestroy = os.Stat(filepath.Join(root, "runs", j.ID))
						return nil
					})
				}()
				<-holding
				return tc.end()
			}
			res, err := r.Run(context.Background(), fakeSpec())
			if derr := <-destroyed; derr != nil {
				t.Fatalf("destroy: %v", derr)
			}
			if dirDuringDestroy != nil {
				t.Errorf("the owner removed the run directory while the destroyer held the run lock: %v", dirDuringDestroy)
			}
			if err != nil || res.Reason != ReasonDestroyed {
				t.Errorf("result %s, %v; want destroyed", res.Reason, err)
			}
			if left := leftovers(root); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// Unreadable state at teardown is an error, added to the engine's, never
// a "destroyed" that hides it.
func TestUnreadableStateAtTeardownIsAnError(t *testing.T) {
	engineErr := fmt.Errorf("%w: the runtime fell over", errdefs.ErrInternal)
	for _, tc := range []struct {
		name string
		err  error
	}{{"engine error", engineErr}, {"program exited", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			fe := &fakeEngine{}
			r, root := newFakeRunner(t, fe)
			fe.run = func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
				if err := os.WriteFile(filepath.Join(root, "state", j.ID+".json"), []byte("{garbage"), 0o600); err != nil {
					t.Error(err)
				}
				return engine.Exit{}, tc.err
			}
			res, err := r.Run(context.Background(), fakeSpec())
			if err == nil || res.Reason != ReasonError || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("result %s, %v; want an error saying the state is corrupt", res.Reason, err)
			}
			if tc.err != nil && (!errors.Is(err, engineErr) || !strings.HasPrefix(err.Error(), engineErr.Error())) {
				t.Errorf("error %q does not keep the engine's error first", err)
			}
			if res.Error != err.Error() || res.Receipt != nil {
				t.Errorf("result error %q, receipt %v", res.Error, res.Receipt != nil)
			}
		})
	}
}

func TestUnwritableAuditFailsTheRunBeforeStart(t *testing.T) {
	fe := &fakeEngine{run: func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil }}
	r, root := newFakeRunner(t, fe)
	audit := breakAuditLog(t, root)
	_, err := r.Run(context.Background(), fakeSpec())
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), audit) {
		t.Fatalf("error %v; want unavailable, naming %s", err, audit)
	}
	if n := fe.runs.Load(); n != 0 {
		t.Errorf("the engine ran %d times", n)
	}
	if left := leftovers(root); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestAuditLostMidRunFailsTheRun(t *testing.T) {
	fe := &fakeEngine{}
	r, root := newFakeRunner(t, fe)
	var audit string
	fe.run = func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
		audit = breakAuditLog(t, root)
		return engine.Exit{Code: 0}, nil
	}
	res, err := r.Run(context.Background(), fakeSpec())
	if !errdefs.IsUnavailable(err) || ErrorKind(err) != "unavailable" || !strings.Contains(err.Error(), audit) {
		t.Fatalf("error %v; want unavailable, naming %s", err, audit)
	}
	if res.Reason != ReasonError || res.Error != err.Error() || res.Receipt != nil {
		t.Errorf("result %s %q, receipt %v; want an error and no receipt", res.Reason, res.Error, res.Receipt != nil)
	}
	if left := leftovers(root); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestRuntimeVersionUnreadableFailsBeforeStart(t *testing.T) {
	fe := &fakeEngine{
		run:        func(ctx context.Context, j *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil },
		runtimeErr: fmt.Errorf("%w: cannot read runsc's version: exit status 1; run `make setup`", errdefs.ErrUnavailable),
	}
	r, root := newFakeRunner(t, fe)
	if _, err := r.Run(context.Background(), fakeSpec()); !errors.Is(err, fe.runtimeErr) {
		t.Fatalf("error %v; want the runtime's", err)
	}
	if n := fe.runs.Load(); n != 0 {
		t.Errorf("the engine ran %d times", n)
	}
	if left := leftovers(root); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// liveRun records a running run with a run directory, as its owner would.
func liveRun(t *testing.T, root string) (*lifecycle.Store, string) {
	t.Helper()
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	id := "0123456789abcdef0123"
	for _, st := range []lifecycle.State{lifecycle.Requested, lifecycle.Created, lifecycle.Ready, lifecycle.Running} {
		if err := lc.Move(id, st, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "runs", id), 0o700); err != nil {
		t.Fatal(err)
	}
	return lc, id
}

func TestKillWithAnUnwritableAuditStillKillsThenFails(t *testing.T) {
	root := t.TempDir()
	_, id := liveRun(t, root)
	audit := breakAuditLog(t, root)
	gone, err := Kill(context.Background(), root, nil, id)
	if gone || !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), audit) {
		t.Fatalf("kill: gone %v, %v; want an unavailable error naming %s", gone, err, audit)
	}
	if left := leftovers(root); len(left) > 0 {
		t.Errorf("the kill did not free the run: %v left", left)
	}
}

func TestDestroyRunBoundsItsLockWait(t *testing.T) {
	root := t.TempDir()
	lc, id := liveRun(t, root)
	held, err := lc.Lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	done := make(chan error, 1)
	go func() { done <- destroyRun(context.Background(), lc, root, nil, id, "killed", 100*time.Millisecond) }()
	select {
	case err := <-done:
		if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), id) {
			t.Errorf("error %v; want a conflict naming the run", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("destroyRun waited for the run lock without bound")
	}
	if _, err := os.Stat(filepath.Join(root, "runs", id)); err != nil {
		t.Errorf("a destroy that never got the lock freed the run: %v", err)
	}
}

// A run whose sandbox the engine could not free keeps its run directory,
// owned by nobody: the next cheap sweep has the engine reap it and removes
// it, where before only a full airlock reap found what the engine held
// (empty cgroups left under the pids hierarchy, say).
func TestUnfreedRunIsSwept(t *testing.T) {
	roottest.Require(t, "a run's scratch is root's")
	fe := &fakeEngine{run: func(context.Context, *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil }, destroyErr: errors.New("the cgroup is busy")}
	r, root := newFakeRunner(t, fe)
	res, err := r.Run(context.Background(), fakeSpec())
	if err == nil || res.ID == "" {
		t.Fatalf("a run whose sandbox was not freed: %+v, %v; want its error", res, err)
	}
	dir := filepath.Join(root, "runs", res.ID)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the run directory went with the sandbox unfreed: %v", err)
	}
	rep, err := Reap(context.Background(), root, func() []engine.Reaper { return []engine.Reaper{fe} }, false)
	if err != nil || !slices.Contains(rep.Reaped, res.ID) || !slices.Contains(fe.reaped, res.ID) {
		t.Fatalf("the sweep: %+v, %v, engine reaped %v; want %s reaped", rep, err, fe.reaped, res.ID)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the run directory outlived the sweep: %v", err)
	}
}
