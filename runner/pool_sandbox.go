package runner

// Warm pools of long-lived sandboxes: made ahead from a template's
// policy, each taken by one create. The pool's sandboxes run airlock's
// idle init and nothing else; a claim gives one its caller's labels, TTL,
// idle timeout and download allowlist (all host-side) and makes it ready.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/capbuf"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// NewSandboxPool starts filling a pool of long-lived sandboxes made from
// base (its labels, TTL and idle timeout are the claims'). Close frees
// them.
func (r *Runner) NewSandboxPool(ctx context.Context, base SandboxSpec, o PoolOptions) (*Pool, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Name == "" {
		return nil, fmt.Errorf("%w: a pool needs a name", errdefs.ErrInvalidArgument)
	}
	// Until claimed, a pooled sandbox lives for the pool's max age.
	base.Labels, base.TTL, base.IdleTimeout, base.pool = nil, o.MaxAge+time.Minute, o.MaxAge+time.Minute, o.Name
	if err := base.defaults(); err != nil {
		return nil, err
	}
	job, err := r.planSandbox(base)
	if err != nil {
		return nil, err
	}
	if err := r.engine.Check(ctx, job); err != nil {
		return nil, err
	}
	p := &Pool{r: r, sbase: base, splan: job}
	p.fill = p.fillSandbox
	return p, p.start(ctx, o)
}

// primeAwait bounds a pool's wait for a new sandbox's helper before its
// prime: the supervisor finds a new sandbox within milliseconds (serve).
const primeAwait = time.Second

// fillSandbox makes one long-lived sandbox, left created; the filler
// records it pooled.
func (p *Pool) fillSandbox(ctx context.Context) (*pooled, error) {
	sb, err := p.r.Create(ctx, p.sbase)
	if err != nil {
		return nil, err
	}
	if len(p.opt.Prime) > 0 {
		// Through the engine's helper, once its supervisor serves it: the
		// slower way costs CPU the pool's sandboxes share. Past primeAwait
		// it goes the slower way.
		if w, ok := sb.eng.(engine.Awaiter); ok {
			actx, cancel := context.WithTimeout(ctx, primeAwait)
			w.Served(actx)
			cancel()
		}
		// The engine's exec, unrecorded: the sandbox stays created, no
		// client's, until the filler pools it.
		stderr := capbuf.New(4096)
		ex, err := sb.eng.Exec(ctx, &engine.Process{Argv: p.opt.Prime, Timeout: time.Minute, Stdout: io.Discard, Stderr: stderr})
		if err == nil && (ex.Code != 0 || ex.TimedOut || ex.Killed || ex.OOMKilled) {
			err = fmt.Errorf("priming a pooled sandbox with %q: exit %d: %q", p.opt.Prime, ex.Code, stderr.Bytes())
		}
		if err != nil {
			if derr := p.r.Destroy(context.WithoutCancel(ctx), sb.ID()); derr != nil {
				err = also(err, derr)
			}
			return nil, err
		}
	}
	return &pooled{id: sb.ID(), born: time.Now()}, nil
}

// Create makes a sandbox as Runner.Create does, taking a pooled one when
// s fits the pool's (the same image, policy, env, workspace size and
// output directory) and one is ready; otherwise it creates one, or, with
// FailWhenEmpty and an empty pool, fails with ErrResourceExhausted.
func (p *Pool) Create(ctx context.Context, s SandboxSpec) (*Sandbox, error) {
	sb, refill, err := p.Claim(ctx, s)
	refill()
	return sb, err
}

// Claim is Create for a sandbox that serves one short job (/run_code):
// the pool refills only once the caller calls refill, after the job, so
// that the refill's restore does not take the CPU from the job. refill
// is never nil; call it once, whatever the error.
func (p *Pool) Claim(ctx context.Context, s SandboxSpec) (sb *Sandbox, refill func(), err error) {
	sb, err = p.create(ctx, s)
	return sb, p.kick, err
}

func (p *Pool) create(ctx context.Context, s SandboxSpec) (*Sandbox, error) {
	if p.splan == nil {
		return nil, fmt.Errorf("%w: pool %q keeps sandboxes for runs, not for creates", errdefs.ErrInvalidArgument, p.opt.Name)
	}
	if err := s.defaults(); err != nil {
		return nil, err
	}
	job, err := p.r.planSandbox(s)
	if err != nil {
		return nil, err
	}
	e, err := p.claim(p.fitsSandbox(s, job))
	if err != nil {
		return nil, err
	}
	if e == nil {
		return p.r.Create(ctx, s)
	}
	sb, err := p.r.claimSandbox(ctx, e.id, p.opt.Name, s)
	if err != nil {
		p.r.log.Warn("claiming a pooled sandbox", "pool", p.opt.Name, "sandbox_id", e.id, "err", err)
		p.later(func() { p.discard(e) })
		p.missed(err.Error())
		return p.r.Create(ctx, s)
	}
	p.mu.Lock()
	p.stats.Claims++
	p.mu.Unlock()
	return sb, nil
}

// fitsSandbox says why s (planned as job) cannot take one of the pool's
// sandboxes, or "".
func (p *Pool) fitsSandbox(s SandboxSpec, job *engine.SandboxSpec) string {
	b := p.sbase
	switch {
	case len(s.Inputs) > 0:
		return "inputs are staged per sandbox"
	case job.Image != p.splan.Image:
		return "another image"
	case s.Snapshot != b.Snapshot:
		return "another snapshot"
	case !slices.Equal(s.Env, b.Env):
		return "another environment"
	case s.WorkspaceSize != b.WorkspaceSize:
		return "another workspace size"
	case s.Output.Disabled != b.Output.Disabled || s.Output.Dir != b.Output.Dir || s.Output.Size != b.Output.Size || s.Output.Files != b.Output.Files:
		return "another output directory"
	}
	return samePolicy(job.Policy, p.splan.Policy)
}

// claimSandbox makes pooled sandbox id the caller's: its labels,
// deadlines and download allowlist are s's, and it becomes ready.
func (r *Runner) claimSandbox(ctx context.Context, id, pool string, s SandboxSpec) (*Sandbox, error) {
	lc, err := r.lifecycle()
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lockWait)
	defer cancel()
	lk, err := lockPooled(lctx, lc, id)
	if err != nil {
		return nil, err
	}
	defer lk.Release()
	now := time.Now().UTC()
	err = updateInfo(r.root, id, func(si *SandboxInfo) error {
		si.Labels = maps.Clone(s.Labels)
		if si.Labels == nil {
			si.Labels = map[string]string{}
		}
		si.DownloadTypes = s.DownloadTypes
		si.CreatedAt, si.ExpiresAt, si.LastActivity = now, now.Add(s.TTL), now
		si.IdleTimeoutMS = s.IdleTimeout.Milliseconds()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := lc.Move(id, lifecycle.Ready, "", map[string]any{"pool": pool, "labels": s.Labels, "ttl_ms": s.TTL.Milliseconds(), "idle_timeout_ms": s.IdleTimeout.Milliseconds()}); err != nil {
		return nil, err
	}
	return r.Open(ctx, id)
}
