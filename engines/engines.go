// Package engines builds airlock's concrete engines on this host, by name.
// It is the one package that imports engine/oci and engine/docker: the CLI
// hands a Host to the service as its Engines, and no face imports an
// engine. It also owns what the engines keep on the host outside a run:
// the docker engine's runtime registration and dockerd's image store.
package engines

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/runner"
)

// Host makes the engines and runners of one airlock root.
type Host struct {
	root   string
	log    *slog.Logger
	opts   []runner.Option
	shared bool
	// egressHosts and egressCA are the oci engine's (WithEgressFiles).
	egressHosts, egressCA string

	mu      sync.Mutex
	runners map[string]*runner.Runner
	closers []func()
}

// Option configures a Host.
type Option func(*Host)

// WithLogger sets the engines' and runners' logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(h *Host) { h.log = l } }

// WithRunnerOptions adds opts to every runner's options (after the root,
// the engine and the logger).
func WithRunnerOptions(opts ...runner.Option) Option {
	return func(h *Host) { h.opts = append(h.opts, opts...) }
}

// WithEgressFiles gives the oci engine's egress proxies a hosts file that
// pins names for their resolver and a CA bundle added to the roots they
// verify credential routes' hosts against (oci.WithEgressHosts,
// oci.WithEgressCA); "" leaves either out.
func WithEgressFiles(hosts, ca string) Option {
	return func(h *Host) { h.egressHosts, h.egressCA = hosts, ca }
}

// Shared keeps one runner per engine, made on first use, until Close: a
// server's. Without it every Runner call makes a runner that its release
// closes: a command's.
func Shared() Option { return func(h *Host) { h.shared = true } }

// New returns the host's engines over root.
func New(root string, opts ...Option) *Host {
	h := &Host{root: root, log: slog.New(slog.DiscardHandler), runners: map[string]*runner.Runner{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Resolve names the engine name stands for: auto is oci where airlock can
// use it (root, and setup's runsc installed), and docker otherwise.
func (h *Host) Resolve(name string) string { return oci.Resolve(h.root, name) }

// Engine returns engine name (auto, oci or docker) and the function that
// closes it.
func (h *Host) Engine(name string) (engine.Engine, func(), error) {
	switch resolved := h.Resolve(name); resolved {
	case "docker":
		e, err := h.docker()
		if err != nil {
			return nil, nil, err
		}
		return e, func() { e.Close() }, nil
	case "oci":
		opts := []oci.Option{oci.WithLogger(h.log), oci.WithEgressHosts(h.egressHosts), oci.WithEgressCA(h.egressCA)}
		if !h.shared {
			// One command's engine: its process exits once the call
			// returns, and need not wait for a resume's used checkpoint
			// to be removed.
			opts = append(opts, oci.WithDetachedCleanup())
		}
		e, err := oci.New(h.root, opts...)
		if err != nil {
			return nil, nil, err
		}
		return e, e.Close, nil
	}
	return nil, nil, fmt.Errorf("%w: engine %q: use auto, oci or docker", errdefs.ErrInvalidArgument, name)
}

// Runner returns a runner on engine name and the function that releases
// it. A shared host's runners stay the host's until Close.
func (h *Host) Runner(_ context.Context, name string) (*runner.Runner, func(), error) {
	if h.shared {
		h.mu.Lock()
		defer h.mu.Unlock()
		if r, ok := h.runners[name]; ok {
			return r, func() {}, nil
		}
	}
	eng, done, err := h.Engine(name)
	if err != nil {
		return nil, nil, err
	}
	r, err := runner.New(append([]runner.Option{runner.WithRoot(h.root), runner.WithEngine(eng), runner.WithLogger(h.log)}, h.opts...)...)
	if err != nil {
		done()
		return nil, nil, err
	}
	if !h.shared {
		return r, done, nil
	}
	h.closers = append(h.closers, done)
	h.runners[name] = r
	h.runners[eng.Name()] = r
	return r, func() {}, nil
}

// Reapers returns every engine airlock can reach, to find and free what
// runs and sandboxes left; done closes them. An engine that cannot be
// reached (no runsc, no dockerd) is left out.
func (h *Host) Reapers(ctx context.Context) (reapers []engine.Reaper, done func()) {
	if e, err := oci.New(h.root, oci.WithLogger(h.log)); err == nil {
		reapers = append(reapers, e)
	}
	d, err := h.docker()
	if err != nil {
		return reapers, func() {}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if d.Ping(pctx) != nil {
		d.Close()
		return reapers, func() {}
	}
	return append(reapers, d), func() { d.Close() }
}

// Close closes a shared host's engines.
func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.closers {
		c()
	}
	h.closers, h.runners = nil, map[string]*runner.Runner{}
}

// docker returns a docker engine that runs gVisor under the root's
// registered runtime.
func (h *Host) docker() (*docker.Engine, error) {
	rt, err := engineRuntime(h.root)
	if err != nil {
		return nil, err
	}
	return docker.New(docker.WithLogger(h.log), docker.WithRuntime(rt), docker.WithRoot(h.root))
}
