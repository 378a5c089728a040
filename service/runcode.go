package service

import (
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
