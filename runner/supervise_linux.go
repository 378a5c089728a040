package runner

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/store"
)

// A sandbox's TTL and idle timeout hold with no airlock command running:
// Create starts a supervisor, a process of its own session that outlives
// its creator (no Pdeathsig, stdio on /dev/null), in the manner of
// containerd's per-task shim. It holds no lock while it waits: it wakes
// at least every superviseTick, re-reads the record, and destroys the
// sandbox (expired) once its deadline has passed. It exits once the
// sandbox is gone. Every sweep destroys an expired sandbox too, should
// the supervisor have been killed.

// superviseTick bounds the supervisor's sleep, so that it notices a
// destroyed sandbox (and exits) or new activity soon.
const superviseTick = time.Second

// recordRetries is how many reads of its record in a row, a
// superviseTick apart, may fail before the supervisor ends the sandbox.
const recordRetries = 3

// serve polls for its sandbox every 2 ms for serveFastPoll, the time a
// create takes, then every serveSlowPoll.
const (
	serveFastPoll = 2 * time.Second
	serveSlowPoll = 20 * time.Millisecond
)

// pin holds image's tree in the store against removal.
func (r *Runner) pin(ctx context.Context, image string) (func(), error) {
	id, err := digest.Parse(image)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(r.root, "store"))
	if err != nil {
		return nil, err
	}
	return st.Pin(ctx, id)
}

// WithSupervisor sets the command that supervises a new sandbox: argv(id)
// must run Supervise for id with a Runner of the same root and engine
// (the CLI's is `airlock sandbox supervise ID`). Without it, only sweeps
// enforce the deadlines.
func WithSupervisor(argv func(id string) []string) Option {
	return func(r *Runner) { r.supervisor = argv }
}

func (r *Runner) startSupervisor(id string) error {
	if r.supervisor == nil {
		return nil
	}
	argv := r.supervisor(id)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// Stdin, Stdout and Stderr nil: /dev/null.
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: starting the supervisor of sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	go cmd.Wait() // reaped here should this process outlive it
	return nil
}

// Supervise waits for sandbox id's deadline and destroys it (expired)
// once it has passed; it returns once the sandbox is gone, or when ctx is
// done.
func (r *Runner) Supervise(ctx context.Context, id string) error {
	if err := CheckSandboxID(id); err != nil {
		return err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return err
	}
	// The image's tree stays pinned against `airlock image rm` while the
	// sandbox lives, on an engine that runs on the store (dockerd keeps
	// its own).
	_, onStore := r.engine.(engine.StoreUser)
	if si, err := readInfo(r.root, id); err == nil && onStore {
		if unpin, err := r.pin(ctx, si.Image); err != nil {
			r.log.Warn("pinning the sandbox's image", "sandbox_id", id, "err", err)
		} else {
			defer unpin()
		}
	}
	gone, stop := recordGone(r.root, id)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.serve(sctx, id)
	rc := &recordCache{root: r.root, id: id}
	failed := 0 // reads of the record that failed in a row
	for {
		si, cached, err := rc.read()
		if errdefs.IsNotFound(err) {
			return nil
		}
		if err == nil {
			failed = 0
		} else {
			failed++
		}
		why := lifecycle.Expired
		if err == nil {
			rec, gerr := lc.Get(id)
			if gerr == nil && (rec.State == "" || rec.State == lifecycle.Terminated) {
				return nil
			}
			si.State = rec.State // a paused sandbox's deadline is its TTL
			if (rec.State == lifecycle.Requested || rec.State == lifecycle.Created || rec.State == lifecycle.Pooled) && !si.Creator.alive() {
				why = lifecycle.Orphaned // its creator died mid-create, or its pool's server died
			}
		}
		now := time.Now()
		wait := superviseTick
		if err != nil && failed <= recordRetries {
			// A read that failed (EIO, say) or a record not whole may
			// read well at the next tick.
			r.log.Warn("reading the sandbox's record; trying again", "sandbox_id", id, "attempt", failed, "err", err)
		} else if err != nil {
			// Unreadable or corrupt: nobody can say when it ends, so it
			// ends now.
			wait, why = 0, lifecycle.Orphaned
		} else if why == lifecycle.Orphaned {
			wait = 0
		} else if dl := si.Deadline(now); dl.Sub(now) < wait {
			wait = dl.Sub(now)
		}
		if wait <= 0 && cached {
			rc.forget() // act only on the record as it is now
			continue
		}
		if wait <= 0 {
			derr := r.destroySandbox(ctx, id, why)
			if derr == nil {
				r.log.Info("sandbox ended at its deadline", "sandbox_id", id)
				return nil
			}
			r.log.Warn("destroying an expired sandbox", "sandbox_id", id, "err", derr)
			wait = 5 * time.Second // the engine may come back
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			gone = nil // once: the record is read again at once
		case <-time.After(wait):
		}
	}
}

// serve runs the engine's helper for sandbox id (engine.Server), once the
// engine has made the sandbox and while it is not paused, until ctx is
// done.
func (r *Runner) serve(ctx context.Context, id string) {
	// Polled often while a create would be under way: a sandbox with
	// egress waits for its proxy, which this serves, before its create
	// returns. Open costs a stat until the sandbox exists.
	slowFrom := time.Now().Add(serveFastPoll)
	poll := 2 * time.Millisecond
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if poll < serveSlowPoll && time.Now().After(slowFrom) {
			poll = serveSlowPoll
			tick.Reset(poll)
		}
		esb, err := r.engine.Open(ctx, id)
		if err == nil && r.enginePaused(ctx, id) {
			// Nothing of it runs, and an oci sandbox opened paused has
			// no agent to serve: it is opened again once resumed (this
			// supervisor was started while it was paused).
			if !r.awaitResume(ctx, id) {
				return
			}
			continue
		}
		if err == nil {
			if sv, ok := esb.(engine.Server); ok {
				if err := sv.Serve(ctx); err != nil {
					r.log.Warn("serving the sandbox's exec agent", "sandbox_id", id, "err", err)
				}
			}
			return
		}
		if !errdefs.IsNotFound(err) {
			return // lost, or corrupt: execs will say so
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// awaitResume waits for paused sandbox id to be resumed (a write of its
// record, or a tick), until ctx is done, and reports whether it may have
// been.
func (r *Runner) awaitResume(ctx context.Context, id string) bool {
	written, stop := recordWritten(r.root, id)
	defer stop()
	for r.enginePaused(ctx, id) {
		select {
		case <-ctx.Done():
			return false
		case <-written:
		case <-time.After(superviseTick):
		}
	}
	return ctx.Err() == nil
}

// enginePaused reports whether the engine holds sandbox id paused.
func (r *Runner) enginePaused(ctx context.Context, id string) bool {
	p, ok := r.engine.(engine.Pauser)
	if !ok {
		return false
	}
	paused, err := p.Paused(ctx, id)
	return err == nil && paused
}
