package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// pausingEngine is an engine of long-lived sandboxes in memory that can
// pause, whose Destroy can be held.
type pausingEngine struct {
	mu      sync.Mutex
	live    map[string]bool
	paused  map[string]bool
	hold    chan struct{} // when set, Destroy waits on it
	inDestr chan string   // told when a Destroy starts
}

func (f *pausingEngine) Name() string                                     { return "oci" }
func (f *pausingEngine) Check(context.Context, *engine.SandboxSpec) error { return nil }
func (f *pausingEngine) Run(context.Context, *engine.SandboxSpec) (engine.Task, error) {
	return nil, errdefs.ErrNotImplemented
}
func (f *pausingEngine) Create(_ context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live == nil {
		f.live, f.paused = map[string]bool{}, map[string]bool{}
	}
	f.live[s.ID] = true
	return &pausingSandbox{f, s.ID}, nil
}
func (f *pausingEngine) Open(_ context.Context, id string) (engine.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live[id] {
		return nil, fmt.Errorf("%w: no sandbox %q", errdefs.ErrNotFound, id)
	}
	return &pausingSandbox{f, id}, nil
}
func (f *pausingEngine) Runtime(context.Context, isolation.Mode) (engine.Runtime, error) {
	return engine.Runtime{Name: "fake", Version: "fake 1", Flags: []string{}}, nil
}
func (f *pausingEngine) Leftovers(context.Context) ([]string, error) { return nil, nil }
func (f *pausingEngine) Reap(_ context.Context, id string) error {
	return f.destroy(id)
}
func (f *pausingEngine) destroy(id string) error {
	f.mu.Lock()
	was := f.live[id]
	hold, in := f.hold, f.inDestr
	f.mu.Unlock()
	if was && hold != nil {
		if in != nil {
			in <- id
		}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, id)
	delete(f.paused, id)
	return nil
}
func (f *pausingEngine) Pause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused[id] = true
	return nil
}
func (f *pausingEngine) Resume(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.paused, id)
	return nil
}
func (f *pausingEngine) Paused(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused[id], nil
}
func (f *pausingEngine) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

type pausingSandbox struct {
	f  *pausingEngine
	id string
}

func (s *pausingSandbox) ID() string { return s.id }
func (s *pausingSandbox) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	s.f.mu.Lock()
	paused := s.f.paused[s.id]
	s.f.mu.Unlock()
	if paused {
		return engine.Exit{}, fmt.Errorf("%w: paused", errdefs.ErrFailedPrecondition)
	}
	return engine.Exit{Code: 0}, nil
}
func (s *pausingSandbox) Destroy(context.Context) error { return s.f.destroy(s.id) }

var _ engine.Pauser = (*pausingEngine)(nil)

func pausingService(t *testing.T, f *pausingEngine, opts ...service.Option) (*service.Service, string) {
	t.Helper()
	roottest.Require(t, "the sandbox tests mount workspaces")
	root := t.TempDir()
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(f))
	if err != nil {
		t.Fatal(err)
	}
	return service.New(root, fuzztest.Engines(rn), opts...), root
}

func pausingSpec() runner.SandboxSpec {
	return runner.SandboxSpec{Image: "sha256:" + strings.Repeat("ab", 32), WorkspaceSize: 16 << 20, Output: runner.Output{Disabled: true}}
}

// --max-sandboxes 1: while sandbox A is being destroyed (its engine still
// holds it), a second create is not admitted.
func TestAdmissionCountsSandboxBeingDestroyed(t *testing.T) {
	ctx := context.Background()
	f := &pausingEngine{}
	var root string
	var s *service.Service
	{
		roottest.Require(t, "the sandbox tests mount workspaces")
		root = t.TempDir()
		rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(f))
		if err != nil {
			t.Fatal(err)
		}
		s = service.New(root, fuzztest.Engines(rn), service.WithAdmission(admission.New(root, 1)))
	}
	a, err := s.Create(ctx, "", "", pausingSpec())
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	in := make(chan string, 4)
	f.mu.Lock()
	f.hold, f.inDestr = hold, in
	f.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- s.Destroy(ctx, a.ID()) }()
	<-in // A's engine destroy has begun and is held
	b, berr := s.Create(ctx, "", "", pausingSpec())
	live := f.liveCount()
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(hold)
	if err := <-done; err != nil {
		t.Errorf("destroying A: %v", err)
	}
	if berr == nil {
		s.Destroy(ctx, b.ID())
		t.Fatalf("a second sandbox was admitted while the first was being destroyed: %d in the engine under --max-sandboxes 1", live)
	}
}

// An exec into a sandbox another client paused after the exec's Open is
// told to try again (conflict), not that the sandbox is gone: it is alive.
func TestExecIntoSandboxPausedSinceOpen(t *testing.T) {
	ctx := context.Background()
	f := &pausingEngine{}
	s, _ := pausingService(t, f)
	sb, err := s.Create(ctx, "", "", pausingSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx, sb.ID())
	h, done, err := s.Open(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, err := s.Pause(ctx, sb.ID()); err != nil {
		t.Fatal(err)
	}
	_, err = h.Exec(ctx, runner.ExecSpec{Argv: []string{"true"}})
	if !errdefs.IsConflict(err) {
		t.Fatalf("exec into a sandbox paused since its open: %v; want a conflict", err)
	}
}

// downEngines: the record's engine does not answer (dockerd down); the
// reapers are the engines that do, which do not hold the sandbox.
type downEngines struct{ reaped []string }

func (d *downEngines) Runner(context.Context, string) (*runner.Runner, func(), error) {
	return nil, nil, fmt.Errorf("%w: dockerd does not answer", errdefs.ErrUnavailable)
}
func (d *downEngines) Reapers(context.Context) ([]engine.Reaper, func()) {
	return []engine.Reaper{otherReaper{d}}, func() {}
}

type otherReaper struct{ d *downEngines }

func (otherReaper) Leftovers(context.Context) ([]string, error) { return nil, nil }
func (r otherReaper) Reap(_ context.Context, id string) error {
	r.d.reaped = append(r.d.reaped, id)
	return nil
}

// Destroying a sandbox whose record names its engine, while that engine
// does not answer, fails as unavailable and keeps the record: the other
// engines' reapers would "free" it while it still runs on its own.
func TestDestroyWithItsEngineDownKeepsTheSandbox(t *testing.T) {
	ctx := context.Background()
	f := &pausingEngine{}
	s, root := pausingService(t, f)
	sb, err := s.Create(ctx, "", "", pausingSpec())
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()
	defer s.Destroy(ctx, id)
	down := service.New(root, &downEngines{})
	derr := down.Destroy(ctx, id)
	if !errdefs.IsUnavailable(derr) {
		t.Errorf("destroy with the sandbox's engine down: %v; want unavailable", derr)
	}
	if _, err := runner.ReadSandbox(root, id); err != nil || f.liveCount() != 1 {
		t.Errorf("after it, the record reads %v and the engine holds %d sandboxes; want the record and 1", err, f.liveCount())
	}
}
