package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/runner"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type globals struct {
	root   string
	debug  bool
	stderr io.Writer
}

func (g *globals) logger() *slog.Logger {
	if !g.debug {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// host is the engines of the root, made per call for one command; opts
// add to its options.
func (g *globals) host(opts ...engines.Option) *engines.Host {
	return engines.New(g.root, append([]engines.Option{engines.WithLogger(g.logger()),
		engines.WithEgressFiles(os.Getenv("AIRLOCK_EGRESS_HOSTS"), os.Getenv("AIRLOCK_EGRESS_CA")),
		engines.WithRunnerOptions(runner.WithVersion(version), runner.WithSupervisor(g.supervisor))}, opts...)...)
}

// supervisor is the command that supervises sandbox id: this airlock, on
// this root. It starts in /, so the root it is given must be absolute, as
// every command's is once it starts (resolveRoot).
func (g *globals) supervisor(id string) []string {
	return []string{"/proc/self/exe", "--root", g.root, "sandbox", "supervise", id}
}

// resolveRoot names the root as the kernel does (runner.ResolveRoot):
// absolute, its symlinks resolved, for every command and what it starts.
func (g *globals) resolveRoot() { g.root = runner.ResolveRoot(g.root) }

func newRootCmd() *cobra.Command { return newRootCmdFor(&globals{stderr: os.Stderr}) }

// newRootCmdFor is airlock's command line, its global flags set in g.
func newRootCmdFor(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Run untrusted code in a locked-down sandbox",
		Long: `airlock runs code nobody has read inside a digest-pinned image under gVisor:
no network, no capabilities, no-new-privileges, a read-only root, a non-root
user, and hard limits on time, memory, CPU, processes and output. Every run
ends with an exact reason: exited, timeout, oom, pids_limit, output_limit,
killed or error.

Start with:
  airlock run -- python3 -c 'print("hello from the sandbox")'
  airlock run --json --timeout 5s --memory 256MiB -- python3 script.py
  airlock image ls

Exit codes: the program's own code when it exited; otherwise 64 invalid
input, 65 a receipt that does not verify or a refused cp, 66 not found,
69 engine or runtime unavailable, 70 internal error, 75 try again later
(in use, over a limit), 77 not permitted, 122 process limit, 123 output
limit, 124 timeout, 130 interrupted, 137 out of memory (docs/exit-codes.md).`,
		Version:           version,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			commandStarted = true
			g.resolveRoot()
			if cmd.Name() != "reap" && cmd.Name() != "supervise" { // reap does the whole job and reports it
				g.sweep(cmd.Context())
			}
		},
	}
	defRoot := runner.DefaultRoot
	if v := os.Getenv("AIRLOCK_ROOT"); v != "" {
		defRoot = v
	}
	root.PersistentFlags().StringVar(&g.root, "root", defRoot, "airlock's state directory (images index, default-image lock); env AIRLOCK_ROOT")
	root.PersistentFlags().BoolVar(&g.debug, "debug", false, "log engine steps to stderr")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
	})
	root.AddCommand(newRunCmd(g), newBatchCmd(g), newImageCmd(g), newReceiptCmd(g), newReapCmd(g), newPsCmd(g), newKillCmd(g), newDoctorCmd(g), newHostCmd(g), newSeccompCmd(),
		newSandboxCmd(g), newTemplateCmd(g), newExecCmd(g), newCpCmd(g), newServeCmd(g), newMCPCmd(g), newKubeCmd(g), newNodeCmd(g))
	groups(root)
	return root
}

// groups makes every command that only holds subcommands print its help
// when called alone and refuse anything else as a usage error (exit 64)
// naming its subcommands: cobra prints the help and exits 0 for
// `airlock image load`, which a script takes for done.
func groups(c *cobra.Command) {
	var names []string
	for _, s := range c.Commands() {
		groups(s)
		if !s.Hidden {
			names = append(names, s.Name())
		}
	}
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.Args = exactArgs(0, "use a subcommand: "+strings.Join(names, ", "))
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
