package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// freeRun removes everything run id holds: what each engine holds for it,
// then its run directory. Removing what is already gone is not an error.
func freeRun(ctx context.Context, root string, reapers []engine.Reaper, id string) error {
	var errs []error
	for _, r := range reapers {
		if err := r.Reap(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeRunDir(filepath.Join(root, "runs", id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// destroyRun frees run id exactly once: through the state store when it
// still knows the run (or cannot read its state), or directly, with an
// audit event saying why, when the store has lost it or never had it. The
// wait for the run's lock is bounded by wait; the freeing is not. An audit
// event that cannot be written is an error, after the run is freed.
func destroyRun(ctx context.Context, lc *lifecycle.Store, root string, reapers []engine.Reaper, id, why string, wait time.Duration) error {
	free := func() error { return freeRun(ctx, root, reapers, id) }
	if rec, gerr := lc.Get(id); gerr == nil && (rec.State == "" || rec.State == lifecycle.Terminated) {
		err := free()
		aerr := lc.Audit().Append(map[string]any{"event": "destroy", "run_id": id, "why": why, "error": errString(err)})
		return errors.Join(err, aerr)
	}
	lctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Destroy moves through why only where the state machine allows it
	// (orphaned, expired); "killed" is not a state and is just recorded.
	err := lc.Destroy(lctx, id, lifecycle.State(why), free)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("%w: run %q: %v; its owner held the run lock for more than %v while creating or tearing it down: try again", errdefs.ErrConflict, id, err, wait)
	}
	return err
}

// Kill destroys run id now, whoever owns it: its sandbox is killed and all
// it holds removed, once however many callers race; a kill that lands
// while the run is being created waits for the create. The owner's result
// says the run was killed. A run that is already gone is no error: gone is
// then true.
func Kill(ctx context.Context, root string, reapers []engine.Reaper, id string) (gone bool, err error) {
	root = ResolveRoot(root)
	if !runID.MatchString(id) {
		return false, fmt.Errorf("%w: %q is not a run id (20 hex digits); `airlock ps` lists the live runs", errdefs.ErrInvalidArgument, id)
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		return false, err
	}
	if rec, gerr := lc.Get(id); gerr == nil && rec.State == "" {
		// No state: finished, never there, or its state was lost while its
		// run directory remains.
		if _, err := os.Stat(filepath.Join(root, "runs", id)); err != nil {
			return true, nil
		}
	}
	// A kill the audit log cannot record still kills, then fails.
	aerr := lc.Audit().Append(map[string]any{"event": "kill", "run_id": id, "by_pid": os.Getpid()})
	return false, errors.Join(destroyRun(ctx, lc, root, reapers, id, "killed", lockTimeout), aerr)
}

// RunInfo is one live run, as `airlock ps` shows it.
type RunInfo struct {
	ID    string          `json:"id"`
	State lifecycle.State `json:"state"`
	// OwnerPID is the airlock process running it; 0 when unknown.
	OwnerPID int       `json:"owner_pid"`
	Deadline time.Time `json:"deadline,omitzero"`
	Updated  time.Time `json:"updated,omitzero"`
	// Reapable says why `airlock reap` would remove it (orphaned, expired),
	// or is empty while its owner is alive and in time.
	Reapable lifecycle.State `json:"reapable,omitempty"`
}

// List returns the runs under root that are not terminated: every state
// record and every run directory, oldest first.
func List(root string) ([]RunInfo, error) {
	lc, err := lifecycle.Open(root)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	states, _ := filepath.Glob(filepath.Join(root, "state", "*.json"))
	for _, s := range states {
		ids[strings.TrimSuffix(filepath.Base(s), ".json")] = true
	}
	dirs, _ := os.ReadDir(filepath.Join(root, "runs"))
	for _, d := range dirs {
		ids[d.Name()] = true
	}
	var out []RunInfo
	for id := range ids {
		if !runID.MatchString(id) {
			continue
		}
		ri := RunInfo{ID: id, State: "unknown"}
		if rec, err := lc.Get(id); err == nil && rec.State != "" {
			ri.State, ri.Updated = rec.State, rec.Updated
		}
		dir := filepath.Join(root, "runs", id)
		if b, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil {
			var o owner
			if json.Unmarshal(b, &o) == nil {
				ri.OwnerPID, ri.Deadline = o.PID, o.Deadline
			}
		}
		if _, err := os.Stat(dir); err == nil {
			ri.Reapable = ownerStatus(dir)
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Updated.Equal(out[j].Updated) {
			return out[i].Updated.Before(out[j].Updated)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
