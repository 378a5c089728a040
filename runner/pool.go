package runner

// A warm pool: held one-shot sandboxes made ahead of the runs that claim
// them (see engine.Holder). A pooled sandbox has never run user code, is
// used by exactly one run, and is destroyed after it; every claim starts a
// refill. Job data (argv, env, stdin, the run's limits on time and output)
// reaches the sandbox only at the claim.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// DefaultPoolMaxAge is how long a pooled sandbox waits before it is
// replaced.
const DefaultPoolMaxAge = 10 * time.Minute

// PoolOptions configure a warm pool.
type PoolOptions struct {
	// Name names the pool in logs, metrics and `sandbox ls` (a template's
	// name, or "batch").
	Name string
	// Size is how many held sandboxes the pool keeps ready.
	Size int
	// MaxAge replaces a held sandbox older than this (default 10m).
	MaxAge time.Duration
	// FailWhenEmpty makes a claim on an empty pool fail with
	// errdefs.ErrResourceExhausted instead of starting a sandbox cold.
	FailWhenEmpty bool
	// Room, when set, is asked before each refill whether one more
	// sandbox fits (a server's --max-sandboxes).
	Room func() bool
	// Fillers is how many sandboxes are made at once (default 2).
	Fillers int
	// Prime, for a pool of long-lived sandboxes, is an exec of airlock's
	// own run in each sandbox once it is made, before it is pooled (so
	// that its exec agent runs before a claim's first exec); it must exit
	// 0, or the sandbox is destroyed. Never user code: a pooled sandbox
	// is no client's until claimed.
	Prime []string
}

// PoolStats is a pool's state and counters.
type PoolStats struct {
	Name  string `json:"name"`
	Size  int    `json:"size"`
	Ready int    `json:"ready"`
	// Claims counts runs that took a pooled sandbox; Misses, runs that
	// asked and started cold (or failed, with FailWhenEmpty).
	Claims int64 `json:"claims"`
	Misses int64 `json:"misses"`
	// Refills counts sandboxes made, RefillFailures attempts that failed;
	// RefillMS sums the time the made ones took.
	Refills        int64  `json:"refills"`
	RefillFailures int64  `json:"refill_failures"`
	RefillMS       int64  `json:"refill_ms_total"`
	Replaced       int64  `json:"replaced"`
	LastError      string `json:"last_error,omitempty"`
}

// Pool keeps sandboxes ready for one base spec: held one-shot sandboxes
// for runs (NewPool, Run), or long-lived sandboxes for creates
// (NewSandboxPool, Create).
type Pool struct {
	r    *Runner
	opt  PoolOptions
	fill func(context.Context) (*pooled, error)

	// A pool of held sandboxes:
	holder engine.Holder
	base   Spec
	plan   *engine.SandboxSpec // base, planned once

	// A pool of long-lived sandboxes:
	sbase SandboxSpec
	splan *engine.SandboxSpec

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{}
	// teardowns are claimed sandboxes being freed after their runs.
	teardowns sync.WaitGroup

	mu      sync.Mutex
	ready   []*pooled
	filling int
	looks   int64 // the fillers' rounds, for tests: none while full
	stats   PoolStats
	closed  bool
}

// pooled is one sandbox in a pool: a held one-shot sandbox (held, sc,
// job), or a long-lived sandbox (only id).
type pooled struct {
	id   string
	held engine.Held
	sc   *scratch
	job  *engine.SandboxSpec
	born time.Time
}

// NewPool checks base (its Argv is ignored) and starts filling a pool of
// held sandboxes for it. Close frees them. The engine must implement
// engine.Holder.
func (r *Runner) NewPool(ctx context.Context, base Spec, o PoolOptions) (*Pool, error) {
	h, ok := r.engine.(engine.Holder)
	if !ok {
		return nil, fmt.Errorf("%w: the %s engine cannot keep a warm pool; use --engine oci", errdefs.ErrNotImplemented, r.engine.Name())
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if len(base.Inputs) > 0 {
		return nil, fmt.Errorf("%w: a pool's sandboxes hold no inputs: leave them out of its template", errdefs.ErrInvalidArgument)
	}
	base.Argv = []string{"true"}
	base.normalize()
	job, err := r.plan(base)
	if err != nil {
		return nil, err
	}
	if err := r.engine.Check(ctx, job); err != nil {
		return nil, err
	}
	if _, err := r.engine.Runtime(ctx, job.Policy.Isolation); err != nil {
		return nil, err
	}
	p := &Pool{r: r, holder: h, base: base, plan: job}
	p.fill = p.fillHeld
	return p, p.start(ctx, o)
}

// check fills o's defaults and refuses what is out of range.
func (o *PoolOptions) check() error {
	if o.Size <= 0 || o.Size > 256 {
		return fmt.Errorf("%w: a pool's size must be 1-256, not %d", errdefs.ErrInvalidArgument, o.Size)
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultPoolMaxAge
	}
	if o.MaxAge < time.Second {
		return fmt.Errorf("%w: a pool's max age must be at least 1s, not %v", errdefs.ErrInvalidArgument, o.MaxAge)
	}
	if o.Fillers <= 0 {
		o.Fillers = min(2, o.Size)
	}
	return nil
}

// start starts filling p.
func (p *Pool) start(ctx context.Context, o PoolOptions) error {
	if _, err := p.r.lifecycle(); err != nil {
		return err
	}
	p.opt = o
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wake = make(chan struct{}, 1)
	p.stats = PoolStats{Name: o.Name, Size: o.Size}
	for range o.Fillers {
		p.wg.Add(1)
		go p.filler()
	}
	p.wg.Add(1)
	go p.ager()
	return nil
}

// EngineName is the name of the engine the pool's sandboxes run on.
func (p *Pool) EngineName() string { return p.r.EngineName() }

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Ready = len(p.ready)
	return st
}

// Run runs s on a pooled sandbox when s fits the pool's and one is ready,
// and otherwise cold, as Runner.Run (or, with FailWhenEmpty and an empty
// pool, fails with errdefs.ErrResourceExhausted). The Result is a cold
// run's, with Pool set when a pooled sandbox ran it.
func (p *Pool) Run(ctx context.Context, s Spec) (Result, error) {
	if p.plan == nil {
		return Result{}, fmt.Errorf("%w: pool %q keeps sandboxes for creates, not for runs", errdefs.ErrInvalidArgument, p.opt.Name)
	}
	s.normalize()
	job, err := p.r.plan(s)
	if err != nil {
		return Result{}, err
	}
	if err := checkDestinations(s.Output); err != nil {
		return Result{}, err
	}
	e, err := p.claim(p.fits(s, job))
	defer p.kick()
	if err != nil {
		return Result{}, err
	}
	if e == nil {
		return p.r.Run(ctx, s)
	}
	// The held sandbox has the pool's environment, working directory and
	// timeout; the job's go with its program.
	job.Init.Env, job.Init.Workdir, job.Init.Timeout = job.Env, job.Workdir, job.Policy.Limits.Timeout
	if err := e.held.Check(job.Init); err != nil {
		// Nothing ran: the sandbox goes back, and the run starts cold,
		// where the runtime reports the problem as it always does.
		p.put(e)
		p.missed(err.Error())
		return p.r.Run(ctx, s)
	}
	job.ID, job.Deadline, job.Owner, job.Mounts = e.job.ID, e.job.Deadline, e.job.Owner, e.sc.mounts
	res, err := p.r.run(ctx, s, job, &claim{held: e.held, sc: e.sc, pool: p.opt.Name, later: p.later})
	if errors.Is(err, errClaimLost) {
		// The sandbox went while it waited (`airlock kill`, a reaper) and
		// run discarded it: a miss, as Pool.create's.
		p.r.log.Warn("claiming a pooled sandbox", "pool", p.opt.Name, "sandbox_id", e.id, "err", err)
		p.missed(err.Error())
		return p.r.Run(ctx, s)
	}
	p.mu.Lock()
	p.stats.Claims++
	p.mu.Unlock()
	if res.ID != "" {
		res.Pool = p.opt.Name
	}
	return res, err
}

// fits says why s cannot run on the pool's sandboxes, or "" when it can:
// no inputs, the same working directory, and the same shape (fitsShape).
func (p *Pool) fits(s Spec, job *engine.SandboxSpec) string {
	switch {
	case len(s.Inputs) > 0:
		return "inputs are staged per run"
	case s.Workdir != p.base.Workdir:
		return "another working directory"
	case !setsEvery(s.Env, p.base.Env):
		return "another environment"
	}
	return fitsShape(s.Output, job, p.base.Output, p.plan)
}

// setsEvery says whether env names every variable base does: a held
// sandbox's environment is the pool's base, and a run's env is laid over
// it, so a variable the run does not set would come from the pool (from a
// template since changed, say).
func setsEvery(env, base []string) bool {
	names := make(map[string]bool, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			return false
		}
	}
	return true
}

// fitsShape says why a run of output o, planned as job, cannot run on a
// sandbox of output bo planned as b, or "" when it can: the same image,
// output directory and policy, with at most b's timeout (timeouts and
// output caps are airlock's to enforce, not the sandbox's).
func fitsShape(o Output, job *engine.SandboxSpec, bo Output, b *engine.SandboxSpec) string {
	switch {
	case job.Image != b.Image:
		return "another image"
	case job.Policy.Limits.Timeout > b.Policy.Limits.Timeout:
		return fmt.Sprintf("the timeout %v is over the sandbox's %v", job.Policy.Limits.Timeout, b.Policy.Limits.Timeout)
	case o.Disabled != bo.Disabled || o.Dir != bo.Dir || o.Size != bo.Size || o.Files != bo.Files:
		return "another output directory"
	}
	return samePolicy(withoutExecLimits(job.Policy), withoutExecLimits(b.Policy))
}

// withoutExecLimits is p without the limits each run or exec sets for
// itself: its timeout and output cap, airlock's to enforce.
func withoutExecLimits(p isolation.Policy) isolation.Policy {
	p.Limits.Timeout, p.Limits.Output = 0, 0
	return p
}

// samePolicy says how policy a differs from b, or "" when it does not.
// Seccomp profiles are the same when their bytes are.
func samePolicy(a, b isolation.Policy) string {
	if a.Seccomp == nil || b.Seccomp == nil || a.Seccomp.SHA256 != b.Seccomp.SHA256 {
		return "another seccomp profile"
	}
	a.Seccomp, b.Seccomp = nil, nil
	if !reflect.DeepEqual(a, b) {
		return "another policy"
	}
	return ""
}

// claim takes a ready sandbox for a request that fits the pool (why is
// ""). nil, nil is a miss, recorded, for the caller to start cold; an
// empty pool under FailWhenEmpty is ErrResourceExhausted. The caller
// kicks the fillers once its request is done.
func (p *Pool) claim(why string) (*pooled, error) {
	if why != "" {
		p.missed(why)
		return nil, nil
	}
	if e := p.take(); e != nil {
		return e, nil
	}
	p.missed("the pool is empty")
	if p.opt.FailWhenEmpty {
		return nil, fmt.Errorf("%w: warm pool %q is empty (%d sandboxes, all claimed or still starting) and is set to fail when empty (--pool-exhausted fail): retry shortly, or grow the pool", errkind.ErrPoolEmpty, p.opt.Name, p.opt.Size)
	}
	return nil, nil
}

func (p *Pool) missed(why string) {
	p.mu.Lock()
	p.stats.Misses++
	p.mu.Unlock()
	p.r.log.Debug("pool miss", "pool", p.opt.Name, "why", why)
}

// take removes the oldest ready sandbox young enough to use. The caller
// wakes a filler once its run is over: a refill is a sandbox's boot, and
// on a small machine it would take its CPU from the run that claimed.
func (p *Pool) take() *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		e := p.ready[0]
		p.ready = p.ready[1:]
		if time.Since(e.born) < p.opt.MaxAge {
			return e
		}
		p.stats.Replaced++
		p.later(func() { p.discard(e) })
	}
	return nil
}

// put returns an unused sandbox to the pool, first in line.
func (p *Pool) put(e *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addLocked(e, true)
}

// addLocked makes e ready, unless the pool is closed or already full (a
// filler woken while e was out may have replaced it): then e goes. The
// pool never holds more than its size.
func (p *Pool) addLocked(e *pooled, first bool) {
	switch {
	case p.closed || len(p.ready) >= p.opt.Size:
		p.later(func() { p.discard(e) })
	case first:
		p.ready = append([]*pooled{e}, p.ready...)
	default:
		p.ready = append(p.ready, e)
	}
}

// kick wakes one filler. A filler passes the wake on only while more
// sandboxes are missing than are being made, so a full pool's fillers
// sleep.
func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// filler makes sandboxes while the pool is short of its size.
func (p *Pool) filler() {
	defer p.wg.Done()
	backoff := time.Duration(0)
	for {
		p.mu.Lock()
		p.looks++
		short := !p.closed && len(p.ready)+p.filling < p.opt.Size
		if short {
			p.filling++
			if len(p.ready)+p.filling < p.opt.Size {
				p.kick() // more to make: another filler starts too
			}
		}
		p.mu.Unlock()
		if short && (p.opt.Room == nil || p.opt.Room()) {
			t0 := time.Now()
			e, err := p.fill(p.ctx)
			p.mu.Lock()
			p.filling--
			switch {
			case err != nil:
			case p.closed:
				p.later(func() { p.discard(e) })
			default:
				// Recorded pooled and made ready at once: whoever sees it
				// pooled (`sandbox ls`) finds it claimable.
				if err = p.r.lc.Move(e.id, lifecycle.Pooled, "", nil); err != nil {
					p.later(func() { p.discard(e) })
				} else {
					p.addLocked(e, false)
				}
			}
			if err != nil {
				p.stats.RefillFailures++
				p.stats.LastError = err.Error()
			} else {
				p.stats.Refills++
				p.stats.RefillMS += time.Since(t0).Milliseconds()
			}
			p.mu.Unlock()
			if err == nil {
				backoff = 0
				continue
			}
			if p.ctx.Err() != nil {
				return
			}
			p.r.log.Warn("refilling the warm pool", "pool", p.opt.Name, "err", err)
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
		} else if short {
			p.mu.Lock()
			p.filling--
			p.mu.Unlock()
			backoff = time.Second // no room: look again soon
		}
		wait := time.NewTimer(cmp.Or(backoff, time.Minute))
		select {
		case <-p.ctx.Done():
			wait.Stop()
			return
		case <-p.wake:
			if backoff > 0 {
				// A failing refill still waits out its backoff.
				select {
				case <-p.ctx.Done():
					wait.Stop()
					return
				case <-wait.C:
				}
			}
		case <-wait.C:
		}
		wait.Stop()
	}
}

// ager replaces sandboxes past MaxAge.
func (p *Pool) ager() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.opt.MaxAge/10, time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		var old []*pooled
		p.ready = slices.DeleteFunc(p.ready, func(e *pooled) bool {
			if time.Since(e.born) >= p.opt.MaxAge {
				old = append(old, e)
				return true
			}
			return false
		})
		p.stats.Replaced += int64(len(old))
		p.mu.Unlock()
		for _, e := range old {
			p.discard(e)
		}
		if len(old) > 0 {
			p.kick()
		}
	}
}

// fillHeld makes one held sandbox: recorded as requested, its scratch
// made, held by the engine; the filler then records it pooled.
func (p *Pool) fillHeld(ctx context.Context) (_ *pooled, err error) {
	r := p.r
	s := p.base
	job, err := r.plan(s)
	if err != nil {
		return nil, err
	}
	job.Init = nil
	// The deadline covers the wait in the pool and the longest run.
	job.Deadline = time.Now().Add(p.opt.MaxAge + job.Policy.Limits.Timeout + time.Minute)
	lc, err := r.lifecycle()
	if err != nil {
		return nil, err
	}
	rec := r.recordOf(job)
	rec["pool"] = p.opt.Name
	lk, err := lc.Begin(ctx, job.ID, rec)
	if err != nil {
		return nil, fmt.Errorf("%w: recording a pooled sandbox: %w", errdefs.ErrUnavailable, err)
	}
	defer lk.Release()
	e := &pooled{id: job.ID, job: job, born: time.Now()}
	defer func() {
		if err != nil {
			lc.Move(job.ID, lifecycle.Failed, err.Error(), nil)
			lc.Move(job.ID, lifecycle.Terminating, "", nil)
			if ferr := e.free(context.WithoutCancel(ctx)); ferr != nil {
				err = also(err, ferr)
			}
			lc.Move(job.ID, lifecycle.Terminated, "", nil)
		}
	}()
	if e.sc, err = prepareScratch(ctx, r.root, job.ID, &s, job.Policy.UID, job.Policy.GID, job.Deadline); err != nil {
		return nil, err
	}
	job.Mounts = e.sc.mounts
	if e.held, err = p.holder.Hold(ctx, job); err != nil {
		return nil, err
	}
	si := SandboxInfo{ID: job.ID, State: lifecycle.Pooled, Image: job.Image.String(), Engine: r.engine.Name(),
		Isolation: string(job.Policy.Isolation), Seccomp: job.Policy.Seccomp.SHA256, Limits: limitsOf(job.Policy.Limits),
		Labels: map[string]string{"pool": p.opt.Name}, CreatedAt: e.born, ExpiresAt: e.born.Add(p.opt.MaxAge),
		LastActivity: e.born, IdleTimeoutMS: p.opt.MaxAge.Milliseconds()}
	if ref, err := images.ParseRef(s.Image); err == nil && ref.Name != "" {
		si.ImageRef = ref.String()
	}
	if err := writePooled(e.sc.dir, &si); err != nil {
		return nil, err
	}
	// The filler records it pooled as it makes it ready.
	return e, nil
}

// free destroys the held sandbox and removes its scratch.
func (e *pooled) free(ctx context.Context) error {
	var errs []error
	if e.held != nil {
		errs = append(errs, e.held.Destroy(ctx))
	}
	if e.sc != nil {
		errs = append(errs, e.sc.cleanup())
	}
	return errors.Join(errs...)
}

// discard destroys an unused pooled sandbox under the lock protocol.
func (p *Pool) discard(e *pooled) {
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	var err error
	if e.job == nil {
		err = p.r.Destroy(ctx, e.id) // a long-lived sandbox
	} else if lc, lerr := p.r.lifecycle(); lerr != nil {
		err = lerr
	} else {
		err = lc.Destroy(ctx, e.id, "", func() error { return e.free(ctx) })
	}
	if err != nil {
		p.r.log.Warn("destroying a pooled sandbox", "pool", p.opt.Name, "sandbox_id", e.id, "err", err)
	}
}

// later runs a teardown (a claimed sandbox after its run, an unused one
// discarded) in the background; Close waits for it.
func (p *Pool) later(f func()) {
	p.teardowns.Add(1)
	go func() {
		defer p.teardowns.Done()
		f()
	}()
}

// Close stops refilling and destroys every sandbox still in the pool, and
// waits for the claimed ones being freed.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	left := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, e := range left {
		wg.Add(1)
		go func() { defer wg.Done(); p.discard(e) }()
	}
	wg.Wait()
	p.teardowns.Wait()
	return nil
}

// claimed takes the run lock of a pooled sandbox a run has claimed, once
// no reaper has taken it meanwhile.
func (r *Runner) claimed(ctx context.Context, lc *lifecycle.Store, id string, c *claim, extra map[string]any) (*lifecycle.RunLock, error) {
	lk, err := lockPooled(ctx, lc, id)
	if err != nil {
		return nil, err
	}
	removePooled(c.sc.dir)
	ev := map[string]any{"event": "claimed", "run_id": id, "pool": c.pool}
	for k, v := range extra {
		ev[k] = v
	}
	if err := lc.Audit().Append(ev); err != nil {
		lk.Release()
		return nil, err
	}
	return lk, nil
}

// lockPooled takes pooled sandbox id's run lock, once no reaper or
// destroyer has taken the sandbox meanwhile.
func lockPooled(ctx context.Context, lc *lifecycle.Store, id string) (*lifecycle.RunLock, error) {
	lk, err := lc.Lock(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := lc.Get(id)
	if err == nil && rec.State != lifecycle.Pooled {
		err = fmt.Errorf("pooled sandbox %q is %s, not pooled: a reaper or a destroy took it", id, orNone(rec.State))
	}
	if err != nil {
		lk.Release()
		return nil, err
	}
	return lk, nil
}

func orNone(s lifecycle.State) string {
	if s == "" {
		return "gone"
	}
	return string(s)
}

// pooledFile, in a pooled sandbox's run directory, is its record for
// `sandbox ls` until a run claims it.
const pooledFile = "pool.json"

func writePooled(dir string, si *SandboxInfo) error {
	b, err := json.Marshal(si)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, pooledFile), b, 0o600); err != nil {
		return fmt.Errorf("%w: recording a pooled sandbox: %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

func removePooled(dir string) { os.Remove(filepath.Join(dir, pooledFile)) }

// listPooled lists the pooled sandboxes under root: those whose state is
// pooled.
func listPooled(root string) []SandboxInfo {
	files, _ := filepath.Glob(filepath.Join(root, "runs", "*", pooledFile))
	lc, err := lifecycle.Open(root)
	if err != nil {
		return nil
	}
	var out []SandboxInfo
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var si SandboxInfo
		if json.Unmarshal(b, &si) != nil || !runID.MatchString(si.ID) || filepath.Base(filepath.Dir(f)) != si.ID {
			continue
		}
		if rec, err := lc.Get(si.ID); err != nil || rec.State != lifecycle.Pooled {
			continue
		}
		out = append(out, si)
	}
	return out
}

// discard destroys a claimed sandbox that could not be run.
func (r *Runner) discard(ctx context.Context, lc *lifecycle.Store, c *claim) {
	e := &pooled{held: c.held, sc: c.sc}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockTimeout)
	defer cancel()
	id := c.held.ID()
	if err := lc.Destroy(dctx, id, "", func() error { return e.free(dctx) }); err != nil {
		r.log.Warn("destroying a claimed sandbox", "sandbox_id", id, "err", err)
	}
}
