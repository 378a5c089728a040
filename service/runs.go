package service

import (
	"context"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/runner"
)

// Runs lists the one-shot runs recorded under the root.
func (s *Service) Runs() ([]runner.RunInfo, error) { return runner.List(s.root) }

// Kill destroys run id from outside its owner, with every engine's
// reaper; gone says it had already ended.
func (s *Service) Kill(ctx context.Context, id string) (gone bool, err error) {
	reapers, done := s.engines.Reapers(ctx)
	defer done()
	return runner.Kill(ctx, s.root, reapers, id)
}

// Reap frees the runs and sandboxes whose owner died or whose deadline
// passed. full also asks the engines for leftovers no record names;
// without it, the engines are reached only when a record needs them.
func (s *Service) Reap(ctx context.Context, full bool) (runner.ReapReport, error) {
	done := func() {}
	defer func() { done() }()
	return runner.Reap(ctx, s.root, func() []engine.Reaper {
		var reapers []engine.Reaper
		reapers, done = s.engines.Reapers(ctx)
		return reapers
	}, full)
}
