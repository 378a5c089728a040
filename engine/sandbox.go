package engine

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/isolation"
)

// The sandbox-shaped contract, after runsc's create/start/exec/delete and
// containerd's container → task → process: a sandbox is created once from
// a policy, runs many processes, and is destroyed once. Files move in and
// out on the host side, through the directories airlock mounts (see
// Mount), never through the engine.
//
// Rules every Engine keeps:
//   - Create returns only once the sandbox runs its idle init and no user
//     program, or, for a one-shot sandbox, once its program has started;
//     on any error it leaves nothing behind.
//   - A process's timeout kills it and every process it started; the
//     sandbox stays usable.
//   - A sandbox that ended from outside airlock makes every later call
//     fail with ErrSandboxLost; one that airlock destroyed, or that never
//     existed, with errdefs.ErrNotFound.
//   - Destroy is idempotent and frees everything: runtime state, cgroups,
//     mounts the engine made.

// SandboxSpec describes a sandbox to create.
type SandboxSpec struct {
	// ID names the sandbox; unique, never reused.
	ID string
	// Image is the image ID (sha256 of its config).
	Image  digest.Digest
	Policy isolation.Policy
	// Env holds "K=V" entries every process starts with.
	Env []string
	// Mounts are airlock's own directories: the workspace, /out, staged
	// inputs. Nothing else from the host is ever mounted.
	Mounts []Mount
	// TmpSource, when set, is a host tmpfs airlock made to be the
	// sandbox's /tmp (see isolation.TmpDir and CheckTmpSource): it is
	// bound there in place of the engine's own tmpfs, so that files can be
	// moved in and out of /tmp on the host side. Empty keeps the engine's.
	TmpSource string
	// Workdir is the processes' default working directory.
	Workdir string
	// Owner and Deadline label the sandbox so that a sweep can find it;
	// Deadline is the hard end of its life (its TTL).
	Owner    string
	Deadline time.Time
	// Init is a task's program (Engine.Run): its only process instead of
	// airlock's idle init, started with the policy's timeout; Task.Wait
	// tells how it ended. Its Detach and Workdir are not used (Workdir
	// above holds). A long-lived sandbox (Engine.Create) has none.
	Init *Process
}

// Process is one program run in a live sandbox.
type Process struct {
	// Argv is the program and its arguments, run without a shell.
	Argv []string
	// Env is added to the sandbox's environment; later entries win.
	Env []string
	// Workdir is the working directory; empty keeps the sandbox's.
	Workdir string
	// Stdin feeds the program; nil means its stdin is closed.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it arrives; they must not
	// block for long.
	Stdout, Stderr io.Writer
	// Timeout is the wall-clock limit from the process's start; zero takes
	// the policy's.
	Timeout time.Duration
	// Detach starts the process in the background: Exec returns once it
	// runs, and it lives until the sandbox ends. Its output is discarded.
	Detach bool
}

// Task is a one-shot run, as containerd's task: a sandbox whose only
// process is its program, started by Engine.Run, waited for once and
// destroyed.
type Task interface {
	ID() string
	// Wait waits for the program to end, killing it at the policy's
	// timeout (Exit.TimedOut) or once ctx is done (Exit.Killed).
	// Whatever the program left running is killed before Wait returns,
	// so nothing writes to the sandbox's mounts after it.
	Wait(ctx context.Context) (Exit, error)
	// Destroy kills every process and frees the sandbox. Destroying one
	// that is already gone succeeds.
	Destroy(ctx context.Context) error
}

// Sandbox is one live long-lived sandbox, running airlock's idle init.
type Sandbox interface {
	ID() string
	// Exec runs p to its end (or, detached, to its start). The program's
	// outcome is the Exit; an error means the engine failed or the sandbox
	// is gone.
	Exec(ctx context.Context, p *Process) (Exit, error)
	// Destroy kills every process and frees the sandbox. Destroying one
	// that is already gone succeeds.
	Destroy(ctx context.Context) error
}

// Server is a Sandbox with a helper its supervisor runs for the
// sandbox's life: the oci engine's exec agent under gVisor. Serve returns
// once ctx is done, or at once for a sandbox that has none. Execs work
// without it; it only makes them faster.
type Server interface {
	Serve(ctx context.Context) error
}

// Awaiter is a Server an exec can wait for. Its supervisor starts serving
// a little after the sandbox is made, so an exec made at once (a pool's
// prime) starts the slower way unless it waits. Served returns true once
// the helper is served, false at once for a sandbox with none, or once
// ctx is done.
type Awaiter interface {
	Served(ctx context.Context) bool
}

// Engine runs tasks and creates sandboxes on one container engine, and
// reaps what either left behind.
type Engine interface {
	// Name is the engine's name as shown in results ("docker").
	Name() string
	// Check verifies, before anything is created, that the engine can
	// create s: the image is present and the runtime registered.
	Check(ctx context.Context, s *SandboxSpec) error
	// Run makes and starts a one-shot sandbox running s.Init, which it
	// requires.
	Run(ctx context.Context, s *SandboxSpec) (Task, error)
	// Create makes and starts a long-lived sandbox running airlock's idle
	// init; s.Init must be nil.
	Create(ctx context.Context, s *SandboxSpec) (Sandbox, error)
	// Open reconnects to a live long-lived sandbox made by any airlock
	// process.
	Open(ctx context.Context, id string) (Sandbox, error)
	// Runtime describes the runtime a mode runs on. Receipts are evidence:
	// a version that cannot be read is an error (errdefs.ErrUnavailable),
	// never "unknown".
	Runtime(ctx context.Context, m isolation.Mode) (Runtime, error)
	Reaper
}

// CheckKind refuses a spec made for the other kind of sandbox: Run takes
// one with an Init, Create one without.
func CheckKind(s *SandboxSpec, task bool) error {
	switch {
	case task && s.Init == nil:
		return fmt.Errorf("%w: sandbox %q: a task needs its program (SandboxSpec.Init)", errdefs.ErrInvalidArgument, s.ID)
	case !task && s.Init != nil:
		return fmt.Errorf("%w: sandbox %q: a long-lived sandbox runs airlock's idle init, not a program of its own; run one with Engine.Run", errdefs.ErrInvalidArgument, s.ID)
	}
	return nil
}

// StoreUser is an engine whose sandboxes run on airlock's own store (the
// oci engine's image trees): the image a live sandbox runs on must stay
// in the store, where another engine's daemon keeps its own copy.
type StoreUser interface {
	RunsOnStore()
}

// Holder is an engine that can make a one-shot sandbox before its program
// is known, for a warm pool. Hold creates and starts the sandbox running
// airlock's trampoline, which runs no user code: it waits on its stdin for
// one program and becomes it. The sandbox is used once: Start hands the
// program over, and the Task it returns is waited for and destroyed like
// any other. Nothing comes back from the trampoline but
// the program's own output and exit status, read as in a cold run.
type Holder interface {
	Hold(ctx context.Context, s *SandboxSpec) (Held, error)
}

// Held is a sandbox waiting for its one program.
type Held interface {
	ID() string
	// Check says, without starting anything, whether Start would take p:
	// the errors are Start's ErrNotFound and ErrOutOfRange.
	Check(p *Process) error
	// Start hands p over and returns the task running it. p's Argv,
	// Env (laid over the sandbox's), Workdir, Stdin, Stdout, Stderr and
	// Timeout are used. A program that cannot be found in the image is
	// errdefs.ErrNotFound, and one the trampoline cannot take (too large)
	// errdefs.ErrOutOfRange: the sandbox is untouched and may take
	// another. A sandbox that ended while held is ErrSandboxLost.
	Start(ctx context.Context, p *Process) (Task, error)
	// Destroy frees a sandbox that was never started.
	Destroy(ctx context.Context) error
}

// Pauser is an engine that can checkpoint a long-lived sandbox and
// restore it later, under the same id: the oci engine under gVisor.
// Pause stores the sandbox's processes and memory in a checkpoint under
// airlock's root (mode 0600, never exported) and ends its processes, so
// that it holds no memory or CPU while paused; its files stay where they
// are. Resume restores it from the checkpoint, its processes running on
// where they stopped, and removes the checkpoint. Destroy and Reap free a
// paused sandbox and its checkpoint like any other.
//
// A sandbox that cannot be paused (runc's isolation) is
// errdefs.ErrNotImplemented, saying why; pausing one that is paused, and
// resuming one that runs, succeed and change nothing. A Sandbox opened
// while paused refuses Exec (errdefs.ErrFailedPrecondition).
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Paused reports whether sandbox id is paused.
	Paused(ctx context.Context, id string) (bool, error)
}

// Snapshotter is an engine that can take a snapshot of a warmed
// long-lived sandbox and make new sandboxes from it: the oci engine under
// gVisor. A snapshot is the sandbox's processes and memory, checkpointed
// into a directory under airlock's root (mode 0700, its files 0600, never
// exported), named by the sha256 of its manifest, which records the image,
// the policy's hash and the runtime's version it was taken under.
//
// Snapshot checkpoints sandbox id and ends its processes: the sandbox is
// to be destroyed next. Restore creates a new long-lived sandbox s (its
// own id, bundle, cgroup and mounts) whose processes are the snapshot's,
// running on where they stopped, instead of booting one. A snapshot whose
// image, policy or runtime differ from s's is refused
// (errdefs.ErrInvalidArgument, naming what differs and the fix: a new
// snapshot; retrying cannot help), never used; one whose
// manifest does not hash to its name is errdefs.ErrDataLoss. A sandbox
// that cannot be snapshotted (runc's isolation, egress) is
// errdefs.ErrNotImplemented, saying why. A restored sandbox differs from
// its clones where programs look for what is the machine's own: its host
// name is isolation.RestoredHostname(s.Policy.Hostname, s.ID), not the
// policy's, and its boot id is its own.
type Snapshotter interface {
	Snapshot(ctx context.Context, id string) (name string, err error)
	Restore(ctx context.Context, s *SandboxSpec, snapshot string) (Sandbox, error)
	// RemoveSnapshot removes snapshot name; one that is gone is not an
	// error.
	RemoveSnapshot(ctx context.Context, name string) error
	// Snapshots lists the snapshots' names and when each was taken.
	Snapshots(ctx context.Context) (map[string]time.Time, error)
}
