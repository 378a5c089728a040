package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/runner"
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
	var runsc, daemonJSON, name string
	var args []string
	var replace, check bool
	cmd := &cobra.Command{
		Use:   "install-runtime --runsc PATH [--name NAME]",
		Short: "Register airlock's runsc with dockerd in daemon.json",
		Long: fmt.Sprintf(`Add (or update) this root's runsc runtime in dockerd's daemon.json,
pointing at the runsc binary given, which only root may be able to change
(the file and every directory above it). Every other setting in the file,
and its mode and owner, are kept; an existing file is first copied to a
timestamped backup beside it. A daemon.json that is a symlink, or holds a
key twice, is refused: edit it by hand, or name the file a symlink points
to with --daemon-json. Prints "changed" or "unchanged" (with --check:
what it would do, writing nothing). dockerd reads runtimes again on
SIGHUP; 'make setup' sends it.

The default root (%s) registers the runtime %q. Any other root registers
a name of its own, %q followed by a hash of the root's path, unless --name
chooses one; the name is recorded in <root>/%s, and that root's docker
engine runs under it. An entry of that name that runs another runsc, or
logs its sandboxes under another root, is another installation's and is
refused: choose another --name, or pass --replace once nothing uses that
runsc any more.

By default runsc gets --network=none, --oci-seccomp (so that it applies the
seccomp profile airlock passes), and a log per sandbox under
<root>/sandbox-logs/<container id>/ (a directory only root can read), which
airlock reads to tell a sandbox killed from the host apart from the
program's own exit, then removes. 'airlock doctor' checks the registration
against exactly these flags.`, runner.DefaultRoot, engines.DefaultRuntime, engines.DefaultRuntime, engines.RuntimeRecord),
		Args: exactArgs(0, "pass the runsc path with --runsc"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := engines.Install{Runsc: runsc, Name: name, DaemonJSON: daemonJSON, Replace: replace, Check: check}
			if cmd.Flags().Changed("runtime-arg") {
				in.Args = append([]string{}, args...)
			}
			got, err := engines.InstallRuntime(g.root, in)
			if err != nil {
				return err
			}
			if got.Backup != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "backed up %s to %s\n", daemonJSON, got.Backup)
			}
			root, _ := filepath.Abs(g.root)
			if check {
				fmt.Fprintf(cmd.ErrOrStderr(), "runtime %q would run %s for root %s; nothing was written\n", got.Name, got.Runsc, root)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "runtime %q runs %s for root %s\n", got.Name, got.Runsc, root)
			}
			if got.Changed {
				fmt.Fprintln(cmd.OutOrStdout(), "changed")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "unchanged")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runsc, "runsc", "", "path of the runsc binary (required)")
	cmd.Flags().StringVar(&name, "name", "", "runtime name to register (default: the root's recorded name, else "+engines.DefaultRuntime+" for the default root and "+engines.DefaultRuntime+"-<hash of the root> for any other)")
	cmd.Flags().BoolVar(&replace, "replace", false, "re-point an entry of that name that runs another runsc (only once nothing uses it)")
	cmd.Flags().BoolVar(&check, "check", false, `print "changed" or "unchanged" for what it would do, or refuse as it would, and write nothing (install.sh asks this before it imports images)`)
	cmd.Flags().StringVar(&daemonJSON, "daemon-json", engines.DaemonJSON, "dockerd configuration file")
	cmd.Flags().StringArrayVar(&args, "runtime-arg", nil, "runsc flag for every container (repeatable; replaces the defaults above, and 'airlock doctor' then reports the difference)")
	cmd.MarkFlagRequired("runsc")
	return cmd
}
