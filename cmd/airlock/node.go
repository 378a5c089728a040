package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
)

// newNodeCmd runs airlock-node, installed beside airlock: the Kubernetes
// node lives in a binary of its own, so that the Kubernetes client stays
// out of this one. Its flags and help are airlock-node's.
func newNodeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:                "node [--kubeconfig FILE] [--name NAME]",
		Short:              "Join a Kubernetes cluster as a node that runs pods as airlock sandboxes",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			bin := filepath.Join(filepath.Dir(self), "airlock-node")
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("%w: %s is not installed beside airlock: build it with make build-node (go build -o %s ./cmd/airlock-node)", errdefs.ErrNotFound, bin, bin)
			}
			argv := append([]string{bin, "--root", g.root, "--airlock", self}, args...)
			if g.debug {
				argv = append(argv, "--debug")
			}
			return syscall.Exec(bin, argv, os.Environ())
		},
	}
}
