package service

// Warm pools: per template, held sandboxes that never ran user code, each
// claimed by one run (or, for sandbox pools, one create) and destroyed
// after it (see runner.Pool). A template that changes gets a new pool; the
// old one's sandboxes go. Every face that runs on a template takes from
// them: the API, /run_code's neighbours and MCP alike.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/runner"
)

// PoolConfig asks for a warm pool of Size sandboxes of a template: for
// one-shot runs, or, with Sandboxes, long-lived ones for creates.
type PoolConfig struct {
	Template  string
	Size      int
	Sandboxes bool
}

// Key names a pool among the service's: the template, or
// "sandboxes/TEMPLATE" for a pool of long-lived sandboxes.
func (c PoolConfig) Key() string {
	if c.Sandboxes {
		return "sandboxes/" + c.Template
	}
	return c.Template
}

// PoolOptions shape every pool of the service.
type PoolOptions struct {
	// MaxAge replaces pooled sandboxes older than it (default
	// runner.DefaultPoolMaxAge).
	MaxAge time.Duration
	// FailWhenEmpty makes a run on an empty pool fail (over_limit)
	// instead of starting cold.
	FailWhenEmpty bool
}

// WithPools asks for the warm pools of cfgs, which StartPools makes.
func WithPools(cfgs []PoolConfig, o PoolOptions) Option {
	return func(s *Service) { s.pools.cfgs, s.pools.opt = cfgs, o }
}

// pools are the service's warm pools by key; the map is fixed once
// StartPools has made them.
type pools struct {
	cfgs []PoolConfig
	opt  PoolOptions
	m    map[string]*warm
	// retiring are the pools a template change replaced, still closing,
	// and the sandboxes of pooled /run_code requests, still being destroyed;
	// releases free the runners the pools hold, once all are closed.
	// closing, under relMu, is set once ClosePools waits for them: work
	// that would join them after runs at once instead (retire).
	retiring sync.WaitGroup
	closing  bool
	relMu    sync.Mutex
	releases []func()
	// refreshMu is held by each refresh, whole: ClosePools takes it to
	// set closed, so a refresh under way when the server stops finishes
	// first (its pool is then closed with the others), and none after
	// makes a pool.
	refreshMu sync.Mutex
	closed    bool
}

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

// StartPools makes every configured pool; one that cannot be made frees
// the others and is the error. ClosePools frees them.
func (s *Service) StartPools(ctx context.Context) error {
	s.pools.refreshMu.Lock()
	closed := s.pools.closed
	s.pools.refreshMu.Unlock()
	if closed {
		return fmt.Errorf("%w: the service's pools were closed; start a new service", errdefs.ErrFailedPrecondition)
	}
	if err := s.checkRunCode(); err != nil {
		return err
	}
	total := 0
	for _, c := range s.pools.cfgs {
		total += c.Size
	}
	if max := s.MaxSandboxes(); max > 0 && total >= max {
		return fmt.Errorf("%w: the pools hold %d sandboxes, which leaves no room under --max-sandboxes %d: shrink the pools or raise the limit", errdefs.ErrInvalidArgument, total, max)
	}
	seen := map[string]bool{}
	for _, c := range s.pools.cfgs {
		if seen[c.Key()] {
			return fmt.Errorf("%w: template %q has two --pool (or --pool-sandboxes) entries; give one", errdefs.ErrInvalidArgument, c.Template)
		}
		seen[c.Key()] = true
	}
	s.pools.m = map[string]*warm{}
	for _, c := range s.pools.cfgs {
		w := &warm{cfg: c}
		if err := s.refresh(ctx, w); err != nil {
			s.ClosePools()
			return err
		}
		s.pools.m[c.Key()] = w
	}
	return nil
}

// refresh makes w's pool anew when its template changed (or on the first
// call); the old pool's sandboxes are destroyed in the background.
func (s *Service) refresh(ctx context.Context, w *warm) error {
	s.pools.refreshMu.Lock()
	defer s.pools.refreshMu.Unlock()
	if s.pools.closed {
		return nil
	}
	t, err := s.Template(w.cfg.Template)
	if err != nil {
		s.retire(w)
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	w.mu.Lock()
	same := w.pool != nil && w.version == t.Version()
	w.mu.Unlock()
	if same {
		return nil
	}
	rn, done, err := s.engines.Runner(ctx, t.Engine)
	if err != nil {
		s.retire(w)
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	o := runner.PoolOptions{Name: w.cfg.Template, Size: w.cfg.Size, MaxAge: s.pools.opt.MaxAge, FailWhenEmpty: s.pools.opt.FailWhenEmpty, Room: s.Room}
	if w.cfg.Sandboxes && slices.Contains(slices.Collect(maps.Values(s.runCode)), w.cfg.Template) {
		// A run-code pool's sandboxes start their exec agent before a
		// claim (the job's one exec then finds it running), and have the
		// fork server's spare touch what it holds, so that the restored
		// clone's first writes are paid before the job's.
		o.Prime = forkserver.PrimeArgv()
	}
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
		done()
		s.retire(w)
		return fmt.Errorf("warm pool of template %q: %w", w.cfg.Template, err)
	}
	s.pools.relMu.Lock()
	s.pools.releases = append(s.pools.releases, done)
	s.pools.relMu.Unlock()
	w.mu.Lock()
	old := w.pool
	w.pool, w.version = p, t.Version()
	if old != nil {
		w.replace++
	}
	w.mu.Unlock()
	if old != nil {
		s.log.Info("template changed: replacing its warm pool", "template", w.cfg.Template)
		s.retiring(func() { old.Close(context.WithoutCancel(ctx)) })
	}
	return nil
}

// retire ends w's pool, made for a version of its template that is no
// more, when no pool of the new one could be made: until one is (each
// RefreshPools tries again), the template's runs and creates start cold
// rather than from sandboxes of the old version.
func (s *Service) retire(w *warm) {
	w.mu.Lock()
	old := w.pool
	w.pool, w.version = nil, ""
	if old != nil {
		w.replace++
	}
	w.mu.Unlock()
	if old != nil {
		s.log.Warn("template changed and its new warm pool could not be made: its runs start cold until it can", "template", w.cfg.Template)
		s.retiring(func() { old.Close(context.Background()) })
	}
}

// RefreshPools replaces the pools of templates that changed.
func (s *Service) RefreshPools(ctx context.Context) {
	for _, w := range s.pools.m {
		if err := s.refresh(ctx, w); err != nil {
			s.log.Warn("checking a warm pool's template", "template", w.cfg.Template, "err", err)
		}
	}
}

// ClosePools destroys every pooled sandbox, and waits for the pools
// replaced earlier to finish closing: a server that returned while one
// was still tearing down would leave its sandboxes to the reaper.
func (s *Service) ClosePools() {
	s.pools.refreshMu.Lock()
	s.pools.closed = true
	s.pools.refreshMu.Unlock()
	defer func() {
		s.pools.relMu.Lock()
		s.pools.closing = true
		s.pools.relMu.Unlock()
		s.pools.retiring.Wait()
		s.pools.relMu.Lock()
		defer s.pools.relMu.Unlock()
		for _, done := range s.pools.releases {
			done()
		}
		s.pools.releases = nil
	}()
	var wg sync.WaitGroup
	for _, w := range s.pools.m {
		if p := w.current(); p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.Close(context.Background()) }()
		}
	}
	wg.Wait()
}

// retiring runs f, a pool's close or a pooled sandbox's destroy, in the
// background, where ClosePools waits for it; once ClosePools is waiting
// (a request that outlived the server's drain), it runs f now: a
// WaitGroup may not grow from zero while it is waited on.
func (s *Service) retiring(f func()) {
	s.pools.relMu.Lock()
	if s.pools.closing {
		s.pools.relMu.Unlock()
		f()
		return
	}
	s.pools.retiring.Add(1)
	s.pools.relMu.Unlock()
	go func() {
		defer s.pools.retiring.Done()
		f()
	}()
}

// Pool returns the pool of a template on rn's engine, for runs or for
// sandbox creates, or nil.
func (s *Service) Pool(template string, sandboxes bool, rn *runner.Runner) *runner.Pool {
	w := s.pools.m[PoolConfig{Template: template, Sandboxes: sandboxes}.Key()]
	if w == nil || template == "" {
		return nil
	}
	p := w.current()
	if p == nil || p.EngineName() != rn.EngineName() {
		return nil
	}
	return p
}

// PoolStat is one pool's counters.
type PoolStat struct {
	// Key is the pool's PoolConfig.Key.
	Key   string
	Stats runner.PoolStats
	// Replaced counts the sandboxes replaced unused: past the maximum
	// age, or because their template changed (the pool's own count, and
	// every sandbox of the pools a change replaced).
	Replaced int64
}

// PoolStats returns every pool's counters, by key.
func (s *Service) PoolStats() []PoolStat {
	var out []PoolStat
	for _, w := range s.pools.m {
		p := w.current()
		if p == nil {
			continue
		}
		st := p.Stats()
		w.mu.Lock()
		replaced := st.Replaced + int64(st.Size)*w.replace
		w.mu.Unlock()
		out = append(out, PoolStat{Key: w.cfg.Key(), Stats: st, Replaced: replaced})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
