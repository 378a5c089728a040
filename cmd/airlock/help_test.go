package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A command group called with a subcommand it does not have (`airlock
// image load`) is a usage error naming its subcommands, never its help
// and exit 0, which a script takes for done; called alone it prints its
// help.
func TestGroupRefusesUnknownSubcommand(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, s := range c.Commands() {
			if s.HasSubCommands() {
				walk(s, append(path, s.Name()))
			}
		}
		if len(path) == 0 {
			return
		}
		run := func(args ...string) (string, error) {
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"--root", t.TempDir()}, append(path, args...)...))
			err := cmd.Execute()
			return out.String(), err
		}
		what := "airlock " + strings.Join(path, " ")
		if _, err := run("no-such-subcommand"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "use a subcommand: ") {
			t.Errorf("%s no-such-subcommand: exit %d (%v), want %d naming the subcommands", what, exitCode(err), err, exitUsage)
		}
		if out, err := run(); err != nil || !strings.Contains(out, "Available Commands:") {
			t.Errorf("%s alone: %v, printed %q; want its help", what, err, out)
		}
	}
	walk(newRootCmd(), nil)
}

// A flag's help shows a value name only for a flag that takes a value:
// pflag takes the first backquoted word of a usage string for it, so
// "`airlock run`" in a bool flag's usage made --help show
// "--default airlock run".
func TestFlagHelpShowsNoBogusValueName(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.Contains(name, " ") || (f.Value.Type() == "bool" && name != "") {
				t.Errorf("%s --%s: --help shows it as `--%s %s`", c.CommandPath(), f.Name, f.Name, name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
}
