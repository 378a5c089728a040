package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/runner"
)

func newPsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the runs that are not finished",
		Long: `List every run under airlock's root that is not terminated: its id, its
state (requested, created, ready, running, terminating, failed), the pid
of the airlock process that owns it, and its deadline. REAPABLE says why
'airlock reap' would remove it (orphaned: its owner died; expired: its
deadline passed); it is empty while the owner is alive and in time.`,
		Example: `  airlock ps
  airlock ps --json | jq -r '.[] | select(.reapable != "") | .id'`,
		Args: exactArgs(0, "ps takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			runs, err := g.service("").Runs()
			if err != nil {
				return err
			}
			if asJSON {
				if runs == nil {
					runs = []runner.RunInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), runs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tOWNER PID\tDEADLINE\tREAPABLE")
			for _, r := range runs {
				deadline := "-"
				if !r.Deadline.IsZero() {
					deadline = r.Deadline.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.ID, r.State, r.OwnerPID, deadline, r.Reapable)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the runs as a JSON array")
	return cmd
}

func newKillCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kill RUN-ID...",
		Short: "Destroy runs now: kill their sandboxes and remove all they hold",
		Long: `Destroy each run given: kill its sandbox (every process in its cgroup)
and remove its container or runtime sandbox, cgroup, mounts, bundle and run
directory. The airlock process that owns the run then reports it with
reason "destroyed" (exit 130).

Destroy is idempotent: killing a run twice, or from two shells at once,
frees it once and both succeed; a run that is already gone is reported as
such, not as an error. A kill that lands while the run is being created
waits for the create, then destroys. 'airlock ps' lists run ids.`,
		Example: `  airlock kill 0804d69789f28334e665
  airlock ps --json | jq -r '.[].id' | xargs -r airlock kill`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one run id; `airlock ps` lists them")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			svc := g.service("")
			var errs []error
			for _, id := range ids {
				gone, err := svc.Kill(cmd.Context(), id)
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("killing run %s: %w", id, err))
				case gone:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: already gone\n", id)
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: destroyed\n", id)
				}
			}
			return errors.Join(errs...)
		},
	}
	return cmd
}
