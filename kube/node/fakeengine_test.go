package node

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// fakeEngine makes long-lived sandboxes that run nothing: the narrow
// engine boundary, so that the provider, the service and the runner above
// it run for real.
type fakeEngine struct {
	mu   sync.Mutex
	live map[string]bool
	// createGate, when set, holds Create until it is closed; creating,
	// when set, is closed once Create is entered.
	createGate chan struct{}
	creating   chan struct{}
	// exec runs each exec (the pod's program and kubectl's); nil waits
	// until the exec's context ends.
	exec func(ctx context.Context, p *engine.Process) (engine.Exit, error)
}

var _ engine.Engine = (*fakeEngine)(nil)

func (f *fakeEngine) Name() string                                     { return "oci" }
func (f *fakeEngine) Check(context.Context, *engine.SandboxSpec) error { return nil }
func (f *fakeEngine) Run(context.Context, *engine.SandboxSpec) (engine.Task, error) {
	return nil, errdefs.ErrNotImplemented
}

func (f *fakeEngine) Create(ctx context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	if f.creating != nil {
		close(f.creating)
	}
	if f.createGate != nil {
		<-f.createGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live == nil {
		f.live = map[string]bool{}
	}
	f.live[s.ID] = true
	return &fakeSandbox{f, s.ID}, nil
}

func (f *fakeEngine) Open(_ context.Context, id string) (engine.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live[id] {
		return nil, fmt.Errorf("%w: no sandbox %q", errdefs.ErrNotFound, id)
	}
	return &fakeSandbox{f, id}, nil
}

func (f *fakeEngine) Runtime(context.Context, isolation.Mode) (engine.Runtime, error) {
	return engine.Runtime{Name: "fake", Version: "fake 1", Flags: []string{}}, nil
}
func (f *fakeEngine) Leftovers(context.Context) ([]string, error) { return nil, nil }
func (f *fakeEngine) Reap(context.Context, string) error          { return nil }

// setExec replaces how the engine runs execs.
func (f *fakeEngine) setExec(exec func(ctx context.Context, p *engine.Process) (engine.Exit, error)) {
	f.mu.Lock()
	f.exec = exec
	f.mu.Unlock()
}

// sandboxes counts the live sandboxes.
func (f *fakeEngine) sandboxes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

type fakeSandbox struct {
	f  *fakeEngine
	id string
}

func (s *fakeSandbox) ID() string { return s.id }

func (s *fakeSandbox) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	s.f.mu.Lock()
	exec := s.f.exec
	s.f.mu.Unlock()
	if exec != nil {
		return exec(ctx, p)
	}
	<-ctx.Done()
	return engine.Exit{Code: 137}, nil
}

func (s *fakeSandbox) Destroy(context.Context) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	delete(s.f.live, s.id)
	return nil
}

// fakeProvider is a provider on fe, with a root of its own; it returns
// the root and the pods' logs directory. It takes pods as rendered gives
// them.
func fakeProvider(t *testing.T, fe *fakeEngine) (*Provider, string, string) {
	t.Helper()
	roottest.Require(t, "sandboxes mount workspaces")
	root := t.TempDir()
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(fe))
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(root, "node", "n", "logs")
	_, profile := rendered(t)
	p, err := NewProvider(context.Background(), ProviderConfig{Service: fuzztest.Service(root, rn), Node: "n", Profile: profile,
		Logs: logs, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Before the root goes: a deleted pod's program writes its records
	// as it ends.
	t.Cleanup(p.Wait)
	return p, root, logs
}

// renderedPod is the rendered pod ns/p, of UID uid.
func renderedPod(t *testing.T, uid string) *corev1.Pod {
	t.Helper()
	pod, _ := rendered(t)
	pod.Namespace, pod.Name, pod.UID = "ns", "p", types.UID(uid)
	return pod
}
