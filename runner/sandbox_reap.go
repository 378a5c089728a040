package runner

// Destroying and reaping sandboxes: through the lifecycle's exactly-once
// destroy, with the engines' reapers for what a record no longer names.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// freeSandbox removes everything sandbox id holds: what each engine holds
// for it, its areas and its record.
func freeSandbox(ctx context.Context, root string, reapers []engine.Reaper, id string) error {
	var errs []error
	for _, rp := range reapers {
		if err := rp.Reap(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, removeSandboxFiles(ctx, root, id))
	}
	return errors.Join(errs...)
}

// destroySandbox frees sandbox id once, through the lifecycle's Destroy
// (which waits for a create in progress), or directly, with an audit
// event, when the lifecycle no longer knows it but something is left:
// its record or areas, or, held, what this root's engine state names of
// it (a create whose undo failed leaves a bundle or a checkpoint alone).
func destroySandbox(ctx context.Context, lc *lifecycle.Store, root, id string, why lifecycle.State, held bool, free func() error) error {
	if rec, gerr := lc.Get(id); gerr == nil && (rec.State == "" || rec.State == lifecycle.Terminated) {
		if !held && unrecorded(root, id) {
			return nil // gone
		}
		err := free()
		aerr := lc.Audit().Append(map[string]any{"event": "destroy", "sandbox_id": id, "why": string(why), "error": errString(err)})
		return errors.Join(err, aerr)
	}
	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	err := lc.Destroy(lctx, id, why, free)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("%w: sandbox %q: %v; another airlock process held its lock for more than %v: try again", errdefs.ErrConflict, id, err, lockTimeout)
	}
	return err
}

// unrecorded says whether sandbox id has neither a record nor areas.
func unrecorded(root, id string) bool {
	_, ierr := os.Lstat(infoPath(root, id))
	_, derr := os.Lstat(SandboxDir(root, id))
	return ierr != nil && derr != nil
}

// reapSandboxes destroys every sandbox under root that is past its
// deadline (expired), whose creator died mid-create, whose destroy was cut
// short or whose record is missing or corrupt (orphaned), or, with full,
// that failed. extra holds
// the engines' leftover ids; the other ids are those of sandbox records
// and areas.
func reapSandboxes(ctx context.Context, lc *lifecycle.Store, root string, reapers func() []engine.Reaper, full bool, extra map[string]bool, rep *ReapReport) error {
	ids := map[string]bool{}
	for id := range extra {
		ids[id] = true
	}
	ents, _ := os.ReadDir(sandboxesDir(root))
	for _, e := range ents {
		ids[strings.TrimSuffix(e.Name(), ".json")] = true
	}
	var errs []error
	now := time.Now()
	for id := range ids {
		if !sandboxIDPattern.MatchString(id) {
			continue
		}
		var why lifecycle.State
		si, err := readInfo(root, id)
		rec, gerr := lc.Get(id)
		si.State = rec.State // a paused sandbox's deadline is its TTL
		switch {
		case errdefs.IsNotFound(err):
			// Areas or engine state with no record: a create that has not
			// written it yet is given a moment.
			if fi, serr := os.Stat(SandboxDir(root, id)); serr == nil && now.Sub(fi.ModTime()) < freshGrace {
				rep.Live++
				continue
			}
			why = lifecycle.Orphaned
		case errdefs.IsUnavailable(err) && readsAgain(root, id):
			// A read that failed for a moment (EIO, say) says nothing
			// of the sandbox: it is left for a later pass.
			rep.Live++
			continue
		case err != nil, gerr != nil:
			why = lifecycle.Orphaned
		case rec.State == "" || rec.State == lifecycle.Terminated:
			why = lifecycle.Orphaned
		case rec.State == lifecycle.Terminating:
			// A destroy its process did not finish (killed mid-way): the
			// lifecycle's Destroy runs it again, once a live destroyer,
			// which holds the lock, is done.
			why = lifecycle.Orphaned
		case (rec.State == lifecycle.Requested || rec.State == lifecycle.Created || rec.State == lifecycle.Pooled) && !si.Creator.alive():
			why = lifecycle.Orphaned // its creator (or its pool's server) died, or the record names none
		case !now.Before(si.Deadline(now)):
			why = lifecycle.Expired
		case full && rec.State == lifecycle.Failed:
			why = lifecycle.Failed
		default:
			rep.Live++
			continue
		}
		free := func() error { return freeSandbox(ctx, root, reapers(), id) }
		if err := destroySandbox(ctx, lc, root, id, why, extra[id], free); err != nil {
			errs = append(errs, fmt.Errorf("reaping sandbox %q: %w", id, err))
		}
		rep.Reaped = append(rep.Reaped, id)
	}
	return errors.Join(errs...)
}

// sweepRereads is how many times, sweepRereadGap apart, the sweep reads
// again a record whose read failed before it takes the sandbox for an
// orphan, as the supervisor does over recordRetries ticks.
const (
	sweepRereads   = 3
	sweepRereadGap = 100 * time.Millisecond
)

// readsAgain reports whether sandbox id's record, whose read failed,
// reads within sweepRereads tries.
func readsAgain(root, id string) bool {
	for range sweepRereads {
		time.Sleep(sweepRereadGap)
		if _, err := readInfo(root, id); !errdefs.IsUnavailable(err) {
			return err == nil
		}
	}
	return false
}

// RemoveSandbox destroys sandbox id through the reapers alone, for a
// sandbox whose record is gone or unreadable; like Destroy, it succeeds
// for an id that is already gone.
func RemoveSandbox(ctx context.Context, root string, reapers []engine.Reaper, id string) error {
	root = ResolveRoot(root)
	if err := CheckSandboxID(id); err != nil {
		return err
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if rec, gerr := lc.Get(id); gerr == nil && rec.State == "" {
		// The lifecycle has no record: free what engines still hold.
		var errs []error
		for _, rp := range reapers {
			errs = append(errs, rp.Reap(ctx, id))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return destroySandbox(ctx, lc, root, id, lifecycle.Orphaned, false, func() error { return freeSandbox(ctx, root, reapers, id) })
}
