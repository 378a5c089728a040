// Package admission caps the sandboxes and one-shot runs live at once on
// one airlock root, those claimed on a cluster included. One Gate is made
// per server and handed to every face that makes sandboxes or runs (the
// HTTP API, /run_code, MCP), so that they share one count.
package admission

import (
	"fmt"
	"sync"

	"github.com/airlock-sandbox/airlock/runner"
)

// Gate admits a new sandbox or run while fewer than its maximum are live:
// the sandboxes recorded under its root (warm pools' included), those
// CountAlso counts, and the admissions not yet released. A nil Gate
// admits everything.
type Gate struct {
	root string
	max  int

	mu      sync.Mutex
	pending int
	others  func() (int, error)
}

// New returns a Gate allowing max sandboxes and runs under root.
func New(root string, max int) *Gate { return &Gate{root: root, max: max} }

// Max is the gate's maximum; a nil Gate's is 0, none.
func (g *Gate) Max() int {
	if g == nil {
		return 0
	}
	return g.max
}

// OverLimitError refuses an admission past the maximum. It is
// errdefs.IsResourceExhausted.
type OverLimitError struct{ Live, Max int }

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("%d sandboxes and runs are live, the most this server allows (--max-sandboxes %d); delete a sandbox or wait for runs to end, then retry", e.Live, e.Max)
}

// ResourceExhausted classifies the error for errdefs.
func (e *OverLimitError) ResourceExhausted() {}

// CountAlso has g count, beside the sandboxes recorded under its root,
// those others counts: the service's sandboxes on a cluster, whose
// records this package does not read. It replaces an earlier call's.
func (g *Gate) CountAlso(others func() (int, error)) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.others = others
}

// live counts the sandboxes recorded; g.mu is held, so that a count and
// the admission it allows are one step.
func (g *Gate) live() (int, error) {
	n, err := runner.CountSandboxes(g.root)
	if err != nil || g.others == nil {
		return n, err
	}
	m, err := g.others()
	return n + m, err
}

// Room says whether one more sandbox or run would be admitted now.
func (g *Gate) Room() bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n, err := g.live()
	return err == nil && n+g.pending < g.max
}

// Admit reserves room for one more sandbox or run; release gives it back
// (once a sandbox is made, its record counts it instead), and may be
// called more than once.
func (g *Gate) Admit() (release func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n, err := g.live()
	if err != nil {
		return nil, err
	}
	if n += g.pending; n >= g.max {
		return nil, &OverLimitError{Live: n, Max: g.max}
	}
	return Reserve(&g.mu, &g.pending), nil
}

// Reserve counts one more pending admission in *pending, which mu guards
// and the caller holds, and returns what takes it back: once, however
// often it is called.
func Reserve(mu *sync.Mutex, pending *int) (release func()) {
	*pending++
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			*pending--
			mu.Unlock()
		})
	}
}
