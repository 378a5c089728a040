package runner

// A one-shot run: its lock protocol (locks, transitions, teardown) and its
// execution on the engine.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

var (
	errTimeout     = errors.New("timeout")
	errOutputLimit = errors.New("output limit")
	// errClaimLost is a pooled sandbox a run claimed but could not take:
	// nothing ran on it.
	errClaimLost = errors.New("claiming a pooled sandbox")
)

// Run converts and validates s, checks that the engine can run it, then runs
// it to the end. See the package comment for how outcomes are reported.
func (r *Runner) Run(ctx context.Context, s Spec) (Result, error) {
	ctx = withClock(ctx)
	defer func() { r.log.Debug("run phases", phases(ctx)...) }()
	s.normalize()
	job, err := r.plan(s)
	if err != nil {
		return Result{}, err
	}
	if err := checkDestinations(s.Output); err != nil {
		return Result{}, err
	}
	if err := r.engine.Check(ctx, job); err != nil {
		return Result{}, err
	}
	// Receipts name the runtime's version: a runtime that cannot say fails
	// the run before anything is created.
	if _, err := r.engine.Runtime(ctx, job.Policy.Isolation); err != nil {
		return Result{}, err
	}
	mark(ctx, "plan")
	return r.run(ctx, s, job, nil)
}

// recordOf is what the audit log keeps of a job when it is requested.
func (r *Runner) recordOf(job *engine.SandboxSpec) map[string]any {
	return map[string]any{
		"image": job.Image.String(), "engine": r.engine.Name(), "isolation": string(job.Policy.Isolation),
		"seccomp_profile_sha256": job.Policy.Seccomp.SHA256, "limits": limitsOf(job.Policy.Limits), "owner": job.Owner,
	}
}

// normalize fills a Spec's defaults before it is planned.
func (s *Spec) normalize() {
	s.Output = s.Output.WithDefaults()
	if s.InputLimit == 0 {
		s.InputLimit = 256 << 20
	}
	for i := range s.Inputs {
		if s.Inputs[i].Sandbox == "" {
			s.Inputs[i].Sandbox = path.Join("/work", filepath.Base(filepath.Clean(s.Inputs[i].Host)))
		}
	}
}

// claim is a warm pool's held sandbox taken by one run: its scratch was
// made, and its mounts bound, when it was held.
type claim struct {
	held engine.Held
	sc   *scratch
	pool string
	// later runs the sandbox's teardown once the Result is out (the
	// pool waits for it at Close); sb is the sandbox left for it.
	later func(func())
	sb    engine.Task
}

// free destroys a claimed sandbox left for later, now.
func (c *claim) free(ctx context.Context) error {
	if c == nil || c.sb == nil {
		return nil
	}
	err := errors.Join(c.sb.Destroy(context.WithoutCancel(ctx)), c.sc.cleanup())
	c.sb = nil
	return err
}

// run runs a planned, checked job under the lock protocol: on a sandbox
// of its own, or on the held sandbox c.
func (r *Runner) run(ctx context.Context, s Spec, job *engine.SandboxSpec, c *claim) (Result, error) {
	lc, err := r.lifecycle()
	if err != nil {
		return Result{}, err
	}
	rl := &runLock{r: r, lc: lc, id: job.ID, ctx: ctx}
	// The run lock is held while the sandbox is created and while it is
	// torn down, so a destroy that lands then waits (see lifecycle). Begin
	// refuses an audit log it cannot write before anything starts.
	bctx, cancel := rl.lockCtx()
	extra := r.recordOf(job)
	if c == nil {
		rl.held, err = lc.Begin(bctx, job.ID, extra)
	} else {
		rl.held, err = r.claimed(bctx, lc, job.ID, c, extra)
	}
	cancel()
	if err != nil {
		if c != nil {
			// Killed or reaped while it waited in the pool, say: Pool.Run
			// starts the run cold.
			r.discard(ctx, lc, c)
			return Result{}, fmt.Errorf("%w: %w", errClaimLost, err)
		}
		return Result{}, fmt.Errorf("%w: recording the run: %w", errdefs.ErrUnavailable, err)
	}
	mark(ctx, "begin")
	defer rl.release()
	res, err := r.execute(ctx, s, job, rl.state, rl.teardown, c)
	// A destroyer may hold the run lock now: wait for it to say.
	rl.teardown()
	if rl.destroyed {
		if ferr := c.free(ctx); ferr != nil {
			r.log.Warn("freeing a claimed sandbox", "sandbox_id", job.ID, "err", ferr)
		}
		res.Reason, res.Error, res.ErrorKind = ReasonDestroyed, "another airlock process destroyed the run: `airlock kill`, or `airlock reap` after its deadline passed", ""
		res.Receipt = nil
		// The destroyer recorded the transitions; the summary is this
		// process's to give.
		ev := auditSummary(res, nil)
		ev["event"], ev["run_id"] = "result", job.ID
		if aerr := lc.Audit().Append(ev); aerr != nil {
			err = fmt.Errorf("another airlock process destroyed the run, and its result was not recorded: %w", aerr)
			res.Reason, res.Error = ReasonError, err.Error()
			return res, err
		}
		return res, nil
	}
	if rl.stateErr != nil {
		// The engine's error, if any, stays first.
		err = also(err, rl.stateErr)
		res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
	}
	if err != nil {
		// The state and the audit log keep why: a lost sandbox, a daemon
		// that went away, a runtime that failed.
		rl.record(lifecycle.Failed, err.Error(), nil)
	}
	if c != nil && c.sb != nil && err == nil && rl.auditErr == nil && rl.held != nil {
		rl.state(lifecycle.Terminating)
		// Every process of the claimed sandbox is gone (Wait saw to it)
		// and its output is read: what is left to free waits until the
		// Result is out. The run stays terminating until then, its lock
		// held, so a destroyer or a reaper finds it as it would any run.
		lk, summary := rl.held, auditSummary(res, nil)
		rl.held = nil
		c.later(func() {
			defer lk.Release()
			if ferr := c.free(ctx); ferr != nil {
				r.log.Warn("tearing a pooled run down", "sandbox_id", job.ID, "err", ferr)
				summary["teardown_error"] = ferr.Error()
			}
			if merr := lc.Move(job.ID, lifecycle.Terminated, "", summary); merr != nil {
				r.log.Warn("recording state", "sandbox_id", job.ID, "state", lifecycle.Terminated, "err", merr)
			}
		})
		return res, nil
	}
	if ferr := c.free(ctx); ferr != nil {
		err = also(err, ferr)
		res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
	}
	// A run that ended well is recorded terminating only now, with its
	// end, in one write: its teardown held the run lock since the
	// program's end, so no destroyer came in meanwhile.
	rl.noted(lc.Finish(job.ID, auditSummary(res, err)), lifecycle.Terminating, lifecycle.Terminated)
	mark(ctx, "finish")
	if rl.auditErr != nil {
		err = also(err, fmt.Errorf("recording the run: %w", rl.auditErr))
		res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
	}
	return res, err
}

// runLock is one run's side of the lock protocol (see lifecycle): the run
// lock it holds while its sandbox is created and while it is torn down,
// the moves it records, and what it learns at teardown.
type runLock struct {
	r   *Runner
	lc  *lifecycle.Store
	id  string
	ctx context.Context
	// held is the run lock, while this process holds it.
	held *lifecycle.RunLock
	// auditErr is the first audit event that could not be written: the
	// run then fails, whatever the program did.
	auditErr error
	// destroyed is set when, by the time this process comes to tear the
	// run down, another has destroyed it (airlock kill, or a reap past
	// its deadline). stateErr is set when teardown could not find out:
	// the run lock stayed held past its bound, or the state is
	// unreadable.
	destroyed, tornDown bool
	stateErr            error
}

// lockCtx bounds one wait for the run lock: a run that lasts longer than
// one bound must still wait for a destroyer at its teardown.
func (l *runLock) lockCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(l.ctx), l.r.lockWait)
}

func (l *runLock) release() {
	if l.held != nil {
		l.held.Release()
		l.held = nil
	}
}

// noted keeps the first audit error; other failures to record are logged.
func (l *runLock) noted(merr error, sts ...lifecycle.State) {
	var ae *lifecycle.AuditError
	switch {
	case errors.As(merr, &ae):
		l.auditErr = cmp.Or(l.auditErr, merr)
	case merr != nil:
		l.r.log.Warn("recording state", "sandbox_id", l.id, "state", sts, "err", merr)
	}
}

func (l *runLock) record(st lifecycle.State, errMsg string, extra map[string]any) {
	l.noted(l.lc.Move(l.id, st, errMsg, extra), st)
}

// teardown takes the run lock back, once, and reads whether another
// process destroyed the run meanwhile.
func (l *runLock) teardown() {
	if l.held != nil || l.tornDown {
		return
	}
	l.tornDown = true
	tctx, cancel := l.lockCtx()
	defer cancel()
	var lerr error
	if l.held, lerr = l.lc.Lock(tctx, l.id); lerr != nil {
		l.stateErr = fmt.Errorf("%w: tearing the run down: %v; another airlock process (`airlock kill` or `airlock reap`) held its lock for more than %v", errdefs.ErrUnavailable, lerr, l.r.lockWait)
		return
	}
	rec, gerr := l.lc.Get(l.id)
	if gerr != nil {
		l.stateErr = fmt.Errorf("%w: tearing the run down: %v; `airlock reap` removes what the run left", errdefs.ErrInternal, gerr)
		return
	}
	l.destroyed = rec.State == "" || rec.State == lifecycle.Terminating
}

// state records the sandbox's moves: Terminating alone, or the start's
// created, ready and running in one write (which lets the lock go).
func (l *runLock) state(sts ...lifecycle.State) {
	if len(sts) == 1 && sts[0] == lifecycle.Terminating {
		l.teardown()
		if l.destroyed {
			return // the destroyer recorded it
		}
		l.record(lifecycle.Terminating, "", nil)
		return
	}
	l.noted(l.lc.MoveThrough(l.id, sts...), sts...)
	if slices.Contains(sts, lifecycle.Created) {
		l.release()
	}
}

// also adds more to err, keeping err first; either may be nil.
func also(err, more error) error {
	if err == nil {
		return more
	}
	return fmt.Errorf("%w; and %w", err, more)
}

// lockTimeout bounds the wait for a run's own lock: a destroy in progress
// holds it while it kills and removes the sandbox.
const lockTimeout = 2 * time.Minute

// execute runs a planned, checked job: scratch, then a one-shot sandbox
// created, waited for and destroyed, then artifacts and the receipt. state
// hears the sandbox become created, ready and running; Run records its
// end. When the run fails, teardown runs before the run directory goes,
// so a destroyer at work on it finishes first.
func (r *Runner) execute(ctx context.Context, s Spec, job *engine.SandboxSpec, state func(...lifecycle.State), teardown func(), c *claim) (res Result, err error) {
	var sc *scratch
	if c != nil {
		sc = c.sc
	} else if sc, err = prepareScratch(ctx, r.root, job.ID, &s, job.Policy.UID, job.Policy.GID, job.Deadline); err != nil {
		return Result{}, err
	}
	mark(ctx, "scratch")
	defer func() {
		if err != nil {
			teardown()
			if ferr := c.free(ctx); ferr != nil {
				err = also(err, ferr)
			}
		}
		if c != nil && c.sb != nil {
			return // run frees it, scratch and all
		}
		if errors.As(err, new(unfreedError)) {
			r.log.Warn("the engine could not free the run's sandbox; its run directory stays for the sweep", "sandbox_id", job.ID, "err", err)
			if oerr := sc.orphan(); oerr != nil {
				r.log.Warn("leaving the run directory to the sweep", "sandbox_id", job.ID, "err", oerr)
			}
			return
		}
		if err := sc.cleanup(); err != nil {
			r.log.Warn("cleaning up run directory", "sandbox_id", job.ID, "err", err)
		}
	}()
	job.Mounts = sc.mounts

	runCtx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	lim := int64(job.Policy.Limits.Output)
	stdout := newCapture(lim, s.Stdout, func() { kill(errOutputLimit) })
	stderr := newCapture(lim, s.Stderr, func() { kill(errOutputLimit) })
	job.Init.Stdout, job.Init.Stderr = stdout, stderr

	res = Result{
		ID:        job.ID,
		Image:     job.Image.String(),
		Engine:    r.engine.Name(),
		Isolation: string(job.Policy.Isolation),
		Seccomp:   job.Policy.Seccomp.SHA256,
		Limits:    limitsOf(job.Policy.Limits),
	}
	if ref, err := images.ParseRef(s.Image); err == nil && ref.Name != "" {
		res.ImageRef = ref.String()
	}
	// What the receipt needs from disk, the key and the image's manifest,
	// is read while the program runs.
	// The run does not return before this is done, whatever its outcome.
	sealReady := make(chan struct{})
	var manifest string
	go func() {
		defer close(sealReady)
		r.loadKey()
		manifest = r.manifestOf(job.Image)
	}()
	defer func() { <-sealReady }()
	begin := time.Now()
	exit, destroyed, err := r.runOnce(ctx, runCtx, job, state, c)
	if destroyed != nil {
		// However the rest goes, the run ends once its sandbox is gone.
		defer func() {
			derr := <-destroyed
			mark(ctx, "destroy")
			if derr != nil {
				err = also(err, derr)
				res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
			}
		}()
	}
	res.Stdout, res.Stderr = stdout.stream(), stderr.stream()
	if err == nil {
		// The run lock, from the program's end: a destroyer that comes
		// now waits for the run's own teardown. Run records the moves.
		teardown()
	}
	if err != nil {
		res.Reason = ReasonError
		res.Error = err.Error()
		res.ExitCode = -1
		res.DurationMS = time.Since(begin).Milliseconds()
		return res, err
	}
	res.exited(exit, context.Cause(runCtx))
	if sc.out != "" {
		// The engine has removed the sandbox: no process is left to race
		// the scan.
		o := s.Output
		if s.DeliverByRun {
			o = deliverByRun(o, &res)
		}
		if err := collectOutput(ctx, sc.out, o, &res); err != nil {
			res.Reason, res.Error = ReasonError, err.Error()
			return res, err
		}
	}
	mark(ctx, "scan")
	<-sealReady
	if err = r.sign(ctx, job, s, &res, sc.inputs, manifest); err != nil {
		res.Reason, res.Error = ReasonError, err.Error()
		return res, err
	}
	mark(ctx, "seal")
	r.log.Info("run ended", "sandbox_id", job.ID, "image_digest", job.Image.String(), "reason", res.Reason, "exit_code", res.ExitCode)
	return res, nil
}

// runOnce runs job on the engine as a task: run it (the program its
// sandbox's only process), or start held sandbox c's, then wait and
// destroy. ctx bounds nothing but the destroy's parent; runCtx's end kills
// the program.
func (r *Runner) runOnce(ctx, runCtx context.Context, job *engine.SandboxSpec, state func(...lifecycle.State), c *claim) (engine.Exit, <-chan error, error) {
	var sb engine.Task
	var err error
	if c == nil {
		sb, err = r.engine.Run(runCtx, job)
	} else if sb, err = c.held.Start(runCtx, job.Init); err != nil && sb == nil {
		if derr := c.held.Destroy(context.WithoutCancel(ctx)); derr != nil {
			err = also(err, derr)
		}
	}
	if err != nil {
		if sb != nil {
			if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
				err = also(err, unfreedError{derr})
			}
		}
		return engine.Exit{}, nil, err
	}
	mark(ctx, "create")
	// The program runs from here: a destroyer may now come in (state
	// releases the run lock at created).
	state(lifecycle.Created, lifecycle.Ready, lifecycle.Running)
	mark(ctx, "record")
	exit, err := sb.Wait(runCtx)
	mark(ctx, "wait")
	if c != nil && c.later != nil && err == nil {
		// Wait killed whatever the program left: nothing writes to its
		// mounts any more, and freeing the rest can wait (see run).
		c.sb = sb
		return exit, nil, nil
	}
	if err != nil {
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			err = also(err, unfreedError{derr})
		}
		mark(ctx, "destroy")
		return exit, nil, err
	}
	// For the same reason the sandbox is destroyed while its output is
	// read and the receipt sealed; the run ends once it is gone.
	destroyed := make(chan error, 1)
	go func() {
		var derr error
		if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
			derr = unfreedError{err}
		}
		destroyed <- derr
	}()
	return exit, destroyed, nil
}

// unfreedError is the engine's failure to free a run's sandbox: the run
// directory then stays for the sweep (scratch.orphan).
type unfreedError struct{ error }

func (e unfreedError) Unwrap() error { return e.error }
