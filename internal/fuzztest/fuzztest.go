// Package fuzztest builds what the faces' fuzz targets share: an airlock
// root with a default image and one template, and a runner on an engine
// that refuses every sandbox (enginetest.Refusing), so a fuzzed request
// goes through the real parsing, planning and checks and creates nothing.
package fuzztest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
)

// Runner makes a root holding a default image and the template named
// template of spec, and a runner on it over a refusing engine.
func Runner(tb testing.TB, template string, spec runner.Spec) (root string, rn *runner.Runner, eng *enginetest.Refusing, tp *templates.Template) {
	tb.Helper()
	root = tb.TempDir()
	idx := images.OpenIndex(filepath.Join(root, "images"))
	if err := idx.SetDefault(images.Lock{Ref: "airlock/default@sha256:" + strings.Repeat("1", 64), BuiltAt: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	tp, err := templates.New(template, spec, "auto", idx)
	if err != nil {
		tb.Fatal(err)
	}
	if err := templates.Open(root).Put(tp); err != nil {
		tb.Fatal(err)
	}
	eng = &enginetest.Refusing{}
	if rn, err = runner.New(runner.WithRoot(root), runner.WithEngine(eng)); err != nil {
		tb.Fatal(err)
	}
	return root, rn, eng, tp
}

// Runners is mcpserver.Runners over one runner: every call gets it, and
// no sandbox is live to be found.
type Runners struct {
	Runner *runner.Runner
	Root   string
}

func (r Runners) New(context.Context) (*runner.Runner, func(), error) {
	return r.Runner, func() {}, nil
}

func (r Runners) ForSandbox(_ context.Context, id string) (*runner.Runner, func(), error) {
	return nil, nil, fmt.Errorf("%w: no sandbox %q", errdefs.ErrNotFound, id)
}

func (r Runners) Template(name string) (*templates.Template, error) {
	return templates.Open(r.Root).Get(name)
}

func (r Runners) ForTemplate(context.Context, *templates.Template) (*runner.Runner, func(), error) {
	return r.Runner, func() {}, nil
}
