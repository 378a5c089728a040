package enginetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// ErrRefused is Refusing's answer to every Check.
var ErrRefused = fmt.Errorf("%w: the refusing engine makes nothing", errdefs.ErrUnavailable)

// Refusing is an engine that makes nothing: Check records the spec it is
// handed and refuses it with ErrRefused, so that everything a caller
// decides before a sandbox exists runs for real (the fuzz targets of the
// API and MCP use it), and nothing starts. It claims to be "oci".
type Refusing struct {
	mu      sync.Mutex
	checked []*engine.SandboxSpec
}

var _ engine.Engine = (*Refusing)(nil)

func (e *Refusing) Name() string { return "oci" }

func (e *Refusing) Check(_ context.Context, s *engine.SandboxSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.checked = append(e.checked, s)
	return ErrRefused
}

// Run and Create are never reached: every Check fails.
func (e *Refusing) Run(context.Context, *engine.SandboxSpec) (engine.Task, error) {
	panic("enginetest.Refusing: Run after a refused Check")
}

func (e *Refusing) Create(context.Context, *engine.SandboxSpec) (engine.Sandbox, error) {
	panic("enginetest.Refusing: Create after a refused Check")
}

func (e *Refusing) Open(_ context.Context, id string) (engine.Sandbox, error) {
	return nil, fmt.Errorf("%w: the refusing engine has no sandbox %q", errdefs.ErrNotFound, id)
}

func (e *Refusing) Runtime(context.Context, isolation.Mode) (engine.Runtime, error) {
	return engine.Runtime{}, ErrRefused
}

// Leftovers: the refusing engine holds nothing.
func (e *Refusing) Leftovers(context.Context) ([]string, error) { return nil, nil }

// Reap has nothing to free.
func (e *Refusing) Reap(context.Context, string) error { return nil }

// Checked returns the specs checked since its last call.
func (e *Refusing) Checked() []*engine.SandboxSpec {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.checked
	e.checked = nil
	return s
}
