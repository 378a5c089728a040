package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

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
	return runner.SandboxSpec{Policy: pol, TTL: pol.Limits.Timeout + codeGrace, IdleTimeout: codeGrace, WorkspaceSize: CodeWorkspace, Output: runner.Output{Disabled: true}}
}

// Code is the work of one /run_code request.
type Code struct {
	// Policy is the sandbox's; its timeout is the run's.
	Policy isolation.Policy
	// Files are written before the run, by absolute path in the sandbox.
	Files map[string][]byte
	Argv  []string
	Stdin io.Reader
	// Fetch, when set, reads what the run left, before the sandbox is
	// destroyed.
	Fetch func(context.Context, *runner.Sandbox) error
}

// CodeRun is what RunCode did.
type CodeRun struct {
	Result runner.Result
	// Create is how long the sandbox took to make, Exec the run.
	Create, Exec time.Duration
	// Destroy is the sandbox's destroy failing; its TTL frees it then.
	Destroy error
}

// RunCode runs c in a sandbox made for it on the service's engine, once
// admitted, and destroys the sandbox. An error names the step that
// failed: creating the sandbox, writing a file, running the code or
// fetching files.
func (s *Service) RunCode(ctx context.Context, c Code) (run CodeRun, err error) {
	rn, done, release, err := s.admitted(ctx, "")
	if err != nil {
		return run, err
	}
	defer done()
	defer release()
	begin := time.Now()
	sb, err := rn.Create(ctx, CodeSandbox(c.Policy))
	if err != nil {
		return run, fmt.Errorf("creating the sandbox: %w", err)
	}
	run.Create = time.Since(begin)
	defer func() {
		if run.Destroy = sb.Close(context.WithoutCancel(ctx)); run.Destroy != nil {
			s.log.Warn("destroying a run_code sandbox", "sandbox_id", sb.ID(), "err", run.Destroy)
		}
	}()
	// In order of path, so that the same request fails the same way.
	for _, p := range slices.Sorted(maps.Keys(c.Files)) {
		b := c.Files[p]
		if _, err := sb.Upload(ctx, p, bytes.NewReader(b), int64(len(b))+1); err != nil {
			return run, fmt.Errorf("writing %s: %w", p, err)
		}
	}
	begin = time.Now()
	run.Result, err = sb.Exec(ctx, runner.ExecSpec{Argv: c.Argv, Timeout: c.Policy.Limits.Timeout, Stdin: c.Stdin})
	run.Exec = time.Since(begin)
	if err != nil {
		return run, fmt.Errorf("running the code: %w", err)
	}
	if c.Fetch != nil {
		if err := c.Fetch(ctx, sb); err != nil {
			return run, fmt.Errorf("fetching files: %w", err)
		}
	}
	return run, nil
}
