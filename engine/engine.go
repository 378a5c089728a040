// Package engine defines what airlock asks of a container engine: create a
// sandbox under a policy, run processes in it, report how each ended, and
// destroy it leaving nothing behind. A one-shot run is a sandbox whose only
// process is the program (see SandboxSpec.Init); the runner creates it,
// waits for it and destroys it.
//
// Rules every engine keeps:
//   - Nothing is created until the image and the runtime have been checked.
//   - When a wait's context is done, the engine kills the program and waits
//     for it to exit; teardown runs on a context of its own, so a cancelled
//     caller never leaves a sandbox behind.
//   - The program's outcome (exit code, timeout, OOM) is an Exit, not an
//     error. An error means the engine failed.
package engine

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/isolation"
)

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
	// Egress sums the audit records of the sandbox's egress proxy, for a
	// run whose policy has egress and whose engine serves its proxy; nil
	// otherwise.
	Egress *egress.Totals
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

// Reaper is an engine that can find and remove what a run left behind when
// its airlock process died.
type Reaper interface {
	// Leftovers lists the run ids the engine still holds resources for.
	Leftovers(ctx context.Context) ([]string, error)
	// Reap removes everything the engine holds for the run. Removing what
	// is already gone is not an error.
	Reap(ctx context.Context, id string) error
}
