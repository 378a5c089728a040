package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/doctor"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	var engineName, mode string
	cmd := &cobra.Command{
		Use:   "doctor [--json] [--engine auto|oci|docker] [--isolation gvisor|seccomp]",
		Short: "Check that this host can keep airlock's guarantees",
		Long: `Check the host for the chosen engine and isolation mode: root, airlock's
runsc (and the gVisor platform), runc, cgroups and their memory, pids and
cpu controllers, kernel seccomp and the default profile, dockerd and the
runtime this root registered with it (its path is this root's runsc, which
exists, and its flags are exactly airlock's), and free space under --root. Then, if nothing
failed, run a short live probe on the default image: one sandbox tries to
reach the network, write to /, and reads its capabilities, no_new_privs
and uid; a second allocates 200MiB under a 64MiB limit and must end oom.

Every FAIL comes with a line saying how to fix it. A missing piece that
the chosen engine and mode do not need is only a warning. Exits 0 when
nothing failed, and 69 otherwise.`,
		Example: `  airlock doctor
  airlock doctor --engine docker --isolation seccomp
  airlock doctor --json`,
		Args: exactArgs(0, "doctor takes no arguments; choose what to check with --engine and --isolation"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch engineName {
			case "auto", "oci", "docker":
			default:
				return usageError{fmt.Errorf("--engine %q: use auto, oci or docker", engineName)}
			}
			if _, err := isolation.ParseMode(mode); err != nil {
				return usageError{err}
			}
			name := oci.Resolve(g.root, engineName)
			p := &prober{g: g, engine: name}
			defer p.Close()
			o := doctor.Options{Root: g.root, Engine: name, Isolation: mode, Runsc: oci.RunscPath(g.root), Agent: oci.AgentPath(g.root), Run: p.run}
			if eng, err := g.dockerEngine(); err == nil {
				defer eng.Close()
				o.DockerRuntime = eng.CheckRuntime
				o.DockerRegistered = func(ctx context.Context) (doctor.RuntimeEntry, error) {
					r, err := eng.Registered(ctx)
					return doctor.RuntimeEntry{Name: r.Name, Found: r.Found, Path: r.Path, Args: r.Args}, err
				}
			}
			if err := runtimeOwner(&o); err != nil {
				return err
			}
			checks := doctor.Run(cmd.Context(), o)
			out := cmd.OutOrStdout()
			if asJSON {
				if err := doctor.WriteJSON(out, checks); err != nil {
					return err
				}
			} else {
				w := liveWriter(out)
				fmt.Fprintf(w, "airlock doctor: engine %s, isolation %s, root %s\n\n", name, mode, g.root)
				err := doctor.WriteText(w, checks)
				flush(w)
				if err != nil {
					return err
				}
			}
			if !doctor.OK(checks) {
				return &exitErr{code: exitUnavailable}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"checks": [...], "ok": bool} instead of a table`)
	cmd.Flags().StringVar(&engineName, "engine", "auto", "engine to check: oci, docker, or auto (as airlock run picks)")
	cmd.Flags().StringVar(&mode, "isolation", string(isolation.GVisor), "isolation mode to check: gvisor or seccomp")
	return cmd
}

// prober runs the doctor's probe sandboxes on one engine, made on first
// use so that a doctor that stops before the probe creates nothing.
type prober struct {
	g      *globals
	engine string
	r      *runner.Runner
	done   func()
}

func (p *prober) run(ctx context.Context, s runner.Spec) (runner.Result, error) {
	if p.r == nil {
		eng, closeEngine, err := p.g.pickEngine(p.engine)
		if err != nil {
			return runner.Result{}, err
		}
		p.done = closeEngine
		if p.r, err = runner.New(runner.WithRoot(p.g.root), runner.WithEngine(eng), runner.WithLogger(p.g.logger()), runner.WithVersion(version)); err != nil {
			return runner.Result{}, err
		}
	}
	return p.r.Run(ctx, s)
}

func (p *prober) Close() {
	if p.done != nil {
		p.done()
	}
}

// runtimeOwner fills in whose dockerd registration o's docker engine runs
// under, and what it must hold.
func runtimeOwner(o *doctor.Options) error {
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return usageError{err}
	}
	o.Root, o.RuntimeOwner, o.RuntimeRunsc = root, root, o.Runsc
	_, recorded, err := recordedRuntime(root)
	if err != nil {
		return err
	}
	if !recorded && root != runner.DefaultRoot {
		// It shares the default root's registration.
		o.RuntimeOwner, o.RuntimeRunsc = runner.DefaultRoot, oci.RunscPath(runner.DefaultRoot)
	}
	o.RuntimeArgs = defaultRuntimeArgs(o.RuntimeOwner)
	return nil
}
