package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/isolation"
)

// holdEngine is the fake engine with held sandboxes.
type holdEngine struct {
	fakeEngine
	mu      sync.Mutex
	held    map[string]int // Start calls per held sandbox
	freed   map[string]bool
	holdErr error
}

func (h *holdEngine) Hold(_ context.Context, s *engine.SandboxSpec) (engine.Held, error) {
	if s.Init != nil {
		return nil, fmt.Errorf("%w: held with a program", errdefs.ErrInvalidArgument)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holdErr != nil {
		return nil, h.holdErr
	}
	if h.held == nil {
		h.held, h.freed = map[string]int{}, map[string]bool{}
	}
	h.held[s.ID] = 0
	return &fakeHeld{h: h, s: s}, nil
}

type fakeHeld struct {
	h *holdEngine
	s *engine.SandboxSpec
}

func (f *fakeHeld) ID() string { return f.s.ID }
func (f *fakeHeld) Check(p *engine.Process) error {
	if p.Argv[0] == "missing" {
		return fmt.Errorf("%w: no %q in the image", errdefs.ErrNotFound, p.Argv[0])
	}
	return nil
}
func (f *fakeHeld) Start(_ context.Context, p *engine.Process) (engine.Task, error) {
	f.h.mu.Lock()
	f.h.held[f.s.ID]++
	n := f.h.held[f.s.ID]
	f.h.mu.Unlock()
	if n > 1 {
		return nil, fmt.Errorf("%w: started twice", errdefs.ErrFailedPrecondition)
	}
	s := *f.s
	s.Init = p
	return &fakeHeldRun{fakeRun{f: &f.h.fakeEngine, s: &s}, f}, nil
}
func (f *fakeHeld) Destroy(context.Context) error {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	f.h.freed[f.s.ID] = true
	return nil
}

// fakeHeldRun is a started held sandbox; its Destroy frees the held one.
type fakeHeldRun struct {
	fakeRun
	held *fakeHeld
}

func (r *fakeHeldRun) Destroy(ctx context.Context) error { return r.held.Destroy(ctx) }

func newPool(t *testing.T, he *holdEngine, o PoolOptions) (*Runner, string, *Pool) {
	t.Helper()
	he.run = func(_ context.Context, j *engine.SandboxSpec) (engine.Exit, error) {
		now := time.Now()
		j.Init.Stdout.Write([]byte(j.Init.Argv[0] + " " + fmt.Sprint(j.Init.Env) + "\n"))
		return engine.Exit{Started: now, Finished: now}, nil
	}
	r, root := newFakeRunner(t, &he.fakeEngine)
	r.engine = he
	p, err := r.NewPool(context.Background(), poolSpec(), o)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Ready < o.Size {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r, root, p
}

// poolSpec is the base of newPool's pools, and a run that fits them.
func poolSpec() Spec {
	s := fakeSpec()
	s.Env = []string{"FROM=pool"}
	return s
}

// Claims take distinct sandboxes, each started once, get the job's env,
// and everything is freed by Close.
func TestPoolClaims(t *testing.T) {
	he := &holdEngine{}
	_, root, p := newPool(t, he, PoolOptions{Name: "t", Size: 2})
	ids := map[string]bool{}
	for i := range 5 {
		// The pool refills after each claim (waited for below), so every
		// run here is a claim.
		s := fakeSpec()
		s.Env = []string{"FROM=pool", fmt.Sprintf("JOB=%d", i)}
		res, err := p.Run(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pool != "t" {
			t.Fatalf("run %d started cold with %+v", i, p.Stats())
		}
		if ids[res.ID] {
			t.Fatalf("sandbox %s claimed twice", res.ID)
		}
		ids[res.ID] = true
		if want := fmt.Sprintf("true [FROM=pool JOB=%d]\n", i); string(res.Stdout.Head) != want {
			t.Fatalf("run %d printed %q, want %q", i, res.Stdout.Head, want)
		}
		for deadline := time.Now().Add(5 * time.Second); p.Stats().Ready < 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no refill")
			}
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	he.mu.Lock()
	defer he.mu.Unlock()
	for id, n := range he.held {
		if n > 1 || !he.freed[id] {
			t.Errorf("held sandbox %s: started %d times, freed %v", id, n, he.freed[id])
		}
	}
	if left := leftovers(root); len(left) > 0 {
		t.Errorf("after Close: %v", left)
	}
}

// A run that does not fit the pool's sandboxes, or names a program the
// image lacks, starts cold and leaves the pool as it was. A run that
// leaves out a variable of the pool's env (its template's, since changed)
// would get it from the pooled sandbox, so it does not fit either.
func TestPoolMisses(t *testing.T) {
	he := &holdEngine{}
	_, _, p := newPool(t, he, PoolOptions{Name: "t", Size: 1})
	defer p.Close(context.Background())
	other := poolSpec()
	other.Policy.Limits.Memory = 128 << 20
	longer := poolSpec()
	longer.Policy.Limits.Timeout = time.Hour
	missing := poolSpec()
	missing.Argv = []string{"missing"}
	unset := poolSpec()
	unset.Env = []string{"JOB=1"}
	cases := map[string]Spec{"another policy": other, "a longer timeout": longer, "a missing program": missing, "the pool's env unset": unset}
	for name, s := range cases {
		res, err := p.Run(context.Background(), s)
		if err != nil || res.Pool != "" {
			t.Errorf("%s: pool %q, err %v; want a cold run", name, res.Pool, err)
		}
		if strings.Contains(string(res.Stdout.Head), "FROM=pool") {
			t.Errorf("%s: the run saw the pool's env: %q", name, res.Stdout.Head)
		}
	}
	if st := p.Stats(); st.Ready != 1 || st.Claims != 0 || st.Misses != int64(len(cases)) {
		t.Errorf("stats %+v; want 1 ready, 0 claims, %d misses", st, len(cases))
	}
	// The pool's variable set to another value fits: the run's is laid
	// over it.
	over := poolSpec()
	over.Env = []string{"FROM=job"}
	if res, err := p.Run(context.Background(), over); err != nil || res.Pool != "t" || string(res.Stdout.Head) != "true [FROM=job]\n" {
		t.Errorf("FROM=job: pool %q, printed %q, err %v; want a claim printing [FROM=job]", res.Pool, res.Stdout.Head, err)
	}
}

// An empty pool fails fast when told to.
func TestPoolFailWhenEmpty(t *testing.T) {
	he := &holdEngine{}
	_, _, p := newPool(t, he, PoolOptions{Name: "t", Size: 1, FailWhenEmpty: true})
	defer p.Close(context.Background())
	he.mu.Lock()
	he.holdErr = fmt.Errorf("%w: no refills", errdefs.ErrUnavailable)
	he.mu.Unlock()
	if res, err := p.Run(context.Background(), poolSpec()); err != nil || res.Pool != "t" {
		t.Fatalf("the first run: %v %+v", err, res)
	}
	// Over limit, of its own cause: the faces advise a wait, not a destroy.
	if _, err := p.Run(context.Background(), poolSpec()); !errdefs.IsResourceExhausted(err) || !errors.Is(err, errkind.ErrPoolEmpty) {
		t.Fatalf("a run on the empty pool: %v; want errkind.ErrPoolEmpty", err)
	}
}

// Sandboxes past the max age are replaced.
func TestPoolMaxAge(t *testing.T) {
	he := &holdEngine{}
	_, _, p := newPool(t, he, PoolOptions{Name: "t", Size: 1, MaxAge: time.Second})
	defer p.Close(context.Background())
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Replaced == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing replaced after 10s: %+v", p.Stats())
		}
	}
}

// Only engines that hold sandboxes keep pools; sizes are bounded.
func TestNewPoolRefuses(t *testing.T) {
	r, _ := newFakeRunner(t, &fakeEngine{})
	if _, err := r.NewPool(context.Background(), fakeSpec(), PoolOptions{Size: 1}); !errdefs.IsNotImplemented(err) {
		t.Errorf("a pool on an engine without Hold: %v", err)
	}
	he := &holdEngine{}
	r2, _ := newFakeRunner(t, &he.fakeEngine)
	r2.engine = he
	for _, n := range []int{0, -1, 257} {
		if _, err := r2.NewPool(context.Background(), fakeSpec(), PoolOptions{Size: n}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("size %d: %v", n, err)
		}
	}
}

// A pool of long-lived sandboxes: a fitting create takes a pooled one,
// which then has the caller's labels and is ready; a pooled one no
// client can open; another workspace size creates one; Close frees the
// rest.
func TestSandboxPool(t *testing.T) {
	f := &fakeSandboxer{}
	r, root := newSandboxRunner(t, f)
	ctx := context.Background()
	p, err := r.NewSandboxPool(ctx, fakeSandboxSpec(), PoolOptions{Name: "t", Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	var pooledID string
	for deadline := time.Now().Add(10 * time.Second); pooledID == ""; time.Sleep(5 * time.Millisecond) {
		list, _ := ListSandboxes(root)
		for _, si := range list {
			if si.State == "pooled" && si.Labels["pool"] == "t" {
				pooledID = si.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool never filled")
		}
	}
	if _, err := r.Open(ctx, pooledID); !errdefs.IsNotFound(err) {
		t.Fatalf("Open of a pooled sandbox: %v; want not found", err)
	}
	want := fakeSandboxSpec()
	want.Labels = map[string]string{"owner": "me"}
	sb, err := p.Create(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID() != pooledID || stateOf(t, root, sb.ID()) != "ready" || sb.Info().Labels["owner"] != "me" || sb.Info().Labels["pool"] != "" {
		t.Fatalf("claimed %s (pooled %s), state %s, labels %v", sb.ID(), pooledID, stateOf(t, root, sb.ID()), sb.Info().Labels)
	}
	other := fakeSandboxSpec()
	other.WorkspaceSize = 32 << 20
	cold, err := p.Create(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if cold.ID() == pooledID || p.Stats().Misses != 1 {
		t.Fatalf("a create that does not fit: %s, stats %+v", cold.ID(), p.Stats())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sb.ID(), cold.ID()} {
		if err := r.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if left := sandboxLeftovers(root); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// TestSandboxPoolPrime: a pool's Prime runs in each sandbox before it is
// pooled; a sandbox whose prime fails is destroyed, never pooled.
func TestSandboxPoolPrime(t *testing.T) {
	for _, code := range []int{0, 1} {
		var mu sync.Mutex
		var primed []string
		f := &fakeSandboxer{exec: func(_ context.Context, p *engine.Process) (engine.Exit, error) {
			mu.Lock()
			defer mu.Unlock()
			primed = append(primed, strings.Join(p.Argv, " "))
			return engine.Exit{Code: code}, nil
		}}
		r, root := newSandboxRunner(t, f)
		ctx := context.Background()
		p, err := r.NewSandboxPool(ctx, fakeSandboxSpec(), PoolOptions{Name: "t", Size: 1, Prime: []string{"prime", "me"}})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st := p.Stats()
			if code == 0 && st.Ready == 1 || code != 0 && st.RefillFailures > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("prime exit %d: stats %+v", code, st)
			}
		}
		mu.Lock()
		if len(primed) == 0 || primed[0] != "prime me" {
			t.Errorf("prime exit %d: execs %q", code, primed)
		}
		mu.Unlock()
		if code != 0 {
			if f.destroyed.Load() == 0 {
				t.Errorf("a sandbox whose prime failed was not destroyed")
			}
			list, _ := ListSandboxes(root)
			for _, si := range list {
				if si.State == "pooled" {
					t.Errorf("a sandbox whose prime failed is pooled: %+v", si)
				}
			}
		}
		p.Close(ctx)
	}
}

// TestPoolFullSleeps: once a pool is full again after claims, its fillers
// wait for the next claim; they do not wake each other in a loop.
func TestPoolFullSleeps(t *testing.T) {
	he := &holdEngine{}
	_, _, p := newPool(t, he, PoolOptions{Name: "t", Size: 2})
	defer p.Close(context.Background())
	for range 2 {
		if _, err := p.Run(context.Background(), poolSpec()); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); p.Stats().Ready < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no refill: %+v", p.Stats())
		}
	}
	looks := func() int64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.looks
	}
	// A filler ending its refill as the pool filled may look once more.
	time.Sleep(50 * time.Millisecond)
	before := looks()
	time.Sleep(300 * time.Millisecond)
	if n := looks() - before; n > 0 {
		t.Fatalf("a full pool's fillers looked %d times in 300ms", n)
	}
}

// A pool of long-lived sandboxes of a snapshot template holds sandboxes
// restored from the snapshot the template had when the pool was made: a
// create asking for another (the template's warm program made again), or
// for none, does not take one.
func TestSandboxPoolFitsSnapshot(t *testing.T) {
	pol := isolation.Default()
	pol.Seccomp = &isolation.SeccompProfile{SHA256: "aa"}
	plan := &engine.SandboxSpec{Image: digest.Digest("sha256:" + strings.Repeat("11", 32)), Policy: pol}
	p := &Pool{sbase: SandboxSpec{Snapshot: "old"}, splan: plan}
	job := &engine.SandboxSpec{Image: plan.Image, Policy: pol}
	for _, snap := range []string{"new", ""} {
		if why := p.fitsSandbox(SandboxSpec{Snapshot: snap}, job); why != "another snapshot" {
			t.Errorf("snapshot %q on a pool restored from %q: %q, want another snapshot", snap, "old", why)
		}
	}
	if why := p.fitsSandbox(SandboxSpec{Snapshot: "old"}, job); why != "" {
		t.Errorf("the pool's own snapshot: %q", why)
	}
}

// A pooled sandbox destroyed while it waits (`airlock kill` of the id
// `airlock ps` lists) is a miss: the run that claims it starts cold.
func TestPoolRunOnKilledPooledSandboxStartsCold(t *testing.T) {
	he := &holdEngine{}
	_, root, p := newPool(t, he, PoolOptions{Name: "t", Size: 1})
	defer p.Close(context.Background())
	p.mu.Lock()
	id := p.ready[0].id
	p.mu.Unlock()
	if _, err := Kill(context.Background(), root, []engine.Reaper{he}, id); err != nil {
		t.Fatalf("kill %s: %v", id, err)
	}
	res, err := p.Run(context.Background(), poolSpec())
	if err != nil || res.Reason != ReasonExited || res.Pool != "" {
		t.Fatalf("a run after its pooled sandbox was killed: reason %q, pool %q, err %v; want a cold run that exits", res.Reason, res.Pool, err)
	}
	if st := p.Stats(); st.Claims != 0 || st.Misses != 1 {
		t.Errorf("stats %+v; want 0 claims, 1 miss", st)
	}
}
