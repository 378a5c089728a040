package service

import (
	"context"
	"errors"

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
// passed. full also asks the engines for leftovers no record names, and
// removes the snapshots no template names (reported as "snapshot NAME");
// without it, the engines are reached only when a record needs them.
func (s *Service) Reap(ctx context.Context, full bool) (runner.ReapReport, error) {
	done := func() {}
	defer func() { done() }()
	var reapers []engine.Reaper
	got := false
	rep, err := runner.Reap(ctx, s.root, func() []engine.Reaper {
		if !got {
			reapers, done = s.engines.Reapers(ctx)
			got = true
		}
		return reapers
	}, full)
	if !full {
		return rep, err
	}
	if !got {
		reapers, done = s.engines.Reapers(ctx)
		got = true
	}
	snaps, serr := s.reapSnapshots(ctx, reapers)
	rep.Reaped = append(rep.Reaped, snaps...)
	return rep, errors.Join(err, serr)
}
