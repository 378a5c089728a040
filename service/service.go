// Package service is the one floor under airlock's faces: the CLI, the
// HTTP API, MCP, batch and /run_code reach runners and sandboxes through
// it and nothing else. It owns the engines by name (through Engines, which
// the CLI supplies from package engines, the one place that builds
// concrete engines), the runs,
// admission under --max-sandboxes and of execs under --max-execs, dispatch by sandbox id, destroy with the
// reapers' fallback, and templates with the engine they pin. Policy is
// parsed before it gets here (package wire); what a face does with a
// runner's answer is the face's own translation.
package service

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
)

// Engines gives the service its runners.
type Engines interface {
	// Runner returns a runner on engine name (auto, oci or docker) and
	// the function that releases it once the work is done.
	Runner(ctx context.Context, name string) (*runner.Runner, func(), error)
	// Reapers returns every engine that can free what a sandbox left
	// behind, for a sandbox whose record no longer says its engine.
	Reapers(ctx context.Context) ([]engine.Reaper, func())
}

// Service is airlock's service over one root.
type Service struct {
	root      string
	engines   Engines
	engine    string
	gate      *admission.Gate
	execs     *execGate
	templates *templates.Store
	pools     pools
	// runCode maps a /run_code language to its run-code template.
	runCode map[string]string
	// kube is where faces with no cluster flags of their own (the API,
	// MCP) claim sandboxes on a cluster (WithKube).
	kube *KubeTarget
	log  *slog.Logger
}

// Option configures a Service.
type Option func(*Service)

// WithEngine sets the engine of new work that names none and no template
// (default "auto").
func WithEngine(name string) Option { return func(s *Service) { s.engine = name } }

// WithAdmission caps the sandboxes and runs live at once by gate (airlock
// serve's --max-sandboxes), those claimed on a cluster included (the
// service hands g their count); without it every one is admitted.
func WithAdmission(g *admission.Gate) Option {
	return func(s *Service) {
		s.gate = g
		g.CountAlso(s.kubeCount)
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// New returns the service over root (made absolute, its symlinks
// resolved: runner.ResolveRoot), its runners from engines.
func New(root string, engines Engines, opts ...Option) *Service {
	root = runner.ResolveRoot(root)
	s := &Service{root: root, engines: engines, engine: "auto", templates: templates.Open(root), log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Root is the airlock root the service works on.
func (s *Service) Root() string { return s.root }

// Admit reserves room for one more sandbox or run; release gives it back
// (once a sandbox is made, its record counts it instead). Past the limit
// it returns an *admission.OverLimitError.
func (s *Service) Admit() (release func(), err error) { return s.gate.Admit() }

// MaxSandboxes is the admission's maximum, 0 for none.
func (s *Service) MaxSandboxes() int { return s.gate.Max() }

// Room says whether one more sandbox or run would be admitted now.
func (s *Service) Room() bool { return s.gate.Room() }

// Template reads the sandbox template named name.
func (s *Service) Template(name string) (*templates.Template, error) {
	return s.templates.Get(name)
}

// ForNew returns the runner for new work on engine engineName, else the
// service's.
func (s *Service) ForNew(ctx context.Context, engineName string) (*runner.Runner, func(), error) {
	return s.engines.Runner(ctx, cmp.Or(engineName, s.engine))
}

// Sandbox reads sandbox id's record, even one mid-way gone.
func (s *Service) Sandbox(id string) (runner.SandboxInfo, error) {
	if r, ok, err := s.KubeSandbox(id); ok {
		return kubeInfo(r), err
	}
	return runner.ReadSandbox(s.root, id)
}

// Sandboxes lists the sandboxes recorded under the root, those on a
// cluster last.
func (s *Service) Sandboxes() ([]runner.SandboxInfo, error) {
	list, err := runner.ListSandboxes(s.root)
	if err != nil {
		return nil, err
	}
	kube, err := s.claims().List()
	for _, r := range kube {
		list = append(list, kubeInfo(r))
	}
	return list, err
}

// ForSandbox returns the runner on the engine sandbox id was made with.
// A malformed id is invalid input, an unknown one not found.
func (s *Service) ForSandbox(ctx context.Context, id string) (*runner.Runner, func(), error) {
	if err := runner.CheckSandboxID(id); err != nil {
		return nil, nil, err
	}
	if err := s.onCluster(id); err != nil {
		return nil, nil, err
	}
	si, err := runner.ReadSandbox(s.root, id)
	if err != nil && si.Engine == "" {
		return nil, nil, err
	}
	return s.engines.Runner(ctx, si.Engine)
}

// Open reconnects to live sandbox id on its engine to run one exec in
// it, admitted under WithExecLimits; done releases the runner and the
// exec's room once the exec has ended.
func (s *Service) Open(ctx context.Context, id string) (sb *runner.Sandbox, done func(), err error) {
	if err := s.onCluster(id); err != nil {
		return nil, nil, err
	}
	release, err := s.AdmitExec(id)
	if err != nil {
		return nil, nil, err
	}
	sb, free, err := s.open(ctx, id)
	if err != nil {
		release()
		return nil, nil, err
	}
	return sb, func() { free(); release() }, nil
}

// open reconnects to live sandbox id on its engine; done releases the
// runner once the caller is through with the sandbox.
func (s *Service) open(ctx context.Context, id string) (sb *runner.Sandbox, done func(), err error) {
	if err := s.onCluster(id); err != nil {
		return nil, nil, err
	}
	si, err := runner.ReadSandbox(s.root, id)
	if err != nil {
		return nil, nil, err
	}
	rn, done, err := s.engines.Runner(ctx, si.Engine)
	if err != nil {
		return nil, nil, err
	}
	if sb, err = rn.Open(ctx, id); err != nil {
		done()
		return nil, nil, err
	}
	return sb, done, nil
}

// Destroy ends sandbox id and frees all it held (one on a cluster: its
// claim, and so its pod); an id already gone succeeds. A sandbox whose record no longer says its engine (a create
// cut short, a record removed by hand) is freed by every engine's reaper.
func (s *Service) Destroy(ctx context.Context, id string) error {
	if _, ok, _ := s.KubeSandbox(id); ok {
		return s.claims().Destroy(ctx, id)
	}
	rn, done, err := s.ForSandbox(ctx, id)
	if err == nil {
		defer done()
		return rn.Destroy(ctx, id)
	}
	if errdefs.IsInvalidArgument(err) {
		return err
	}
	if si, rerr := runner.ReadSandbox(s.root, id); rerr == nil && si.Engine != "" {
		// Its engine is named and does not answer: the sandbox may
		// still run there, and its record is what finds it again.
		return err
	}
	reapers, rdone := s.engines.Reapers(ctx)
	defer rdone()
	return runner.RemoveSandbox(ctx, s.root, reapers, id)
}

// Pause checkpoints sandbox id on its engine and frees its memory and
// processes (runner.Pause); an engine that cannot is
// errdefs.ErrNotImplemented, naming one that can.
func (s *Service) Pause(ctx context.Context, id string) (runner.SandboxInfo, error) {
	rn, done, err := s.ForSandbox(ctx, id)
	if err != nil {
		return runner.SandboxInfo{}, err
	}
	defer done()
	return rn.Pause(ctx, id)
}

// Resume restores paused sandbox id under the same id (runner.Resume).
func (s *Service) Resume(ctx context.Context, id string) (runner.SandboxInfo, error) {
	rn, done, err := s.ForSandbox(ctx, id)
	if err != nil {
		return runner.SandboxInfo{}, err
	}
	defer done()
	return rn.Resume(ctx, id)
}
