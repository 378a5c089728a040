package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/runner"
)

func newReapCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reap",
		Short: "Remove what runs left behind when their airlock process died",
		Long: `Find every sandbox whose owner process died or whose deadline passed, and
remove it completely: container or runtime sandbox, cgroup, mounts, bundle
and run directory. Besides airlock's run directories it asks each engine
for leftovers (containers labelled airlock.id, runtime containers named
airlock-<id>, cgroups under /airlock, bundles), so it also works when the
state files are gone. It touches only ids of airlock's own form.

Every airlock command also does a cheap sweep of the run directories first.`,
		Args: exactArgs(0, "reap takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := g.reap(cmd.Context(), true)
			if asJSON {
				if rep.Reaped == nil {
					rep.Reaped = []string{}
				}
				writeJSON(cmd.OutOrStdout(), rep)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "reaped %d run(s); %d live run(s) left alone\n", len(rep.Reaped), rep.Live)
				for _, id := range rep.Reaped {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", id)
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// reap runs the reaper with every engine airlock can reach. full also asks
// the engines for leftovers; without it only run directories are checked.
func (g *globals) reap(ctx context.Context, full bool) (runner.ReapReport, error) {
	done := func() {}
	defer func() { done() }()
	return runner.Reap(ctx, g.root, func() []engine.Reaper {
		var reapers []engine.Reaper
		reapers, done = g.reapers(ctx)
		return reapers
	}, full)
}

// reapers returns every engine airlock can reach, to find and free runs;
// done closes them.
func (g *globals) reapers(ctx context.Context) ([]engine.Reaper, func()) {
	var reapers []engine.Reaper
	if e, err := oci.New(g.root, oci.WithLogger(g.logger())); err == nil {
		reapers = append(reapers, e)
	}
	d, err := g.dockerEngine()
	if err != nil {
		return reapers, func() {}
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if d.Ping(pctx) == nil {
		reapers = append(reapers, d)
	}
	return reapers, func() { d.Close() }
}

// sweep is the cheap reap at the start of every command: run directories
// only, and only as root (which owns them).
func (g *globals) sweep(ctx context.Context) {
	if os.Geteuid() != 0 {
		return
	}
	runs, _ := os.ReadDir(filepath.Join(g.root, "runs"))
	sbs, _ := filepath.Glob(filepath.Join(g.root, "sandboxes", "sb-*"))
	if len(runs) == 0 && len(sbs) == 0 {
		return
	}
	if rep, err := g.reap(ctx, false); err != nil {
		g.logger().Warn("sweeping leftovers", "err", err)
	} else if len(rep.Reaped) > 0 {
		g.logger().Info("swept leftovers", "runs", rep.Reaped)
	}
}
