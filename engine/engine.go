// Package engine defines what airlock asks of a container engine: run one
// job under a policy, report how it ended, and leave nothing behind.
//
// Rules every engine keeps:
//   - Nothing is created until the image and the runtime have been checked.
//   - When the run's context is done, the engine kills the sandbox, waits for
//     it to exit and removes it, on a context of its own: a cancelled caller
//     never leaves a sandbox behind.
//   - The program's outcome (exit code, timeout, OOM) is an Exit, not an
//     error. An error means the engine failed.
package engine

import (
	"context"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/opencontainers/go-digest"
)

// Job is one program to run.
type Job struct {
	// ID names the sandbox; unique per run.
	ID string
	// Image is the image ID (sha256 of its config).
	Image digest.Digest
	// Argv is the program and its arguments, run without a shell.
	Argv []string
	// Env holds "K=V" entries; nothing else from the host reaches the sandbox.
	Env    []string
	Policy isolation.Policy
	// Stdin feeds the program's stdin; nil means stdin is closed.
	Stdin io.Reader
	// Stdout and Stderr receive the program's output as it arrives. They must
	// not block for long: the engine reads the program through them.
	Stdout, Stderr io.Writer
	// Mounts are airlock's own scratch directories (staged inputs, the
	// output tmpfs); nothing else from the host is ever mounted.
	Mounts []Mount
	// Workdir is the program's working directory; empty keeps the image's.
	Workdir string
	// Owner and Deadline label the sandbox so that a sweep can find it.
	Owner    string
	Deadline time.Time
	// OnState, when set, hears the sandbox become created, ready and
	// running.
	OnState func(lifecycle.State)
}

// State reports a state change if the job asked to hear of them.
func (j *Job) State(s lifecycle.State) {
	if j.OnState != nil {
		j.OnState(s)
	}
}

// Mount binds a host directory or file that airlock prepared into the
// sandbox.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Exit is how a program ended, as the engine saw it.
type Exit struct {
	// Code is the program's exit status (128+signal when killed).
	Code int
	// TimedOut is set when the engine killed the program at Policy.Limits.Timeout.
	TimedOut bool
	// Killed is set when the engine killed the program because the run's
	// context was done.
	Killed bool
	// OOMKilled is set when the kernel's OOM killer ended the program.
	OOMKilled bool
	// PidsLimited is set when a fork was refused at the pids limit.
	PidsLimited bool
	// Usage is what the sandbox consumed; zero where the engine cannot tell.
	Usage Usage
	// Started and Finished bound the program's wall-clock run.
	Started, Finished time.Time
}

// Usage is what a sandbox consumed, from its cgroup.
type Usage struct {
	CPU        time.Duration
	MemoryPeak int64
	PidsPeak   int64
}

// Binds converts mounts for the isolation package's conversions.
func Binds(ms []Mount) []isolation.Bind {
	var out []isolation.Bind
	for _, m := range ms {
		out = append(out, isolation.Bind{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return out
}

// Runtime names the OCI runtime a mode runs on, for receipts.
type Runtime struct {
	Name    string
	Version string
	Flags   []string
}

// Engine runs jobs.
type Engine interface {
	// Name is the engine's name as shown in results ("docker").
	Name() string
	// Check verifies, before anything is created, that the engine can run
	// the job as asked: the image is present and the runtime registered.
	Check(ctx context.Context, j *Job) error
	// Run runs the job to its end. Timeout starts when the program starts.
	Run(ctx context.Context, j *Job) (Exit, error)
	// Runtime describes the runtime a mode runs on. Receipts are evidence:
	// a version that cannot be read is an error (errdefs.ErrUnavailable),
	// never "unknown".
	Runtime(ctx context.Context, m isolation.Mode) (Runtime, error)
}

// Reaper is an engine that can find and remove what a run left behind when
// its airlock process died.
type Reaper interface {
	// Leftovers lists the run ids the engine still holds resources for.
	Leftovers(ctx context.Context) ([]string, error)
	// Reap removes everything the engine holds for the run. Removing what
	// is already gone is not an error.
	Reap(ctx context.Context, id string) error
}
