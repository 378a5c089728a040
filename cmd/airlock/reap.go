package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

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
state files are gone, and removes the snapshots no template names (once
ten minutes old). It touches only ids of airlock's own form, and only this
root's: another root's live runs on the same host (the cgroups and dockerd
are shared) are left alone.

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
	return g.service("").Reap(ctx, full)
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
