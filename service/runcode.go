package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// The sandbox of one SandboxFusion /run_code request: made for the
// request, its files written, its code run once, its files fetched, and
// destroyed. The face translates the request; its shape is here.
const (
	// CodeTimeout is a request's run timeout when it gives none.
	CodeTimeout = 10 * time.Second
	// CodeWorkspace caps the sandbox's workspace, and so each fetched
	// file.
	CodeWorkspace = 256 << 20
	// codeGrace is how long the sandbox may outlive its run timeout (the
	// files' upload and fetch), and idle between them, before its
	// supervisor ends it should the request's server die.
	codeGrace = 5 * time.Minute
)

// CodeSandbox is the long-lived sandbox a /run_code request runs in, on
// policy pol (its timeout the run's): no output directory, a
// CodeWorkspace workspace, and a TTL and an idle timeout that end it even
// if its server is gone.
func CodeSandbox(pol isolation.Policy) runner.SandboxSpec {
	return runner.SandboxSpec{Policy: pol, TTL: pol.Limits.Timeout + codeGrace, IdleTimeout: codeGrace, WorkspaceSize: CodeWorkspace, Output: runner.Output{Disabled: true}, OneShot: true}
}

// Code is the work of one /run_code request.
type Code struct {
	// Language is the code's, which picks its run-code template
	// (WithRunCodeTemplates), if any.
	Language string
	// Policy is the sandbox's; its timeout is the run's. A zero timeout
	// is the run-code template's when its pool serves the code, else
	// isolation.Default()'s (MCP's run_code without timeout_s).
	Policy isolation.Policy
	// MemoryAsked says the client gave Policy's memory limit (else it is
	// the default's): a run-code template serves such code only when its
	// memory is that limit.
	MemoryAsked bool
	// Files are written before the run, by absolute path in the sandbox.
	Files map[string][]byte
	// Argv runs the code: the interpreter, then the code's file. From a
	// run-code template's pool the fork server runs the file instead.
	Argv  []string
	Stdin io.Reader
	// Fetch, when set, reads what the run left, before the sandbox is
	// destroyed.
	Fetch func(context.Context, *runner.Sandbox) error
}

// CodeRun is what RunCode did.
type CodeRun struct {
	Result runner.Result
	// Create is how long the sandbox took to make (or to claim from a
	// pool), Upload the files' writing, Exec the run, Fetch the fetching
	// of files, Close the destroy.
	Create, Upload, Exec, Fetch, Close time.Duration
	// Destroy is the sandbox's destroy failing; its TTL frees it then.
	// A pooled run's sandbox is destroyed after RunCode returns, and its
	// failure only logged.
	Destroy error
	// SandboxID is the sandbox the code ran in.
	SandboxID string
	// Template is the run-code template whose pool served the run, ""
	// when it started cold; Cold then says why, for a language that has
	// a run-code template.
	Template, Cold string
}

// CodeSource is how code in one language is run: written to File in the
// sandbox, then File run by Interpreter.
type CodeSource struct{ File, Interpreter string }

// codeSources are the languages /run_code and MCP's run_code serve.
var codeSources = map[string]CodeSource{
	"python": {"/home/user/.airlock_main.py", "python3"},
	"bash":   {"/home/user/.airlock_main.sh", "bash"},
}

// CodeLanguage returns how code in language is run; ok is false for a
// language neither face serves.
func CodeLanguage(language string) (src CodeSource, ok bool) {
	src, ok = codeSources[language]
	return src, ok
}

// RunCode runs c in a sandbox made for it, once admitted, and destroys
// the sandbox: one from the pool of c's language's run-code template when
// it has one and c fits its policy (the job then runs through the
// sandbox's fork server), else one made cold on the service's engine. An
// error names the step that failed: creating the sandbox, writing a
// file, running the code or fetching files.
func (s *Service) RunCode(ctx context.Context, c Code) (run CodeRun, err error) {
	argv := c.Argv
	var create func() (*runner.Sandbox, error)
	refill := func() {}
	t, why := s.codeTemplate(c)
	if c.Policy.Limits.Timeout == 0 {
		c.Policy.Limits.Timeout = isolation.Default().Limits.Timeout
		if t != nil {
			c.Policy.Limits.Timeout = t.Limits.Timeout
		}
	}
	if t != nil {
		run.Template, argv = t.Name, forkserver.ClientArgv(c.Argv[1], c.Argv[2:]...)
		create = func() (*runner.Sandbox, error) {
			// The template read once: each read validates it again.
			eng, err := t.EngineFor("")
			if err != nil {
				return nil, err
			}
			spec, err := t.NarrowSandbox(runner.SandboxSpec{TTL: c.Policy.Limits.Timeout + codeGrace, IdleTimeout: codeGrace, OneShot: true})
			if err != nil {
				return nil, err
			}
			spec.Snapshot = t.Snapshot
			sb, done, err := s.claim(ctx, eng, t.Name, spec)
			refill = done
			return sb, err
		}
	} else {
		if _, ok := s.runCode[c.Language]; ok {
			run.Cold = why
			s.log.Debug("run_code starts cold", "language", c.Language, "why", why)
		}
		rn, done, release, err := s.admitted(ctx, "")
		if err != nil {
			return run, err
		}
		defer done()
		defer release()
		create = func() (*runner.Sandbox, error) { return rn.Create(ctx, CodeSandbox(c.Policy)) }
	}
	begin := time.Now()
	sb, err := create()
	// A pool refills once the job is over: its restore would take the CPU
	// from the job.
	defer func() { refill() }()
	if err != nil {
		return run, fmt.Errorf("creating the sandbox: %w", err)
	}
	run.Create, run.SandboxID = time.Since(begin), sb.ID()
	defer func() {
		// A pooled sandbox is destroyed after the answer, as a pooled
		// run's is: its record counts it against the admission until
		// then, and ClosePools waits for it. A cold one before, as ever.
		if t == nil {
			s.closeCode(ctx, sb, &run)
			return
		}
		r := run
		s.retiring(func() { s.closeCode(ctx, sb, &r) })
	}()
	begin = time.Now()
	// In order of path, so that the same request fails the same way.
	for _, p := range slices.Sorted(maps.Keys(c.Files)) {
		b := c.Files[p]
		if _, err := sb.Upload(ctx, p, bytes.NewReader(b), int64(len(b))+1); err != nil {
			return run, fmt.Errorf("writing %s: %w", p, err)
		}
	}
	run.Upload = time.Since(begin)
	begin = time.Now()
	run.Result, err = sb.Exec(ctx, runner.ExecSpec{Argv: argv, Timeout: c.Policy.Limits.Timeout, Stdin: c.Stdin})
	run.Exec = time.Since(begin)
	if err != nil {
		return run, fmt.Errorf("running the code: %w", err)
	}
	if c.Fetch != nil {
		begin = time.Now()
		err := c.Fetch(ctx, sb)
		run.Fetch = time.Since(begin)
		if err != nil {
			return run, fmt.Errorf("fetching files: %w", err)
		}
	}
	return run, nil
}

// closeCode destroys a /run_code sandbox, and logs the run's steps.
func (s *Service) closeCode(ctx context.Context, sb *runner.Sandbox, run *CodeRun) {
	begin := time.Now()
	if run.Destroy = sb.Close(context.WithoutCancel(ctx)); run.Destroy != nil {
		s.log.Warn("destroying a run_code sandbox", "sandbox_id", sb.ID(), "err", run.Destroy)
	}
	run.Close = time.Since(begin)
	s.log.Debug("run_code", "sandbox_id", sb.ID(), "template", run.Template, "create_ms", ms(run.Create), "upload_ms", ms(run.Upload),
		"exec_ms", ms(run.Exec), "fetch_ms", ms(run.Fetch), "destroy_ms", ms(run.Close))
}

// ms is d in milliseconds, for logs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
