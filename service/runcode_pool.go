package service

// /run_code from pools of ready interpreters: a language named by
// WithRunCodeTemplates is served from the sandbox pool of its run-code
// template (template create --run-code), whose sandboxes are restored
// with the fork server of internal/forkserver waiting for one job. A job
// claims one, writes its files, runs one exec of the fork server's client
// and is fetched and destroyed as a cold one is. The exec agent hands the
// job over; when it could not, the exec fails with an error of kind
// unavailable (engine/oci), which is how the service learns that the fork
// server did not run the job. The exec's exit code and output are the
// job's own, whatever they say.

import (
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/templates"
)

// DefaultRunCodePool is the size of a run-code template's pool when no
// --pool-sandboxes entry names the template.
const DefaultRunCodePool = 2

// WithRunCodeTemplates serves /run_code's code in language LANG from a
// pool of the run-code template templates[LANG]; StartPools checks them
// and makes the pools (of the size a sandbox pool of the template asks,
// else DefaultRunCodePool). Without it every request starts cold.
func WithRunCodeTemplates(templates map[string]string) Option {
	return func(s *Service) { s.runCode = maps.Clone(templates) }
}

// RunCodeTemplate names the run-code template that serves code in
// language (WithRunCodeTemplates), "" when none does.
func (s *Service) RunCodeTemplate(language string) string { return s.runCode[language] }

// checkRunCode refuses a run-code template that cannot serve: its
// language has no fork server, it does not exist, or it holds no
// snapshot of this airlock's fork server. It adds a sandbox pool for any
// that has none.
func (s *Service) checkRunCode() error {
	for _, lang := range slices.Sorted(maps.Keys(s.runCode)) {
		name := s.runCode[lang]
		flag := fmt.Sprintf("--run-code-template %s=%s", lang, name)
		fix := fmt.Sprintf("`airlock template create %s --replace --run-code python [--import MODULE]...`", name)
		if lang != forkserver.Language {
			return fmt.Errorf("%w: %s: only python has a fork server; give python=TEMPLATE", errdefs.ErrInvalidArgument, flag)
		}
		t, err := s.Template(name)
		if err != nil {
			return fmt.Errorf("%s: %w; a run-code template is made with `airlock template create %s --run-code python [--import MODULE]...`", flag, err, name)
		}
		switch {
		case t.Engine != templates.EngineOCI || t.Isolation != isolation.GVisor:
			return fmt.Errorf("%w: %s: template %q runs on engine %s under %s, which has no snapshots; a run-code template runs on engine oci under gvisor: make it with %s", errdefs.ErrNotImplemented, flag, name, t.Engine, t.Isolation, fix)
		case t.Snapshot == "":
			return fmt.Errorf("%w: %s: template %q has no snapshot, so no fork server to serve from: make it with %s", errdefs.ErrInvalidArgument, flag, name, fix)
		case !forkserver.Is(t.Warm):
			return fmt.Errorf("%w: %s: template %q's snapshot holds another program (%.40q…), not this airlock's fork server: make it with %s", errdefs.ErrInvalidArgument, flag, name, t.Warm, fix)
		}
		if !slices.ContainsFunc(s.pools.cfgs, func(c PoolConfig) bool { return c.Sandboxes && c.Template == name }) {
			s.pools.cfgs = append(s.pools.cfgs, PoolConfig{Template: name, Size: DefaultRunCodePool, Sandboxes: true})
		}
	}
	return nil
}

// codeTemplate returns the run-code template that serves c, or "" and
// why c starts cold: its language has none, or it asks for what the
// template's policy does not give (a longer timeout, another memory
// limit).
func (s *Service) codeTemplate(c Code) (*templates.Template, string) {
	name := s.runCode[c.Language]
	if name == "" {
		return nil, "no run-code template for the language"
	}
	t, err := s.Template(name)
	if err != nil {
		return nil, err.Error()
	}
	switch lim := c.Policy.Limits; {
	case len(c.Argv) < 2 || c.Argv[0] != forkserver.Interpreter:
		return nil, "not a python program and its file"
	case !forkserver.Is(t.Warm) || t.Snapshot == "":
		return nil, "the template is no run-code template now"
	case lim.Timeout > t.Limits.Timeout:
		return nil, fmt.Sprintf("run timeout %v is over template %q's %v", lim.Timeout, name, t.Limits.Timeout)
	case c.MemoryAsked && lim.Memory != t.Limits.Memory:
		return nil, fmt.Sprintf("memory limit %v is not template %q's %v", lim.Memory, name, t.Limits.Memory)
	}
	return t, ""
}
