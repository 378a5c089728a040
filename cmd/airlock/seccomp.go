package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/seccomp"
)

func newSeccompCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "seccomp",
		Short: "Inspect seccomp profiles",
	}
	var bpf bool
	export := &cobra.Command{
		Use:   "export [--bpf] PROFILE",
		Short: "Print a profile as airlock applies it, or its compiled BPF",
		Long: `Print PROFILE — a built-in name (` + fmt.Sprint(seccomp.Names()) + `) or a file in the
Docker/OCI seccomp JSON format — after airlock has parsed and compiled it
with libseccomp. With --bpf, print the compiled filter program instead
(binary; for seccomp-tools or scmp_bpf_disasm).`,
		Example: `  airlock seccomp export default > profile.json
  airlock seccomp export --bpf default | scmp_bpf_disasm`,
		Args: exactArgs(1, "name one profile"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := readProfile(args[0])
			if err != nil {
				return err
			}
			if !bpf {
				_, err := cmd.OutOrStdout().Write(p.Bytes())
				return err
			}
			f, err := seccomp.Compile(p)
			if err != nil {
				return profileError(args[0], err)
			}
			defer f.Release()
			return f.ExportBPF(cmd.OutOrStdout())
		},
	}
	export.Flags().BoolVar(&bpf, "bpf", false, "print the compiled BPF program for this machine's architecture")
	cmd.AddCommand(export)
	return cmd
}

func readProfile(arg string) (*seccomp.Profile, error) {
	if slices.Contains(seccomp.Names(), arg) {
		p, err := seccomp.Load(arg)
		return p, profileError(arg, err)
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; give a file or one of %v", errdefs.ErrNotFound, err, seccomp.Names())
	}
	// Export shows what a run would apply: a widening profile is refused
	// here as it is there.
	p, err := seccomp.ParseCustom(b)
	return p, profileError(arg, err)
}

func profileError(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, seccomp.ErrNotSupported):
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: seccomp profile %s: %v", errdefs.ErrInvalidArgument, name, err)
}
