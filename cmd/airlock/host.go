package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/isolation"
)

func newHostCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Prepare this host for airlock",
	}
	cmd.AddCommand(newInstallRuntimeCmd(g))
	return cmd
}

func newInstallRuntimeCmd(g *globals) *cobra.Command {
	var runsc, daemonJSON string
	var args []string
	cmd := &cobra.Command{
		Use:   "install-runtime --runsc PATH",
		Short: "Register airlock's runsc with dockerd in daemon.json",
		Long: fmt.Sprintf(`Add (or update) the %q runtime in dockerd's daemon.json, pointing at
the runsc binary given. Every other setting in the file is kept; an existing
file is first copied to a timestamped backup beside it. Prints "changed" or
"unchanged". dockerd reads runtimes again on SIGHUP; 'make setup' sends it.

By default runsc gets --network=none, --oci-seccomp (so that it applies the
seccomp profile airlock passes), and a log per sandbox under
<root>/sandbox-logs/<container id>/, which airlock reads to tell a sandbox
killed from the host apart from the program's own exit, then removes.`, isolation.DockerRuntimes[isolation.GVisor]),
		Args: exactArgs(0, "pass the runsc path with --runsc"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(runsc)
			if err != nil {
				return usageError{err}
			}
			fi, err := os.Stat(abs)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				return fmt.Errorf("%w: --runsc %q is not an executable file; build it with `make setup`", errdefs.ErrNotFound, runsc)
			}
			if !cmd.Flags().Changed("runtime-arg") {
				args = defaultRuntimeArgs(g.root)
			}
			changed, backup, err := docker.RegisterRuntime(daemonJSON, isolation.DockerRuntimes[isolation.GVisor], docker.Runtime{Path: abs, RuntimeArgs: args})
			if err != nil {
				return err
			}
			if backup != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "backed up %s to %s\n", daemonJSON, backup)
			}
			if changed {
				fmt.Fprintln(cmd.OutOrStdout(), "changed")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "unchanged")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runsc, "runsc", "", "path of the runsc binary (required)")
	cmd.Flags().StringVar(&daemonJSON, "daemon-json", docker.DaemonJSON, "dockerd configuration file")
	cmd.Flags().StringArrayVar(&args, "runtime-arg", nil, "runsc flag for every container (repeatable; replaces the defaults above)")
	cmd.MarkFlagRequired("runsc")
	return cmd
}

// defaultRuntimeArgs are the runsc flags dockerd passes for airlock.
func defaultRuntimeArgs(root string) []string {
	return append(isolation.RunscFlags(),
		engine.GVisorLogFlags(filepath.Join(root, "sandbox-logs", "%ID%"), "boot")...)
}
