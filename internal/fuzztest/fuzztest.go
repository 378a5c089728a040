// Package fuzztest builds what the faces' tests and fuzz targets share:
// an airlock root with a default image and one template, a runner on an
// engine that refuses every sandbox (enginetest.Refusing), so a fuzzed
// request goes through the real parsing, planning and checks and creates
// nothing, and the engines of a machine that has none (NoEngines).
package fuzztest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
)

// Runner makes a root holding a default image and the template named
// template of spec, and a runner on it over a refusing engine.
func Runner(tb testing.TB, template string, spec runner.Spec) (root string, rn *runner.Runner, eng *enginetest.Refusing, tp *templates.Template) {
	tb.Helper()
	root = tb.TempDir()
	tp = PutTemplate(tb, root, template, spec, "auto")
	eng = &enginetest.Refusing{}
	var err error
	if rn, err = runner.New(runner.WithRoot(root), runner.WithEngine(eng)); err != nil {
		tb.Fatal(err)
	}
	return root, rn, eng, tp
}

// PutTemplate stores template name of spec on engine under root, with a
// default image set for it to pin.
func PutTemplate(tb testing.TB, root, name string, spec runner.Spec, engine string) *templates.Template {
	tb.Helper()
	idx := images.OpenIndex(filepath.Join(root, "images"))
	if err := idx.SetDefault(images.Lock{Ref: "airlock/default@sha256:" + strings.Repeat("1", 64), BuiltAt: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	tp, err := templates.New(name, spec, engine, idx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := templates.Open(root).Put(tp); err != nil {
		tb.Fatal(err)
	}
	return tp
}

// Service is the service over root whose every engine is rn, with no
// reapers.
func Service(root string, rn *runner.Runner) *service.Service {
	return service.New(root, Engines(rn))
}

// Engines are service.Engines whose every engine is rn, with no reapers.
func Engines(rn *runner.Runner) service.Engines { return oneRunner{rn} }

type oneRunner struct{ rn *runner.Runner }

func (o oneRunner) Runner(context.Context, string) (*runner.Runner, func(), error) {
	return o.rn, func() {}, nil
}

func (oneRunner) Reapers(context.Context) ([]engine.Reaper, func()) { return nil, func() {} }

// ErrNoEngine is NoEngines' answer to every runner asked for.
var ErrNoEngine = fmt.Errorf("%w: no engine in unit tests", errdefs.ErrUnavailable)

// NoEngines are service.Engines of a machine with no engine: every runner
// asked for fails with ErrNoEngine, so a test can tell that a request was
// refused before it got that far. They record the engines asked for and
// the ids their reaper was asked to free.
type NoEngines struct {
	mu     sync.Mutex
	asked  []string
	reaped []string
}

func (n *NoEngines) Runner(_ context.Context, name string) (*runner.Runner, func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.asked = append(n.asked, name)
	return nil, nil, ErrNoEngine
}

func (n *NoEngines) Reapers(context.Context) ([]engine.Reaper, func()) {
	return []engine.Reaper{noReaper{n}}, func() {}
}

// Asked lists the engine names asked for so far, and forgets them.
func (n *NoEngines) Asked() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := n.asked
	n.asked = nil
	return a
}

// Reaped lists the ids the reaper was asked to free.
func (n *NoEngines) Reaped() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.reaped)
}

type noReaper struct{ n *NoEngines }

func (noReaper) Leftovers(context.Context) ([]string, error) { return nil, nil }

func (r noReaper) Reap(_ context.Context, id string) error {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	r.n.reaped = append(r.n.reaped, id)
	return nil
}
