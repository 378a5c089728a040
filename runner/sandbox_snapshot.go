package runner

// Snapshots of warmed sandboxes, on an engine that can take them
// (engine.Snapshotter: the oci engine under gVisor). A template's warm
// program is started detached in a new sandbox, says it is ready by
// creating ReadyFile in its /tmp, and the sandbox is then snapshotted and
// destroyed (Warm). Sandboxes made with SandboxSpec.Snapshot are restored
// from the snapshot instead of booted.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// ReadyFile is the file a warm program creates in /tmp once it is warm:
// its presence, seen from the host, is the signal to snapshot. The
// program finds its path in ReadyEnv.
const ReadyFile = "airlock-ready"

// ReadyEnv is the environment variable that gives a warm program the
// path of its ready file (/tmp/airlock-ready).
const ReadyEnv = "AIRLOCK_READY_FILE"

// snapshotter is the runner's engine as an engine.Snapshotter, or the
// error that says it has no snapshots.
func (r *Runner) snapshotter() (engine.Snapshotter, error) {
	sn, ok := r.engine.(engine.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: the %s engine cannot snapshot or restore a sandbox; snapshots are the oci engine's, under gVisor (use --engine oci)", errdefs.ErrNotImplemented, r.engine.Name())
	}
	return sn, nil
}

// WarmSpec is a warm program for a snapshot.
type WarmSpec struct {
	// Argv is started detached (through the sandbox's spawner, so that it
	// descends from the sandbox's init and survives the checkpoint), with
	// ReadyEnv set to its ready file.
	Argv []string
	// Timeout bounds the wait for the ready file.
	Timeout time.Duration
	// Progress, when set, receives a line for each step.
	Progress io.Writer
}

// Warm makes a sandbox of s, starts w's program in it, waits for the
// program's ready file, snapshots the sandbox and destroys it, and
// returns the snapshot's name. The sandbox holds no job's data: only
// what s and the warm program put there. On error nothing is left.
func (r *Runner) Warm(ctx context.Context, s SandboxSpec, w WarmSpec) (_ string, err error) {
	if len(w.Argv) == 0 {
		return "", fmt.Errorf("%w: a warm program needs its argv", errdefs.ErrInvalidArgument)
	}
	if s.Snapshot != "" || len(s.Inputs) > 0 {
		return "", fmt.Errorf("%w: a warming sandbox boots, and takes no inputs", errdefs.ErrInvalidArgument)
	}
	if _, err := r.snapshotter(); err != nil {
		return "", err
	}
	say := func(format string, args ...any) {
		if w.Progress != nil {
			fmt.Fprintf(w.Progress, format+"\n", args...)
		}
	}
	begin := time.Now()
	sb, err := r.Create(ctx, s)
	if err != nil {
		return "", err
	}
	defer func() {
		if derr := r.Destroy(context.WithoutCancel(ctx), sb.ID()); derr != nil && err == nil {
			err = fmt.Errorf("destroying the warming sandbox %q: %w", sb.ID(), derr)
		}
	}()
	say("warming sandbox %s created (%v)", sb.ID(), time.Since(begin).Round(time.Millisecond))
	ready := path.Join("/tmp", ReadyFile)
	res, err := sb.Exec(ctx, ExecSpec{Argv: w.Argv, Env: []string{ReadyEnv + "=" + ready}, Detach: true})
	if err != nil {
		return "", fmt.Errorf("starting the warm program: %w", err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%w: the warm program %q did not start (exit %d)", errdefs.ErrInvalidArgument, w.Argv[0], res.ExitCode)
	}
	say("warm program started; waiting for it to create %s (at most %v)", ready, w.Timeout)
	if err := sb.awaitTmpFile(ctx, ReadyFile, w.Timeout); err != nil {
		return "", err
	}
	say("ready after %v; snapshotting", time.Since(begin).Round(time.Millisecond))
	snap, err := r.Snapshot(ctx, sb.ID())
	if err != nil {
		return "", err
	}
	say("snapshot %s taken (%v in all)", snap, time.Since(begin).Round(time.Millisecond))
	return snap, nil
}

// awaitTmpFile polls, on the host side, for a file name in the sandbox's
// /tmp, beneath the area's root (os.Root: no symlink leads out of it).
func (sb *Sandbox) awaitTmpFile(ctx context.Context, name string, timeout time.Duration) error {
	if sb.info.Areas.Tmp == "" {
		return fmt.Errorf("%w: sandbox %q has no /tmp of airlock's", errdefs.ErrFailedPrecondition, sb.id)
	}
	root, err := os.OpenRoot(sb.info.Areas.Tmp)
	if err != nil {
		return fmt.Errorf("%w: opening sandbox %q's /tmp: %v", errdefs.ErrUnavailable, sb.id, err)
	}
	defer root.Close()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := root.Lstat(name); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: looking for /tmp/%s in sandbox %q: %v", errdefs.ErrUnavailable, name, sb.id, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the warm program did not create /tmp/%s within %v (it must, once warm; is it running?)", errdefs.ErrUnavailable, name, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the warm program: %v", errdefs.ErrAborted, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Snapshot takes a snapshot of sandbox id, which must be ready with no
// exec in progress, and returns its name. The sandbox's processes end:
// it is left paused with no checkpoint, for the caller to destroy.
func (r *Runner) Snapshot(ctx context.Context, id string) (string, error) {
	sn, err := r.snapshotter()
	if err != nil {
		return "", err
	}
	si, err := ReadSandbox(r.root, id)
	if err != nil {
		return "", err
	}
	if si.Engine != r.engine.Name() {
		return "", fmt.Errorf("%w: sandbox %q runs on engine %s, not %s", errdefs.ErrInvalidArgument, id, si.Engine, r.engine.Name())
	}
	if err := checkPausable(si); err != nil {
		return "", err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return "", err
	}
	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	rl, err := lc.Lock(lctx, id)
	cancel()
	if err != nil {
		return "", fmt.Errorf("%w: sandbox %q: %v; another airlock process held its lock for more than %v: try again", errdefs.ErrConflict, id, err, lockTimeout)
	}
	defer rl.Release()
	// Paused first, under the records' lock, so that no exec starts while
	// the checkpoint is taken.
	err = updateInfo(r.root, id, func(cur *SandboxInfo) error {
		rec, err := lc.Get(id)
		if err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		if rec.State != lifecycle.Ready || cur.liveExecs() > 0 || cur.liveTransfers() > 0 {
			return fmt.Errorf("%w: sandbox %q is %s with %d exec(s) and %d file transfer(s) in progress; a snapshot is taken of a ready sandbox with none", errdefs.ErrConflict, id, rec.State, cur.liveExecs(), cur.liveTransfers())
		}
		return lc.Move(id, lifecycle.Paused, "", nil)
	})
	if err != nil {
		return "", err
	}
	begin := time.Now()
	snap, err := sn.Snapshot(ctx, id)
	ev := map[string]any{"event": "snapshot", "sandbox_id": id, "snapshot": snap, "duration_ms": time.Since(begin).Milliseconds()}
	if err != nil {
		ev["error"], ev["error_kind"] = err.Error(), ErrorKind(err)
	}
	if aerr := lc.Audit().Append(ev); aerr != nil && err == nil {
		err = fmt.Errorf("recording the snapshot: %w", aerr)
	}
	if err != nil {
		return "", err
	}
	r.log.Info("sandbox snapshotted", "sandbox_id", id, "snapshot", snap, "duration_ms", time.Since(begin).Milliseconds())
	return snap, nil
}

// RemoveSnapshot removes snapshot name from the runner's engine.
func (r *Runner) RemoveSnapshot(ctx context.Context, name string) error {
	sn, err := r.snapshotter()
	if err != nil {
		return err
	}
	return sn.RemoveSnapshot(ctx, name)
}
