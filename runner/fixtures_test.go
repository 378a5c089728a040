package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// The sandboxes and records the runner's sandbox tests start from.

// fakeSandboxer plays an engine's sandbox part: exec runs in place of a
// program. It proves the runner's protocol, not any isolation.
type fakeSandboxer struct {
	fakeEngine
	exec      func(ctx context.Context, p *engine.Process) (engine.Exit, error)
	mu        sync.Mutex
	live      map[string]bool
	destroyed atomic.Int32
	specs     []engine.SandboxSpec // as given to Create
}

type fakeSandbox struct {
	f  *fakeSandboxer
	id string
}

func (f *fakeSandboxer) Create(ctx context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live == nil {
		f.live = map[string]bool{}
	}
	f.live[s.ID] = true
	f.specs = append(f.specs, *s)
	return &fakeSandbox{f, s.ID}, nil
}
func (f *fakeSandboxer) Open(_ context.Context, id string) (engine.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live[id] {
		return nil, fmt.Errorf("%w: no sandbox %q", errdefs.ErrNotFound, id)
	}
	return &fakeSandbox{f, id}, nil
}
func (s *fakeSandbox) ID() string { return s.id }
func (s *fakeSandbox) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	if s.f.exec == nil {
		return engine.Exit{}, nil
	}
	return s.f.exec(ctx, p)
}
func (s *fakeSandbox) Destroy(context.Context) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.f.live[s.id] {
		s.f.destroyed.Add(1)
		delete(s.f.live, s.id)
	}
	return nil
}

// newRunnerAt is a runner on root and eng.
func newRunnerAt(t *testing.T, root string, eng engine.Engine) *Runner {
	t.Helper()
	r, err := New(WithRoot(root), WithEngine(eng))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newSandboxRunner is a runner on f and a root of its own.
func newSandboxRunner(t *testing.T, f *fakeSandboxer) (*Runner, string) {
	t.Helper()
	roottest.Require(t, "the sandbox tests mount workspaces")
	root := t.TempDir()
	return newRunnerAt(t, root, f), root
}

// newFakeSandbox creates a sandbox of spec on f, through a runner and
// root of its own; the test closes it.
func newFakeSandbox(t *testing.T, f *fakeSandboxer, spec SandboxSpec) (*Runner, *Sandbox, string) {
	t.Helper()
	r, root := newSandboxRunner(t, f)
	sb, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return r, sb, root
}

func fakeSandboxSpec() SandboxSpec {
	return SandboxSpec{Image: fakeSpec().Image, WorkspaceSize: 16 << 20, Output: Output{Disabled: true}}
}

func stateOf(t *testing.T, root, id string) lifecycle.State {
	t.Helper()
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := lc.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

// sandboxLeftovers lists what a sandbox may leave: state, records, areas.
func sandboxLeftovers(root string) []string {
	left := leftovers(root)
	ents, _ := os.ReadDir(filepath.Join(root, "sandboxes"))
	for _, e := range ents {
		if e.Name() != ".lock" {
			left = append(left, e.Name())
		}
	}
	return left
}

// noSandboxLeftovers fails the test if any sandbox left anything on root.
func noSandboxLeftovers(t *testing.T, root string) {
	t.Helper()
	if left := sandboxLeftovers(root); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// liveSandbox records sandbox id on root as its create would, in state.
func liveSandbox(t *testing.T, root, id string, states ...lifecycle.State) {
	t.Helper()
	if err := os.MkdirAll(sandboxesDir(root), 0o711); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	si := SandboxInfo{ID: id, Engine: "oci", CreatedAt: now, ExpiresAt: now.Add(time.Hour), IdleTimeoutMS: time.Minute.Milliseconds(), LastActivity: now.Add(-time.Hour)}
	if err := writeInfo(root, &si); err != nil {
		t.Fatal(err)
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lc.Begin(t.Context(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	for _, st := range states {
		if err := lc.Move(id, st, "", nil); err != nil {
			t.Fatal(err)
		}
	}
}

// busySandbox records sandbox id on root running, with an exec of this
// process in progress.
func busySandbox(t *testing.T, root, id string) {
	t.Helper()
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready, lifecycle.Running)
	setInfo(t, root, id, func(si *SandboxInfo) { si.Execs = map[string]owner{"x": self()} })
}

// setInfo changes sandbox id's record on root.
func setInfo(t *testing.T, root, id string, set func(*SandboxInfo)) {
	t.Helper()
	if err := updateInfo(root, id, func(si *SandboxInfo) error { set(si); return nil }); err != nil {
		t.Fatal(err)
	}
}

// infoOf is sandbox id's record on root.
func infoOf(t *testing.T, root, id string) SandboxInfo {
	t.Helper()
	si, err := readInfo(root, id)
	if err != nil {
		t.Fatal(err)
	}
	return si
}

// deadOwner names no live process.
var deadOwner = owner{PID: 1 << 30, Start: 1}
