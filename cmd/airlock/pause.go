package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/runner"
)

func newSandboxPauseCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Checkpoint a sandbox and free its memory and processes",
		Long: `Checkpoint a sandbox (its processes and their memory) into airlock's root
and end its processes: a paused sandbox holds no memory or CPU, only its
workspace, /tmp and /out, which stay as they are. airlock sandbox resume
(or an exec or cp into it) restores it under the same id.

Its TTL still counts while it is paused (the sandbox ends at its TTL, and
its checkpoint with it); its idle timeout starts again at resume. The
checkpoint is stored 0600 under airlock's root, removed with the sandbox,
and never exported.

Only sandboxes of the oci engine under gVisor pause: --isolation seccomp
(runc) and the docker engine refuse, saying why (exit 64, invalid_input). A sandbox
with an exec in progress is refused (exit 75). Pausing a paused sandbox
does nothing. Background processes survive a pause when they were started
with airlock exec --detach; those an exec left behind in other ways are
ended at resume (gVisor ends what an exec started).`,
		Example: `  airlock sandbox pause sb-0804d69789f28334e665
  airlock sandbox resume sb-0804d69789f28334e665`,
		Args: exactArgs(1, "give one sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			si, err := g.service("").Pause(cmd.Context(), args[0])
			return printPaused(cmd, si, err, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as one JSON object instead of its id")
	return cmd
}

func newSandboxResumeCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Restore a paused sandbox, its processes running on where they stopped",
		Long: `Restore a sandbox paused with airlock sandbox pause under the same id: its
processes go on where they stopped, with their memory, and its files are
those it left. The checkpoint is removed once restored. Resuming a sandbox
that is not paused does nothing.`,
		Example: `  airlock sandbox resume sb-0804d69789f28334e665`,
		Args:    exactArgs(1, "give one sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			si, err := g.service("").Resume(cmd.Context(), args[0])
			return printPaused(cmd, si, err, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as one JSON object instead of its id")
	return cmd
}

func printPaused(cmd *cobra.Command, si runner.SandboxInfo, err error, asJSON bool) error {
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), si)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), si.ID)
	return err
}
