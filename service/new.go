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
	if res, ran, err := s.runRestored(ctx, rn, template, spec); ran {
		return res, err
	}
	return rn.Run(ctx, spec)
}

// runRestored runs spec on a sandbox restored from template's snapshot,
// when it has one and spec fits it (runner.RunRestored). On a run-code
// template, a python program is one job of its fork server
// (forkServerJob). ran is false when nothing was done: the run starts
// cold.
func (s *Service) runRestored(ctx context.Context, rn *runner.Runner, template string, spec runner.Spec) (_ runner.Result, ran bool, _ error) {
	if template == "" {
		return runner.Result{}, false, nil
	}
	t, err := s.Template(template)
	if err != nil || t.Snapshot == "" {
		return runner.Result{}, false, nil
	}
	// rn is already the template's engine's: the template itself gives
	// the sandbox's spec.
	base, err := t.NarrowSandbox(runner.SandboxSpec{})
	if err != nil {
		return runner.Result{}, true, err
	}
	base.Snapshot = t.Snapshot
	argv, files := forkServerJob(t, spec.Argv)
	res, why, err := rn.RunRestored(ctx, spec, base, argv, files)
	if why != "" {
		s.log.Debug("a run on a snapshot template starts cold", "template", template, "why", why)
		return runner.Result{}, false, nil
	}
	return res, true, err
}

// Create makes a sandbox of spec on engine engineName once admitted: from
// template's warm pool when it has one, else started cold. Once made, its
// record counts it against the admission.
func (s *Service) Create(ctx context.Context, engineName, template string, spec runner.SandboxSpec) (*runner.Sandbox, error) {
	sb, refill, err := s.claim(ctx, engineName, template, spec)
	refill()
	return sb, err
}

// claim is Create for a sandbox that serves one short job: a pool it is
// taken from refills once refill is called (runner.Pool.Claim).
func (s *Service) claim(ctx context.Context, engineName, template string, spec runner.SandboxSpec) (*runner.Sandbox, func(), error) {
	none := func() {}
	if template != "" && spec.Snapshot == "" {
		// A template's snapshot, when it has one, is where its sandboxes
		// start from.
		t, err := s.Template(template)
		if err != nil {
			return nil, none, err
		}
		spec.Snapshot = t.Snapshot
	}
	rn, done, release, err := s.admitted(ctx, engineName)
	if err != nil {
		return nil, none, err
	}
	defer done()
	defer release()
	if p := s.Pool(template, true, rn); p != nil {
		return p.Claim(ctx, spec)
	}
	sb, err := rn.Create(ctx, spec)
	return sb, none, err
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

// codeFile is where a run's `python3 -c CODE` is written for the fork
// server, which runs files.
const codeFile = "/tmp/airlock-code.py"

// forkServerJob is the exec that runs argv as one job of t's fork server,
// and the files it needs: `python3 FILE ARGS…` as it is, `python3 -c CODE
// ARGS…` with CODE written to codeFile (so sys.argv[0] is that path, not
// "-c"). Nil for any other argv, or a template with no fork server: it
// then runs as it is.
func forkServerJob(t *templates.Template, argv []string) ([]string, map[string][]byte) {
	if !forkserver.Is(t.Warm) || len(argv) < 2 || argv[0] != forkserver.Interpreter {
		return nil, nil
	}
	switch {
	case argv[1] == "-c" && len(argv) >= 3:
		return forkserver.ClientArgv(codeFile, argv[3:]...), map[string][]byte{codeFile: []byte(argv[2])}
	case !strings.HasPrefix(argv[1], "-"):
		return forkserver.ClientArgv(argv[1], argv[2:]...), nil
	}
	return nil, nil
}
