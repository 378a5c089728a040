package server

// Warm pools: per template, held sandboxes that never ran user code, each
// claimed by one one-shot run and destroyed after it (see runner.Pool). A
// template that changes gets a new pool; the old one's sandboxes go.

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runner"
)

// PoolConfig asks for a warm pool of Size sandboxes of a template: for
// one-shot runs, or, with Sandboxes, long-lived ones for creates.
type PoolConfig struct {
	Template  string
	Size      int
	Sandboxes bool
}

// key names a pool among the server's.
func (c PoolConfig) key() string {
	if c.Sandboxes {
		return "sandboxes/" + c.Template
	}
	return c.Template
}

// poolCheckEvery is how often the server looks for changed templates.
const poolCheckEvery = time.Second

// warm is one template's pool.
type warm struct {
	cfg     PoolConfig
	mu      sync.Mutex
	pool    *runner.Pool
	version string
	replace int64 // pools replaced after a template change
}

func (w *warm) current() *runner.Pool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pool
}

// startPools makes every configured pool; a pool that cannot be made
// stops the server from starting.
func (s *Server) startPools(ctx context.Context) error {
	total := 0
	for _, c := range s.opt.Pools {
		total += c.Size
	}
	if s.opt.MaxSandboxes > 0 && total >= s.opt.MaxSandboxes {
		return fmt.Errorf("%w: the pools hold %d sandboxes, which leaves no room under --max-sandboxes %d: shrink the pools or raise the limit", errdefs.ErrInvalidArgument, total, s.opt.MaxSandboxes)
	}
	for _, c := range s.opt.Pools {
		if _, dup := s.pools[c.key()]; dup {
			return fmt.Errorf("%w: template %q has two --pool (or --pool-sandboxes) entries; give one", errdefs.ErrInvalidArgument, c.Template)
		}
		w := &warm{cfg: c}
		if err := s.refresh(ctx, w); err != nil {
			s.closePools()
			return err
		}
		s.pools[c.key()] = w
	}
	return nil
}

// refresh makes w's pool anew when its template changed (or on the first
// call); the old pool's sandboxes are destroyed in the background.
func (s *Server) refresh(ctx context.Context, w *warm) error {
	t, err := s.templateStore().Get(w.cfg.Template)
	if err != nil {
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	w.mu.Lock()
	same := w.pool != nil && w.version == t.Version()
	w.mu.Unlock()
	if same {
		return nil
	}
	rn, done, err := s.runnerFor(ctx, t.Engine)
	if err != nil {
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	s.relMu.Lock()
	s.releases = append(s.releases, done) // once every pool is closed
	s.relMu.Unlock()
	o := runner.PoolOptions{Name: w.cfg.Template, Size: w.cfg.Size, MaxAge: s.opt.PoolMaxAge, FailWhenEmpty: s.opt.PoolFailWhenEmpty, Room: s.room}
	var p *runner.Pool
	if w.cfg.Sandboxes {
		var base runner.SandboxSpec
		if base, err = t.NarrowSandbox(runner.SandboxSpec{}); err == nil {
			p, err = rn.NewSandboxPool(ctx, base, o)
		}
	} else {
		p, err = rn.NewPool(ctx, t.Spec(), o)
	}
	if err != nil {
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	w.mu.Lock()
	old := w.pool
	w.pool, w.version = p, t.Version()
	if old != nil {
		w.replace++
	}
	w.mu.Unlock()
	if old != nil {
		s.log.Info("template changed: replacing its warm pool", "template", w.cfg.Template)
		s.retiring.Go(func() { old.Close(context.WithoutCancel(ctx)) })
	}
	return nil
}

// refreshPools replaces the pools of templates that changed.
func (s *Server) refreshPools(ctx context.Context) {
	for _, w := range s.pools {
		if err := s.refresh(ctx, w); err != nil {
			s.log.Warn("checking a warm pool's template", "template", w.cfg.Template, "err", err)
		}
	}
}

// closePools destroys every pooled sandbox, and waits for the pools
// replaced earlier to finish closing: a server that returned while one
// was still tearing down would leave its sandboxes to the reaper.
func (s *Server) closePools() {
	defer func() {
		s.retiring.Wait()
		s.relMu.Lock()
		defer s.relMu.Unlock()
		for _, done := range s.releases {
			done()
		}
		s.releases = nil
	}()
	var wg sync.WaitGroup
	for _, w := range s.pools {
		if p := w.current(); p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.Close(context.Background()) }()
		}
	}
	wg.Wait()
}

// poolFor returns the pool of a template on rn's engine, for runs or for
// sandbox creates, or nil.
func (s *Server) poolFor(template string, sandboxes bool, rn *runner.Runner) *runner.Pool {
	w := s.pools[PoolConfig{Template: template, Sandboxes: sandboxes}.key()]
	if w == nil || template == "" {
		return nil
	}
	p := w.current()
	if p == nil || p.EngineName() != rn.EngineName() {
		return nil
	}
	return p
}

// room says whether one more sandbox fits under MaxSandboxes.
func (s *Server) room() bool { return s.svc.Room() }

// writePools reports every pool's counters at each scrape.
func (s *Server) writePools(e *expo) {
	type row struct {
		name string
		st   runner.PoolStats
		repl int64
	}
	var rows []row
	for _, w := range s.pools {
		p := w.current()
		if p == nil {
			continue
		}
		st := p.Stats()
		w.mu.Lock()
		replaced := st.Replaced + int64(st.Size)*w.replace
		w.mu.Unlock()
		rows = append(rows, row{w.cfg.key(), st, replaced})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	for _, f := range []struct {
		name, help, typ string
		v               func(r row) float64
	}{
		{"airlock_pool_size", "Sandboxes a template's warm pool keeps.", "gauge", func(r row) float64 { return float64(r.st.Size) }},
		{"airlock_pool_ready", "Pooled sandboxes ready to be claimed.", "gauge", func(r row) float64 { return float64(r.st.Ready) }},
		{"airlock_pool_claims_total", "Runs that took a pooled sandbox.", "counter", func(r row) float64 { return float64(r.st.Claims) }},
		{"airlock_pool_misses_total", "Runs of a pooled template that started cold (or failed, under --pool-exhausted fail).", "counter", func(r row) float64 { return float64(r.st.Misses) }},
		{"airlock_pool_refill_failures_total", "Pooled sandboxes that could not be made.", "counter", func(r row) float64 { return float64(r.st.RefillFailures) }},
		{"airlock_pool_replaced_total", "Pooled sandboxes replaced unused: past --pool-max-age, or their template changed.", "counter", func(r row) float64 { return float64(r.repl) }},
	} {
		e.family(f.name, f.help, f.typ)
		for _, r := range rows {
			e.sample(f.name, f.v(r), "template", r.name)
		}
	}
	e.family("airlock_pool_refill_seconds", "Time to make a pooled sandbox (sum and count).", "summary")
	for _, r := range rows {
		e.sample("airlock_pool_refill_seconds_sum", float64(r.st.RefillMS)/1000, "template", r.name)
		e.sample("airlock_pool_refill_seconds_count", float64(r.st.Refills), "template", r.name)
	}
}
