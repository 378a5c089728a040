package service

import (
	"context"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
)

// RunSpec is a one-shot run's spec and the engine it runs on. On template
// (when named), it is the template's spec narrowed by explicit, the
// settings the caller gave (a widening is invalid input), on the
// template's engine, which engineName must agree with when given. Without
// one, it is explicit on engineName.
func (s *Service) RunSpec(template, engineName string, explicit runner.Spec) (runner.Spec, string, error) {
	return narrowed(s, template, engineName, explicit, (*templates.Template).Narrow)
}

// SandboxSpec is RunSpec for a long-lived sandbox.
func (s *Service) SandboxSpec(template, engineName string, explicit runner.SandboxSpec) (runner.SandboxSpec, string, error) {
	return narrowed(s, template, engineName, explicit, (*templates.Template).NarrowSandbox)
}

func narrowed[S any](s *Service, template, engineName string, explicit S, narrow func(*templates.Template, S) (S, error)) (S, string, error) {
	if template == "" {
		return explicit, engineName, nil
	}
	t, err := s.Template(template)
	if err != nil {
		return explicit, "", err
	}
	if engineName, err = t.EngineFor(engineName); err != nil {
		return explicit, "", err
	}
	n, err := narrow(t, explicit)
	return n, engineName, err
}

// Run runs spec on engine engineName once admitted: from template's warm
// pool when it has one, else started cold.
func (s *Service) Run(ctx context.Context, engineName, template string, spec runner.Spec) (runner.Result, error) {
	rn, done, release, err := s.admitted(ctx, engineName)
	if err != nil {
		return runner.Result{}, err
	}
	defer done()
	defer release()
	if p := s.Pool(template, false, rn); p != nil {
		return p.Run(ctx, spec)
	}
	if res, ran, err := s.runRestored(ctx, rn, engineName, template, spec); ran {
		return res, err
	}
	return rn.Run(ctx, spec)
}

// runRestored runs spec on a sandbox restored from template's snapshot,
// when it has one and spec fits it (runner.RunRestored). On a run-code
// template, `python3 FILE ARGS…` is one job of its fork server. ran is
// false when nothing was done: the run starts cold.
func (s *Service) runRestored(ctx context.Context, rn *runner.Runner, engineName, template string, spec runner.Spec) (_ runner.Result, ran bool, _ error) {
	if template == "" {
		return runner.Result{}, false, nil
	}
	t, err := s.Template(template)
	if err != nil || t.Snapshot == "" {
		return runner.Result{}, false, nil
	}
	base, _, err := s.SandboxSpec(template, engineName, runner.SandboxSpec{})
	if err != nil {
		return runner.Result{}, true, err
	}
	base.Snapshot = t.Snapshot
	var argv []string
	if a := spec.Argv; forkserver.Is(t.Warm) && len(a) >= 2 && a[0] == forkserver.Interpreter && !strings.HasPrefix(a[1], "-") {
		argv = forkserver.ClientArgv(a[1], a[2:]...)
	}
	res, why, err := rn.RunRestored(ctx, spec, base, argv)
	if why != "" {
		s.log.Debug("a run on a snapshot template starts cold", "template", template, "why", why)
		return runner.Result{}, false, nil
	}
	if err == nil && argv != nil {
		err = forkServerFailed(res)
	}
	return res, true, err
}

// Create makes a sandbox of spec on engine engineName once admitted: from
// template's warm pool when it has one, else started cold. Once made, its
// record counts it against the admission.
func (s *Service) Create(ctx context.Context, engineName, template string, spec runner.SandboxSpec) (*runner.Sandbox, error) {
	if template != "" && spec.Snapshot == "" {
		// A template's snapshot, when it has one, is where its sandboxes
		// start from.
		t, err := s.Template(template)
		if err != nil {
			return nil, err
		}
		spec.Snapshot = t.Snapshot
	}
	rn, done, release, err := s.admitted(ctx, engineName)
	if err != nil {
		return nil, err
	}
	defer done()
	defer release()
	if p := s.Pool(template, true, rn); p != nil {
		return p.Create(ctx, spec)
	}
	return rn.Create(ctx, spec)
}

// admitted returns the runner of engine engineName and reserves room for
// one more sandbox or run; a missing engine is reported before a full
// house.
func (s *Service) admitted(ctx context.Context, engineName string) (rn *runner.Runner, done, release func(), err error) {
	if rn, done, err = s.ForNew(ctx, engineName); err != nil {
		return nil, nil, nil, err
	}
	if release, err = s.Admit(); err != nil {
		done()
		return nil, nil, nil, err
	}
	return rn, done, release, nil
}
