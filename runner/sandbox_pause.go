package runner

// Pause and resume of long-lived sandboxes, on an engine that can
// (engine.Pauser: the oci engine under gVisor). A paused sandbox is in
// state paused: no process of it runs, its memory is in a checkpoint
// under the engine's part of the root, its files stay in its areas. Its
// TTL still counts and its supervisor still ends it there; its idle
// timeout does not run while it is paused. An exec or a file transfer
// into it resumes it first (Open).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// pauser is the runner's engine as an engine.Pauser, or the error that
// says it cannot pause.
func (r *Runner) pauser() (engine.Pauser, error) {
	p, ok := r.engine.(engine.Pauser)
	if !ok {
		return nil, fmt.Errorf("%w: the %s engine cannot pause a sandbox; sandboxes made with --engine oci (under gVisor) can", errdefs.ErrNotImplemented, r.engine.Name())
	}
	return p, nil
}

// Pause checkpoints sandbox id and frees its memory and processes; it
// returns the sandbox's record, paused. Pausing a paused sandbox changes
// nothing. A sandbox with an exec in progress is refused
// (errdefs.ErrConflict), as is one being created.
func (r *Runner) Pause(ctx context.Context, id string) (SandboxInfo, error) {
	return r.pauseOrResume(ctx, id, true)
}

// Resume restores paused sandbox id under the same id, its processes
// running on where they stopped, and returns its record, ready. Resuming
// a sandbox that is not paused changes nothing.
func (r *Runner) Resume(ctx context.Context, id string) (SandboxInfo, error) {
	return r.pauseOrResume(ctx, id, false)
}

func (r *Runner) pauseOrResume(ctx context.Context, id string, pause bool) (SandboxInfo, error) {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	si, err := ReadSandbox(r.root, id)
	if err != nil {
		return si, err
	}
	if si.Engine != r.engine.Name() {
		return si, fmt.Errorf("%w: sandbox %q runs on engine %s, not %s", errdefs.ErrInvalidArgument, id, si.Engine, r.engine.Name())
	}
	p, err := r.pauser()
	if err != nil {
		return si, err
	}
	if err := checkPausable(si); err != nil {
		return si, err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return si, err
	}
	// The run lock keeps a destroy (rm, the supervisor at the TTL) from
	// freeing the sandbox under the checkpoint or the restore.
	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	rl, err := lc.Lock(lctx, id)
	cancel()
	if err != nil {
		return si, fmt.Errorf("%w: sandbox %q: %v; another airlock process held its lock for more than %v: try again", errdefs.ErrConflict, id, err, lockTimeout)
	}
	defer rl.Release()
	begin := time.Now()
	if pause {
		err = r.pause(ctx, lc, p, id)
	} else {
		err = r.resume(ctx, lc, p, id)
	}
	ev := map[string]any{"event": verb, "sandbox_id": id, "duration_ms": time.Since(begin).Milliseconds()}
	if err != nil {
		ev["error"], ev["error_kind"] = err.Error(), ErrorKind(err)
	}
	if aerr := lc.Audit().Append(ev); aerr != nil && err == nil {
		err = fmt.Errorf("recording the %s: %w", verb, aerr)
	}
	if err != nil {
		if errors.Is(err, engine.ErrSandboxLost) {
			r.markLost(id, err)
		}
		return si, err
	}
	r.log.Info("sandbox "+verb+"d", "sandbox_id", id, "duration_ms", time.Since(begin).Milliseconds())
	return ReadSandbox(r.root, id)
}

// checkPausable refuses the states a sandbox cannot be paused or resumed
// in, as Open refuses them.
func checkPausable(si SandboxInfo) error {
	switch si.State {
	case lifecycle.Failed:
		return engine.Lost("sandbox %q failed earlier (%s); `airlock sandbox rm %s` frees it", si.ID, si.Error, si.ID)
	case lifecycle.Expired, lifecycle.Orphaned:
		return goneError(si.ID)
	case lifecycle.Requested, lifecycle.Created:
		return fmt.Errorf("%w: sandbox %q is still being created; try again", errdefs.ErrUnavailable, si.ID)
	case lifecycle.Pooled:
		return fmt.Errorf("%w: sandbox %q waits in a warm pool and is no client's until a create claims it", errdefs.ErrNotFound, si.ID)
	}
	return nil
}

// pause moves the sandbox to paused (under the records' lock, so that no
// exec starts meanwhile) before the engine checkpoints it: a paused
// sandbox takes no exec, and one whose pause was cut short is found paused
// and resumed as any other. A checkpoint that fails leaves it ready.
func (r *Runner) pause(ctx context.Context, lc *lifecycle.Store, p engine.Pauser, id string) error {
	err := updateInfo(r.root, id, func(cur *SandboxInfo) error {
		rec, err := lc.Get(id)
		if err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		switch {
		case rec.State == lifecycle.Paused:
			return nil
		case rec.State == lifecycle.Running && cur.liveExecs() > 0:
			return fmt.Errorf("%w: sandbox %q has an exec in progress; pause it once its execs have ended", errdefs.ErrConflict, id)
		case cur.liveTransfers() > 0:
			// In use, as by an exec.
			return fmt.Errorf("%w: sandbox %q has a file transfer in progress; pause it once its transfers have ended", errdefs.ErrConflict, id)
		}
		if rec.State == lifecycle.Running {
			// Execs whose airlock process died: nothing runs for them.
			if err := lc.Move(id, lifecycle.Ready, "", nil); err != nil {
				return err
			}
		}
		if err := lc.Move(id, lifecycle.Paused, "", nil); errors.Is(err, lifecycle.ErrTransition) {
			return goneError(id)
		} else if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := p.Pause(ctx, id); err != nil {
		if paused, perr := p.Paused(context.WithoutCancel(ctx), id); perr == nil && !paused && !errors.Is(err, engine.ErrSandboxLost) {
			if merr := lc.Move(id, lifecycle.Ready, "", nil); merr != nil {
				err = fmt.Errorf("%w (and recording it ready again: %v)", err, merr)
			}
		}
		return err
	}
	return nil
}

// resume restores the sandbox, then records it ready, its idle timeout
// counting from now.
func (r *Runner) resume(ctx context.Context, lc *lifecycle.Store, p engine.Pauser, id string) error {
	rec, err := lc.Get(id)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if rec.State != lifecycle.Paused {
		if err := checkPausable(SandboxInfo{ID: id, State: rec.State, Error: rec.Error}); err != nil {
			return err
		}
		if rec.State == "" || rec.State == lifecycle.Terminating || rec.State == lifecycle.Terminated {
			return goneError(id)
		}
		return nil
	}
	if err := p.Resume(ctx, id); err != nil {
		return err
	}
	return updateInfo(r.root, id, func(cur *SandboxInfo) error {
		cur.LastActivity = time.Now().UTC()
		return lc.Move(id, lifecycle.Ready, "", nil)
	})
}
