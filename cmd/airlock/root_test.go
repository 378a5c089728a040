package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// A relative --root (or AIRLOCK_ROOT), or one through a symlink, reaches
// every command, and the supervisor it starts in /, absolute and resolved.
func TestSupervisorGetsAbsoluteRoot(t *testing.T) {
	base := roottest.LinkedDir(t)
	started := commandStarted
	t.Cleanup(func() { commandStarted = started })
	for _, given := range []string{"link", "real", "./link/"} {
		g := &globals{stderr: io.Discard}
		root := newRootCmdFor(g)
		var seen string
		root.AddCommand(&cobra.Command{Use: "noop", RunE: func(*cobra.Command, []string) error {
			seen = g.root
			return nil
		}})
		root.SetArgs([]string{"--root", given, "noop"})
		root.SetOut(io.Discard)
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(base, "real")
		if seen != want {
			t.Errorf("--root %s: the command saw root %q, want %q", given, seen, want)
		}
		if argv := g.supervisor("sb-1"); argv[1] != "--root" || argv[2] != want {
			t.Errorf("--root %s: the supervisor runs %q, want --root %s", given, argv, want)
		}
	}
}
