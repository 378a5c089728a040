// Package lifecycle keeps every sandbox's state on disk and an append-only
// audit log of what happened to it.
//
// Rules:
//   - A sandbox moves requested → created → ready → running → terminating →
//     terminated (a long-lived one goes back to ready after each exec); failed, expired and orphaned lead to terminating. A
//     warm pool's sandbox waits in pooled (a run's: requested → pooled →
//     created; a long-lived one's: created → pooled → ready, once claimed). A
//     long-lived sandbox may be paused between execs (ready ⇄ paused). Any
//     other move is refused (ErrTransition).
//   - The state of run <id> is <root>/state/<id>.json, written atomically
//     under one flock for the store, so concurrent writers serialise; a
//     terminated run's file is removed (the audit log keeps its history).
//   - A run's own lock, <root>/state/<id>.lock, is held while it is being
//     created (requested → created), while it is torn down (terminating →
//     terminated), and by Destroy. So a destroy that lands mid-create waits,
//     then destroys; concurrent destroys free once and both succeed; and a
//     holder that dies lets go, since the kernel drops its flock.
//   - Every transition is also an audit event. The audit log never holds a
//     program's output, only sizes and hashes, and anything that looks like
//     a credential is redacted before it is written.
package lifecycle

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/flock"
)

// State is where a sandbox is in its life.
type State string

const (
	Requested   State = "requested"
	Created     State = "created"
	Ready       State = "ready"
	Running     State = "running"
	Terminating State = "terminating"
	Terminated  State = "terminated"
	Failed      State = "failed"
	Expired     State = "expired"
	Orphaned    State = "orphaned"
	// Pooled is a warm pool's sandbox: started, running no user code,
	// waiting for the one run that claims it.
	Pooled State = "pooled"
	// Paused is a long-lived sandbox checkpointed by its engine: no
	// process of it runs until it is resumed (ready again).
	Paused State = "paused"
)

// next lists the moves each state allows.
var next = map[State][]State{
	"":          {Requested},
	Requested:   {Created, Pooled, Failed, Terminating},
	Pooled:      {Created, Ready, Failed, Terminating}, // claimed by a run, or by a sandbox create
	Created:     {Ready, Pooled, Failed, Terminating},
	Ready:       {Running, Paused, Failed, Terminating},
	Paused:      {Ready, Failed, Terminating},
	Running:     {Ready, Terminating, Failed}, // a sandbox's exec ends
	Terminating: {Terminated, Failed},
	Failed:      {Terminating},
	Expired:     {Terminating},
	Orphaned:    {Terminating},
	Terminated:  {},
}

// ErrTransition is wrapped when a move is not allowed from the current state.
var ErrTransition = errors.New("invalid state transition")

// Allowed reports whether a sandbox in state from may move to to. Expired
// and orphaned may be entered from any state but terminated: the reaper
// decides them.
func Allowed(from, to State) bool {
	if (to == Expired || to == Orphaned) && from != Terminated && from != "" {
		return true
	}
	return slices.Contains(next[from], to)
}

// Record is what is kept for one sandbox.
type Record struct {
	ID      string    `json:"id"`
	State   State     `json:"state"`
	Updated time.Time `json:"updated"`
	Error   string    `json:"error,omitempty"`
}

// Store keeps records under <root>/state and events in <root>/audit.jsonl.
type Store struct {
	dir   string
	audit *Audit
}

// Open returns the store for airlock's root.
func Open(root string) (*Store, error) {
	dir := filepath.Join(root, "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening state: %w", err)
	}
	return &Store{dir: dir, audit: OpenAudit(AuditPath(root))}, nil
}

// AuditPath is the audit log of airlock's root, for a process that appends
// to it without the store (an engine's egress proxy).
func AuditPath(root string) string { return filepath.Join(root, "audit.jsonl") }

// Audit returns the store's audit log.
func (s *Store) Audit() *Audit { return s.audit }

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Get reads a record; a missing one is the zero Record with no error.
func (s *Store) Get(id string) (Record, error) {
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{ID: id}, nil
	}
	if err != nil {
		return Record{ID: id}, fmt.Errorf("reading the state of %q: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{ID: id}, fmt.Errorf("the state of %q in %s is corrupt: %w", id, s.path(id), err)
	}
	return r, nil
}

// Move changes a sandbox's state, refusing moves the state machine does not
// allow, and records the move in the audit log with any extra fields.
// Moving to the state it is already in is a no-op.
func (s *Store) Move(id string, to State, errMsg string, extra map[string]any) error {
	return s.locked(func() error {
		cur := s.current(id)
		return s.moveLocked(id, &cur, errMsg, extra, to)
	})
}

// MoveThrough makes the moves Move would, one state after another, with
// one write of the state file and one of the audit log: a run that starts
// goes through created, ready and running at once. It moves nothing when
// any move is refused.
func (s *Store) MoveThrough(id string, states ...State) error {
	return s.locked(func() error {
		cur := s.current(id)
		return s.moveLocked(id, &cur, "", nil, states...)
	})
}

// Finish records a run's end, terminating then terminated, in one write,
// with extra on the last move; a run already terminating moves once.
func (s *Store) Finish(id string, extra map[string]any) error {
	return s.locked(func() error {
		cur := s.current(id)
		return s.moveLocked(id, &cur, "", extra, Terminating, Terminated)
	})
}

// current is id's record; an unreadable one is treated as lost.
func (s *Store) current(id string) Record {
	cur, err := s.Get(id)
	if err != nil {
		cur.State = Orphaned
	}
	return cur
}

// RunLock is a held run lock; see Lock.
type RunLock struct {
	s  *Store
	id string
	l  *flock.Lock
}

// Lock waits for the run's own lock, or until ctx is done.
func (s *Store) Lock(ctx context.Context, id string) (*RunLock, error) {
	l, err := flock.Acquire(ctx, filepath.Join(s.dir, id+".lock"))
	if err != nil {
		return nil, err
	}
	return &RunLock{s: s, id: id, l: l}, nil
}

// Release lets go of the run lock; once the run is terminated, its lock
// file goes too.
func (l *RunLock) Release() {
	_, err := os.Stat(l.s.path(l.id))
	l.l.Release(errors.Is(err, fs.ErrNotExist))
}

// Begin records a new run as requested and returns its run lock, held
// until the caller releases it once the sandbox is created (or failed to
// be). An audit log that cannot be written fails Begin (*AuditError), and
// a failed Begin leaves no state behind.
func (s *Store) Begin(ctx context.Context, id string, extra map[string]any) (*RunLock, error) {
	if err := s.audit.Check(); err != nil {
		return nil, err
	}
	l, err := s.Lock(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.Move(id, Requested, "", extra); err != nil {
		// A refused move wrote nothing: the record there is another's.
		if !errors.Is(err, ErrTransition) {
			if rerr := os.Remove(s.path(id)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w (and removing its state: %v)", err, rerr)
			}
		}
		l.Release()
		return nil, err
	}
	return l, nil
}

// Destroy frees a sandbox's resources exactly once however many callers
// race. It takes the run lock, so it waits for a create or a teardown in
// progress, or for another Destroy. Then, unless the run is already
// terminated (or unknown), it moves it to terminating (through reason,
// when given), runs fn, and moves it to terminated. Finding it terminating
// under the lock means an earlier destroyer died mid-way: fn runs again,
// so it must be idempotent. Unreadable state counts as orphaned, so the
// run is still freed. An audit event that cannot be written never stops
// the freeing; it is returned (*AuditError) once the run is freed.
func (s *Store) Destroy(ctx context.Context, id string, reason State, fn func() error) error {
	rl, err := s.Lock(ctx, id)
	if err != nil {
		return err
	}
	defer rl.Release()
	var mine bool
	var auditErr error
	// move records a transition; only a lost audit event lets it go on.
	move := func(cur *Record, to State, errMsg string) error {
		err := s.moveLocked(id, cur, errMsg, nil, to)
		var ae *AuditError
		if errors.As(err, &ae) {
			auditErr = cmp.Or(auditErr, err)
			return nil
		}
		return err
	}
	err = s.locked(func() error {
		cur := s.current(id)
		if cur.State == "" || cur.State == Terminated {
			return nil
		}
		mine = true
		if cur.State == Terminating {
			return nil
		}
		if reason != "" && reason != cur.State && Allowed(cur.State, reason) {
			if err := move(&cur, reason, ""); err != nil {
				return err
			}
		}
		return move(&cur, Terminating, "")
	})
	if err != nil || !mine {
		return errors.Join(err, auditErr)
	}
	ferr := fn()
	ev := map[string]any{"event": "destroy", "run_id": id}
	if ferr != nil {
		ev["error"] = ferr.Error()
	}
	aerr := s.audit.Append(ev)
	if ferr != nil {
		return errors.Join(ferr, s.Move(id, Failed, ferr.Error(), nil), auditErr, aerr)
	}
	return errors.Join(s.Move(id, Terminated, "", nil), auditErr, aerr)
}

// moveLocked makes the moves to states in order, for a caller that holds
// the lock, with one write of the state file and one of the audit log;
// errMsg and extra go with the last move. A move to the state already
// held is skipped; nothing moves when any move is refused.
func (s *Store) moveLocked(id string, cur *Record, errMsg string, extra map[string]any, states ...State) error {
	at := cur.State
	var evs []map[string]any
	for _, to := range states {
		if to == at {
			continue
		}
		if !Allowed(at, to) {
			return fmt.Errorf("%w: %q is %s, cannot become %s", ErrTransition, id, orNone(at), to)
		}
		evs = append(evs, map[string]any{"event": "transition", "run_id": id, "from": string(at), "to": string(to)})
		at = to
	}
	if len(evs) == 0 {
		return nil
	}
	last := evs[len(evs)-1]
	if errMsg != "" {
		last["error"] = errMsg
	}
	for k, v := range extra {
		last[k] = v
	}
	*cur = Record{ID: id, State: at, Updated: time.Now().UTC(), Error: errMsg}
	if at == Terminated {
		// The log keeps the history; a finished run needs no state file.
		if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else {
		// Not synced: the state tells what live processes are doing, and
		// a power loss ends them; the reaper treats a lost or stale state
		// as orphaned.
		b, _ := json.Marshal(cur)
		if err := atomicfile.Replace(s.path(id), b, 0o600); err != nil {
			return err
		}
	}
	return s.audit.Append(evs...)
}

func orNone(s State) string {
	if s == "" {
		return "unknown"
	}
	return string(s)
}

// locked runs fn under the store's exclusive flock. Transitions are a few
// small writes, so one lock for every run costs nothing.
func (s *Store) locked(fn func() error) error {
	return flock.With(filepath.Join(s.dir, ".lock"), fn)
}
