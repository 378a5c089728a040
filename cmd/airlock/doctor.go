package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/doctor"
	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	var engineName, mode string
	cmd := &cobra.Command{
		Use:   "doctor [--json] [--engine auto|oci|docker] [--isolation gvisor|seccomp]",
		Short: "Check that this host can keep airlock's guarantees",
		Long: `Check the host for the chosen engine and isolation mode: root (and that
only root can change airlock's root directory), airlock's runsc (that only
root can change it, and the gVisor platform), runc, cgroups and their memory, pids and
cpu controllers, kernel seccomp and the default profile, dockerd and the
runtime this root registered with it (its path is this root's runsc, which
exists, only root can change it, and its flags are exactly airlock's; a
damaged <root>/docker-runtime is its FAIL), and free space under --root. Then, if nothing
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
			host := g.host()
			name := host.Resolve(engineName)
			p := &prober{host: host, engine: name}
			defer p.Close()
			o := doctor.Options{Engine: name, Isolation: mode, Run: p.run}
			done, err := host.Doctor(&o)
			if err != nil {
				return err
			}
			defer done()
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
	host   *engines.Host
	engine string
	r      *runner.Runner
	done   func()
}

func (p *prober) run(ctx context.Context, s runner.Spec) (runner.Result, error) {
	if p.r == nil {
		r, done, err := p.host.Runner(ctx, p.engine)
		if err != nil {
			return runner.Result{}, err
		}
		p.r, p.done = r, done
	}
	return p.r.Run(ctx, s)
}

func (p *prober) Close() {
	if p.done != nil {
		p.done()
	}
}
