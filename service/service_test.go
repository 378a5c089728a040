package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// rootWithTemplate is a root holding template "py" on engine.
func rootWithTemplate(t *testing.T, eng string) string {
	root := t.TempDir()
	fuzztest.PutTemplate(t, root, "py", runner.Spec{}, eng)
	return root
}

// New work goes to the engine asked for, else the service's; on a
// template, to the template's, which an explicit engine may not change,
// and the template's spec is narrowed by what was asked, never widened.
func TestNewWork(t *testing.T) {
	ctx := context.Background()
	n := &fuzztest.NoEngines{}
	s := service.New(rootWithTemplate(t, "oci"), n, service.WithEngine("docker"))
	for _, c := range []struct {
		engine, template string
		want             string
	}{{"", "", "docker"}, {"oci", "", "oci"}, {"", "py", "oci"}, {"auto", "py", "oci"}, {"oci", "py", "oci"}} {
		spec, eng, err := s.RunSpec(c.template, c.engine, runner.Spec{Argv: []string{"true"}})
		if err != nil {
			t.Fatalf("engine %q, template %q: %v", c.engine, c.template, err)
		}
		if c.template != "" && spec.Policy.Limits.Memory == 0 {
			t.Errorf("template %q: the spec is not the template's: %+v", c.template, spec.Policy)
		}
		_, err = s.Run(ctx, eng, c.template, spec)
		if asked := n.Asked(); !errors.Is(err, fuzztest.ErrNoEngine) || !slices.Equal(asked, []string{c.want}) {
			t.Errorf("engine %q, template %q: asked %v (%v), want %s", c.engine, c.template, asked, err, c.want)
		}
		_, err = s.Create(ctx, eng, c.template, runner.SandboxSpec{})
		if asked := n.Asked(); !errors.Is(err, fuzztest.ErrNoEngine) || !slices.Equal(asked, []string{c.want}) {
			t.Errorf("a sandbox on engine %q, template %q: asked %v (%v), want %s", c.engine, c.template, asked, err, c.want)
		}
	}
	if _, _, err := s.RunSpec("py", "docker", runner.Spec{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("docker on an oci template: %v; want invalid input", err)
	}
	wide := runner.SandboxSpec{}
	wide.Policy.Limits.Memory = 1 << 40
	if _, _, err := s.SandboxSpec("py", "", wide); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("a sandbox widening the template's memory: %v; want invalid input naming memory", err)
	}
	if _, _, err := s.RunSpec("nope", "", runner.Spec{}); !errdefs.IsNotFound(err) {
		t.Errorf("an unknown template: %v", err)
	}
	if asked := n.Asked(); len(asked) > 0 {
		t.Errorf("engines asked for refused work: %v", asked)
	}
}

// Dispatch by id refuses a malformed id and an unknown one before any
// engine is asked.
func TestForSandbox(t *testing.T) {
	ctx := context.Background()
	n := &fuzztest.NoEngines{}
	s := service.New(t.TempDir(), n)
	if _, _, err := s.ForSandbox(ctx, "sb-../../etc"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a malformed id: %v", err)
	}
	if _, _, err := s.ForSandbox(ctx, "sb-0123456789abcdef0123"); !errdefs.IsNotFound(err) {
		t.Errorf("an unknown id: %v", err)
	}
	if _, _, err := s.Open(ctx, "sb-0123456789abcdef0123"); !errdefs.IsNotFound(err) {
		t.Errorf("opening an unknown id: %v", err)
	}
	if asked := n.Asked(); len(asked) > 0 {
		t.Errorf("engines asked: %v", asked)
	}
}

// A sandbox with no record is freed through every reaper, and succeeds;
// a malformed id reaches none.
func TestDestroyFallsBackToReapers(t *testing.T) {
	ctx := context.Background()
	n := &fuzztest.NoEngines{}
	s := service.New(t.TempDir(), n)
	if err := s.Destroy(ctx, "sb-../x"); !errdefs.IsInvalidArgument(err) || len(n.Reaped()) > 0 {
		t.Fatalf("a malformed id: %v, reaped %v", err, n.Reaped())
	}
	id := "sb-0123456789abcdef0123"
	if err := s.Destroy(ctx, id); err != nil {
		t.Fatalf("destroying a sandbox with no record: %v", err)
	}
	if reaped := n.Reaped(); !slices.Equal(reaped, []string{id}) {
		t.Errorf("reaped %v, want [%s]", reaped, id)
	}
}

// Admission is the gate's: one past its maximum is over the limit, and a
// service without one admits everything.
func TestAdmit(t *testing.T) {
	root := t.TempDir()
	s := service.New(root, &fuzztest.NoEngines{}, service.WithAdmission(admission.New(root, 1)))
	release, err := s.Admit()
	if err != nil || s.Room() {
		t.Fatalf("the first admission: %v, room %v", err, s.Room())
	}
	var over *admission.OverLimitError
	if _, err := s.Admit(); !errors.As(err, &over) || !errdefs.IsResourceExhausted(err) {
		t.Fatalf("past the maximum: %v", err)
	}
	release()
	if !s.Room() {
		t.Fatal("no room once released")
	}
	free := service.New(root, &fuzztest.NoEngines{})
	for range 3 {
		if _, err := free.Admit(); err != nil {
			t.Fatalf("without a gate: %v", err)
		}
	}
}

// Pools that leave no room under the maximum, or two pools of one
// template, are refused before any is made; with none, no template has a
// pool.
func TestStartPoolsRefuses(t *testing.T) {
	ctx := context.Background()
	root := rootWithTemplate(t, "oci")
	n := &fuzztest.NoEngines{}
	full := service.New(root, n, service.WithAdmission(admission.New(root, 2)),
		service.WithPools([]service.PoolConfig{{Template: "py", Size: 2}}, service.PoolOptions{}))
	if err := full.StartPools(ctx); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--max-sandboxes 2") {
		t.Errorf("pools as large as the maximum: %v", err)
	}
	dup := service.New(root, n, service.WithPools([]service.PoolConfig{{Template: "py", Size: 1}, {Template: "py", Size: 1}}, service.PoolOptions{}))
	if err := dup.StartPools(ctx); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "two --pool") {
		t.Errorf("two pools of one template: %v", err)
	}
	if asked := n.Asked(); len(asked) > 0 {
		t.Errorf("engines asked %v before the pools were refused", asked)
	}
	none := service.New(root, n)
	if err := none.StartPools(ctx); err != nil {
		t.Fatal(err)
	}
	if p := none.Pool("py", false, nil); p != nil || len(none.PoolStats()) != 0 {
		t.Errorf("a service without pools has one: %v", p)
	}
	none.ClosePools()
	// Closed for good: a server's pools are not started again.
	if err := none.StartPools(ctx); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("StartPools after ClosePools: %v, want a refusal", err)
	}
}

// The service's root, which the servers' spools and templates hang off and
// the runner's reaps take, is absolute with its symlinks resolved
// (runner.ResolveRoot): a relative --root or AIRLOCK_ROOT, or one reached
// through a symlink, names the same directory as the kernel's mountinfo.
func TestNewResolvesRoot(t *testing.T) {
	base := roottest.LinkedDir(t)
	if got, want := service.New("link", &fuzztest.NoEngines{}).Root(), filepath.Join(base, "real"); got != want {
		t.Errorf("New(%q).Root() = %q; want %q (realpath.Of)", "link", got, want)
	}
}
