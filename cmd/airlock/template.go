package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/wire"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Create, list, inspect and remove sandbox templates",
		Long: `A template is a sandbox's image, isolation, limits, environment and output
settings, defined once under a name and used with --template on airlock run,
airlock sandbox create and airlock batch (and "template" in a batch job, an
API request or an MCP tool call).

A template is pinned: its image is resolved to a digest when it is created,
every limit is stored with its value then (defaults included), and a custom
seccomp profile is copied under airlock's root. The flags given with
--template may narrow it (a lower --memory, a shorter --timeout, fewer
--artifact-types) but never widen it, nor change its image, isolation, engine
or seccomp profile: such a flag is refused (exit 64) and the error names it.`,
		Example: `  airlock template create py --memory 256MiB --timeout 10s --env PYTHONDONTWRITEBYTECODE=1
  airlock run --template py -- python3 -c 'print(6*7)'
  airlock run --template py --memory 128MiB -- python3 -c 'print(6*7)'
  airlock template ls
  airlock template rm py`,
		Args: exactArgs(0, "use a subcommand: create, ls, inspect or rm"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTemplateCreateCmd(g), newTemplateLsCmd(g), newTemplateInspectCmd(g), newTemplateRmCmd(g))
	return cmd
}

type templateCreateFlags struct {
	runFlags
	replace     bool
	warm        bool
	warmTimeout string
	runCode     string
	imports     []string
}

func newTemplateCreateCmd(g *globals) *cobra.Command {
	f := &templateCreateFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME [flags]",
		Short: "Create a template from run's policy flags",
		Long: `Create template NAME from the policy flags of airlock run. Flags left out
take airlock's defaults, which the template keeps as values. Without --image
the template pins the default image as it is now; --image must be a
digest-pinned image airlock holds (airlock image ls).

NAME is 1 to 63 lower-case letters, digits, '.', '_' or '-', starting with a
letter or digit. A NAME that exists is refused unless --replace is given.
With --json the template is printed as one JSON object; its "version"
changes whenever anything that shapes a sandbox does.

--warm -- ARGV... gives the template a snapshot (oci engine, gVisor only):
a sandbox of the template is made, ARGV is started in it detached, and once
ARGV creates the file named by $AIRLOCK_READY_FILE (/tmp/airlock-ready) the
sandbox is checkpointed into the template's snapshot and destroyed.
airlock sandbox create --template NAME then restores its sandboxes from the
snapshot, ARGV running on where it was, instead of booting them. The
program is warmed before any job exists: put no secret in it. Progress goes
to stderr; --warm-timeout bounds the wait for the ready file. airlock
template rm removes the snapshot with the template.

--run-code python makes a run-code template: --warm with airlock's own
fork server as the program. The server imports every --import MODULE,
then waits in the snapshot for jobs; airlock serve --run-code-template
python=NAME serves SandboxFusion's /run_code from a pool of sandboxes
restored from it, one job each (docs/snapshots.md). Give the modules your
jobs import (numpy, pandas): they are imported once, before the snapshot.`,
		Example: `  airlock template create py --memory 256MiB --cpus 0.5 --timeout 10s
  airlock template create py --memory 512MiB --replace
  airlock template create calc --isolation seccomp --pids 32 --out-dir none --json
  airlock template create np --engine oci --warm -- python3 -c 'import numpy, os; open(os.environ["AIRLOCK_READY_FILE"], "w").close(); import time; time.sleep(1e9)'
  airlock template create py-np --run-code python --import numpy --timeout 10s
  airlock serve --run-code-template python=py-np`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.runCode != "" && f.warm:
				return usageError{errors.New("--run-code is --warm with airlock's fork server as the program: give one of them")}
			case f.runCode == "" && len(f.imports) > 0:
				return usageError{errors.New("--import names a module for --run-code's fork server to import: give --run-code python with it")}
			case f.runCode != "":
				return exactArgs(1, "--run-code takes the template's name and no program: airlock template create NAME --run-code python [--import MODULE]...")(cmd, args)
			}
			if f.warm {
				if d := cmd.ArgsLenAtDash(); d != 1 || len(args) < 2 {
					return usageError{errors.New("--warm takes the template's name, then -- and the warm program's argv: airlock template create NAME --warm -- ARGV...")}
				}
				return nil
			}
			return exactArgs(1, "give the template's name, such as py")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runTemplateCreate(cmd, g, f, args[0], args[1:]) },
	}
	addPolicyFlags(cmd, &f.runFlags)
	cmd.Flags().BoolVar(&f.replace, "replace", false, "replace a template of the same name")
	cmd.Flags().BoolVar(&f.warm, "warm", false, "snapshot a warm program (the argv after --) for the template's sandboxes to start from")
	cmd.Flags().StringVar(&f.warmTimeout, "warm-timeout", "2m", "with --warm or --run-code, how long to wait for the program's ready file")
	cmd.Flags().StringVar(&f.runCode, "run-code", "", "make a run-code template for this language (python): a snapshot of airlock's fork server, for airlock serve --run-code-template")
	cmd.Flags().StringArrayVar(&f.imports, "import", nil, "with --run-code, a module the fork server imports before its snapshot (repeatable)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the template as one JSON object instead of its name")
	cmd.Flags().SortFlags = false
	return cmd
}

func runTemplateCreate(cmd *cobra.Command, g *globals, f *templateCreateFlags, name string, warm []string) (err error) {
	if err := templates.CheckName(name); err != nil {
		return err
	}
	if f.runCode != "" {
		if warm, err = forkserver.Argv(f.runCode, f.imports); err != nil {
			return usageError{err}
		}
	}
	switch f.engine {
	case templates.EngineAuto, templates.EngineOCI, templates.EngineDocker:
	default:
		return usageError{fmt.Errorf("--engine %q: use auto, oci or docker", f.engine)}
	}
	pol, err := f.policy()
	if err != nil {
		return err
	}
	spec := runner.Spec{Image: f.image, Env: f.env, Policy: pol, Workdir: f.workdir, SeccompProfile: f.seccompProfile}
	if err := f.outputs(&spec.Output); err != nil {
		return err
	}
	t, err := templates.New(name, spec, f.engine, images.OpenIndex(filepath.Join(g.root, "images")))
	if err != nil {
		return err
	}
	if f.warm || f.runCode != "" {
		timeout, err := wire.Duration("warm_timeout", f.warmTimeout)
		if err != nil {
			return asFlag(err)
		}
		w := runner.WarmSpec{Argv: warm, Timeout: timeout, Progress: cmd.ErrOrStderr()}
		if err := g.service("").PutWarmTemplate(cmd.Context(), t, w, f.replace); err != nil {
			return err
		}
	} else {
		st := templates.Open(g.root)
		put := st.Put
		if f.replace {
			put = st.Replace
		}
		if err := put(t); err != nil {
			return err
		}
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), t)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), t.Name)
	return err
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the templates",
		Long: `List the templates, by name: image, engine, isolation and the main limits.
With --json, one JSON array of the templates as airlock template inspect
shows them. A template file that cannot be read is reported on stderr, with
the fix, and the others are still listed (exit 70).`,
		Example: `  airlock template ls
  airlock template ls --json | jq -r '.[].name'`,
		Args: exactArgs(0, "ls takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, listErr := templates.Open(g.root).List()
			if asJSON {
				out := make([]*templates.Template, len(list))
				for i := range list {
					out[i] = &list[i]
				}
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
				return listErr
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tIMAGE\tENGINE\tISOLATION\tMEMORY\tCPUS\tPIDS\tTIMEOUT\tCREATED")
			for _, t := range list {
				l := t.Limits
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.Name, shortRef(t.Image), t.Engine, t.Isolation,
					l.Memory, l.CPUs, l.Pids, l.Timeout, t.CreatedAt.Local().Format("2006-01-02 15:04"))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return listErr
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array")
	return cmd
}

// shortRef shortens a pinned reference's digest for a table.
func shortRef(ref string) string {
	r, err := images.ParseRef(ref)
	if err != nil {
		return ref
	}
	short := r.ID.Encoded()[:12]
	if r.Name == "" {
		return "sha256:" + short
	}
	return r.Name + "@sha256:" + short
}

func newTemplateInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Print a template as one JSON object",
		Long: `Print template NAME as one JSON object: its image, engine, isolation, every
limit in the CLI's units, env, workdir, output settings, seccomp profile
sha256 ("" for airlock's default), creation time and version.`,
		Example: `  airlock template inspect py
  airlock template inspect py | jq -r .image`,
		Args: exactArgs(1, "give the template's name; airlock template ls lists them"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := templates.Open(g.root).Get(args[0])
			if err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), t)
		},
	}
}

func newTemplateRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove templates",
		Long: `Remove each template given, printing its name. A name that is not a
template is an error (exit 66) after the others are removed. A template's
snapshot (--warm) is removed with it. Sandboxes made from a template keep
running; runs naming it fail from then on.`,
		Example: `  airlock template rm py
  airlock template ls --json | jq -r '.[].name' | xargs -r airlock template rm`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one template name; `airlock template ls` lists them")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, names []string) error {
			svc := g.service("")
			var errs []error
			for _, n := range names {
				if err := svc.RemoveTemplate(cmd.Context(), n); err != nil {
					errs = append(errs, fmt.Errorf("removing template %s: %w", n, err))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return errors.Join(errs...)
		},
	}
}

// templated narrows --template by what the command line gave explicitly,
// returning the spec and the engine to run it on. Without --template it
// returns s and --engine unchanged.
func (g *globals) templated(cmd *cobra.Command, f *runFlags, s runner.Spec) (runner.Spec, string, error) {
	if f.template == "" {
		return s, f.engine, nil
	}
	return g.service("").RunSpec(f.template, explicitEngine(cmd.Flags(), f.engine), explicitOnly(cmd.Flags(), s))
}

func explicitEngine(fl *pflag.FlagSet, engine string) string {
	if fl.Changed("engine") {
		return engine
	}
	return ""
}

// explicitOnly keeps of s, made from every flag (defaults included), only
// what the command line gave explicitly: the rest is zero, for a template
// to fill in.
func explicitOnly(fl *pflag.FlagSet, s runner.Spec) runner.Spec {
	e := s
	e.Policy = isolation.Policy{}
	if fl.Changed("isolation") {
		e.Policy.Isolation = s.Policy.Isolation
	}
	l, el := s.Policy.Limits, &e.Policy.Limits
	for _, c := range []struct {
		flag string
		keep func()
	}{
		{"timeout", func() { el.Timeout = l.Timeout }},
		{"memory", func() { el.Memory = l.Memory }},
		{"cpus", func() { el.CPUs = l.CPUs }},
		{"pids", func() { el.Pids = l.Pids }},
		{"output-limit", func() { el.Output = l.Output }},
		{"tmp-size", func() { el.Tmp = l.Tmp }},
		{"file-size", func() { el.FileSize = l.FileSize }},
		{"allow-host", func() { e.Policy.Egress.Allow = s.Policy.Egress.Allow }},
		{"credential", func() { e.Policy.Egress.Credentials = s.Policy.Egress.Credentials }},
		{"egress-limit", func() { e.Policy.Egress.Bytes = s.Policy.Egress.Bytes }},
	} {
		if fl.Changed(c.flag) {
			c.keep()
		}
	}
	o := s.Output
	e.Output = runner.Output{Disabled: o.Disabled, Artifacts: o.Artifacts, Quarantine: o.Quarantine, AllowDotfiles: o.AllowDotfiles}
	if !o.Disabled {
		for _, c := range []struct {
			flag string
			keep func()
		}{
			{"out-dir", func() { e.Output.Dir = o.Dir }},
			{"out-limit", func() { e.Output.Size = o.Size }},
			{"out-files", func() { e.Output.Files = o.Files }},
			{"artifact-max-size", func() { e.Output.MaxFileSize = o.MaxFileSize }},
			{"artifact-types", func() { e.Output.Types = o.Types }},
		} {
			if fl.Changed(c.flag) {
				c.keep()
			}
		}
	}
	return e
}

// batchTemplates resolves a batch's templates: --template (engine the
// batch's engine, as --engine asked) and each job's "template", which must
// run on that engine. Each template is read once per batch.
func (g *globals) batchTemplates(cmd *cobra.Command, f *runFlags, base runner.Spec) (*runner.BatchTemplate, string, error) {
	st := templates.Open(g.root)
	engineName := f.engine
	if f.template != "" {
		t, err := st.Get(f.template)
		if err != nil {
			return nil, "", err
		}
		if engineName, err = t.EngineFor(explicitEngine(cmd.Flags(), f.engine)); err != nil {
			return nil, "", err
		}
	}
	resolved := g.host().Resolve(engineName)
	var mu sync.Mutex
	seen := map[string]*templates.Template{}
	get := func(name string) (*templates.Template, error) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := seen[name]; ok {
			return t, nil
		}
		t, err := st.Get(name)
		if err != nil {
			return nil, err
		}
		if _, err := t.EngineFor(resolved); err != nil {
			return nil, fmt.Errorf("this batch runs on engine %s: %w", resolved, err)
		}
		seen[name] = t
		return t, nil
	}
	return &runner.BatchTemplate{
		Default:  f.template,
		Explicit: explicitOnly(cmd.Flags(), base),
		Apply: func(name string, explicit runner.Spec) (runner.Spec, error) {
			t, err := get(name)
			if err != nil {
				return runner.Spec{}, err
			}
			return t.Narrow(explicit)
		},
	}, engineName, nil
}
