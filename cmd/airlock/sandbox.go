package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/wire"
)

func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, list, inspect and remove long-lived sandboxes",
		Long: `A long-lived sandbox is created once, runs many commands (airlock exec),
moves files in and out (airlock cp), and is removed at the end (airlock
sandbox rm), or when its idle timeout or TTL passes, even if no airlock
command runs then. It has the same isolation as airlock run, plus a
writable workspace at /home/user (HOME and the working directory) that
persists across execs, capped by --workspace-size.`,
		Example: `  id=$(airlock sandbox create --idle-timeout 5m)
  airlock exec $id -- python3 -c 'open("m.py","w").write("X=1")'
  airlock exec $id -- python3 -c 'import m; print(m.X)'
  airlock cp $id:/home/user/m.py ./m.py
  airlock sandbox rm $id`,
		Args: exactArgs(0, "use a subcommand: create, ls, inspect, rm, pause or resume"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSandboxCreateCmd(g), newSandboxLsCmd(g), newSandboxInspectCmd(g), newSandboxRmCmd(g), newSandboxPauseCmd(g), newSandboxResumeCmd(g), newSandboxSuperviseCmd(g))
	return cmd
}

// sandboxRunner returns a runner on the engine sandbox id was made with.
func (g *globals) sandboxRunner(id string) (*runner.Runner, func(), error) {
	return g.service("").ForSandbox(context.Background(), id)
}

// service is the service the CLI's commands stand on: a runner made per
// call on engine name (or, for "", auto), released after it.
func (g *globals) service(engineName string) *service.Service {
	return service.New(g.root, g.host(), service.WithEngine(cmp.Or(engineName, "auto")))
}

type sandboxCreateFlags struct {
	runFlags
	idle, ttl, workspace, downloadTypes string
	labels                              []string
}

func newSandboxCreateCmd(g *globals) *cobra.Command {
	f := &sandboxCreateFlags{}
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a long-lived sandbox and print its id",
		Long: `Create a sandbox with the policy flags of airlock run, and print its id on
stdout (with --json, one object: id, state, image, engine, isolation,
workspace, created_at, expires_at, labels, limits…).

--timeout and --output-limit are each exec's defaults and maximums. The sandbox ends
--idle-timeout after its last exec or transfer (an exec in progress keeps
it alive), and --ttl after its creation, whatever happens; a detached
supervisor process enforces both within a second or two, even when no
airlock command runs. --template NAME takes the sandbox's image, policy and
output settings from a template (airlock template ls): the policy flags
given may narrow it, never widen it. --download-types is the allowlist of airlock cp
downloads (default: the artifact types plus source code as text).
--input copies host files or directories in, read-only, as airlock run does
(under /work by default), once, when the sandbox is made.

--engine kube --template NAME makes the sandbox on a Kubernetes cluster
instead: a SandboxClaim (named by the sandbox's id) on the warm pool NAME
that ` + "`airlock kube render --template NAME --warm N | kubectl apply -f -`" + `
made, on airlock nodes (docs/kubernetes.md). It waits until the claim is
ready (progress on stderr; --ready-timeout), then prints the id; airlock
exec, cp (files and trees, one pod exec each), sandbox ls, inspect and rm reach it. The
warm pool's template is the policy, so policy flags are refused.
--kubeconfig (default $KUBECONFIG), --context and --namespace say where;
the record under airlock's root names the kubeconfig, which later
commands load again.`,
		Example: `  airlock sandbox create
  airlock sandbox create --template py --idle-timeout 2m
  airlock sandbox create --json --idle-timeout 2m --ttl 30m --workspace-size 256MiB --label agent=demo
  airlock sandbox create --engine oci --isolation seccomp --memory 1GiB
  airlock sandbox create --input data.csv --input src/:/work/src
  airlock sandbox create --engine kube --template py --kubeconfig ~/.kube/config`,
		Args: exactArgs(0, "options only; run commands in it with airlock exec"),
		RunE: func(cmd *cobra.Command, _ []string) error { return runSandboxCreate(cmd, g, f) },
	}
	addRunFlags(cmd, &f.runFlags)
	f.addFlags(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print the sandbox as one JSON object instead of its id")
	f.kube.add(fl, "how long to wait for the claim to be ready")
	fl.Lookup("engine").Usage = "engine: oci (daemonless runsc), docker (Docker Engine API), auto (oci where root and setup's runsc are available, else docker), or kube (a SandboxClaim on --template's warm pool on a Kubernetes cluster)"
	fl.SortFlags = false
	return cmd
}

// addFlags defines the flags a sandbox takes beyond a run's.
func (f *sandboxCreateFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.idle, "idle-timeout", runner.DefaultIdleTimeout.String(), "end the sandbox this long after its last exec or transfer")
	fl.StringVar(&f.ttl, "ttl", runner.DefaultTTL.String(), "end the sandbox this long after its creation")
	fl.StringVar(&f.workspace, "workspace-size", "1GiB", "cap on the workspace at /home/user (kernel-enforced: ENOSPC past it)")
	fl.StringArrayVar(&f.labels, "label", nil, "label the sandbox KEY=VALUE (repeatable; at most 64; KEY letters, digits, ., _ or -; VALUE one line of at most 256 bytes, no control characters)")
	fl.StringVar(&f.downloadTypes, "download-types", "", "MIME types airlock cp may download, comma-separated (default: the artifact types plus source code as text)")
}

func (f *sandboxCreateFlags) spec(cmd *cobra.Command, g *globals) (runner.SandboxSpec, error) {
	var s runner.SandboxSpec
	for _, n := range []string{"stdin", "artifacts", "quarantine", "workdir"} {
		if cmd.Flags().Changed(n) {
			return s, usageError{fmt.Errorf("--%s does not apply to a sandbox: use airlock cp to move files and give --workdir or --stdin to each airlock exec", n)}
		}
	}
	pol, err := f.policy()
	if err != nil {
		return s, err
	}
	files := runner.Spec{}
	if err := f.files(&files); err != nil {
		return s, err
	}
	rs := runner.Spec{Image: f.image, Env: f.env, Policy: pol, SeccompProfile: f.seccompProfile, Output: files.Output}
	// A template's engine becomes the sandbox's.
	if rs, f.engine, err = g.templated(cmd, &f.runFlags, rs); err != nil {
		return s, err
	}
	s = runner.SandboxSpec{Image: rs.Image, Env: rs.Env, Policy: rs.Policy, SeccompProfile: rs.SeccompProfile, Output: rs.Output, Labels: map[string]string{},
		Inputs: files.Inputs, InputLimit: files.InputLimit}
	if s.IdleTimeout, err = wire.Duration("idle_timeout", f.idle); err != nil {
		return s, asFlag(err)
	}
	if s.TTL, err = wire.Duration("ttl", f.ttl); err != nil {
		return s, asFlag(err)
	}
	if s.WorkspaceSize, err = wire.Size("workspace_size", f.workspace); err != nil {
		return s, asFlag(err)
	}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return s, usageError{fmt.Errorf("--label %q: use KEY=VALUE", l)}
		}
		s.Labels[k] = v
	}
	if f.downloadTypes != "" {
		var err error
		if s.DownloadTypes, err = wire.MIMEList("download_types", strings.Split(f.downloadTypes, ",")); err != nil {
			return s, asFlag(err)
		}
	}
	return s, nil
}

func runSandboxCreate(cmd *cobra.Command, g *globals, f *sandboxCreateFlags) error {
	kube := f.engine == "kube"
	if err := checkKubeFlags(cmd, kube); err != nil {
		return err
	}
	if kube {
		return runKubeCreate(cmd, g, f)
	}
	s, err := f.spec(cmd, g)
	if err != nil {
		return err
	}
	sb, err := g.service(f.engine).Create(cmd.Context(), "", f.template, s)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), sb.Info())
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), sb.ID())
	return err
}

func newSandboxLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the live sandboxes",
		Long: `List every sandbox under airlock's root that is not gone: its id, state
(requested, created, ready, running, failed), engine and isolation, when it
expires (the earlier of its TTL and its idle timeout), and its labels.`,
		Example: `  airlock sandbox ls
  airlock sandbox ls --json | jq -r '.[] | select(.labels.agent == "demo") | .id'`,
		Args: exactArgs(0, "ls takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := g.service("").Sandboxes()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tENGINE\tISOLATION\tENDS\tLABELS")
			now := time.Now()
			for _, s := range list {
				// A label is any client's text: escaped, as a sandbox's
				// file names are, so that it cannot drive the terminal.
				var labels []string
				for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
					labels = append(labels, artifacts.Escape(k)+"="+artifacts.Escape(s.Labels[k]))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.State, s.Engine, s.Isolation,
					s.Deadline(now).Local().Format(time.DateTime), strings.Join(labels, ","))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandboxes as a JSON array")
	return cmd
}

func newSandboxInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox's record as JSON",
		Long: `Print everything airlock keeps of sandbox ID as one JSON object: state, image, engine, isolation, limits, workspace, deadlines, labels, execs in progress and its areas on the host. A sandbox that is gone exits 66.

For a sandbox on Kubernetes (--engine kube) it prints where it is instead: the kubeconfig and context it was made with, the API server, the namespace, the SandboxClaim, the warm pool, the pod and its node, the image and runtime class, labels, and when the pod's deadline ends it. That is the record, not the cluster's live state: kubectl get sandboxclaim -n NAMESPACE ID shows that.`,
		Example: `  airlock sandbox inspect sb-0804d69789f28334e665 | jq .expires_at`,
		Args:    exactArgs(1, "give one sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if r, kube, err := g.service("").KubeSandbox(args[0]); kube {
				if err != nil {
					return err
				}
				return writeJSON(cmd.OutOrStdout(), r)
			}
			si, err := g.service("").Sandbox(args[0])
			if err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), si)
		},
	}
}

func newSandboxRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy sandboxes: kill every process and remove all they hold",
		Long: `Destroy each sandbox given: kill every process in it and remove its
container or runtime sandbox, cgroups, mounts, workspace and record.

rm is idempotent: a sandbox id that is already gone succeeds, and rms
racing from several shells free it once and all succeed. An rm that lands
while the sandbox is being created waits for the create, then destroys.`,
		Example: `  airlock sandbox rm sb-0804d69789f28334e665
  airlock sandbox ls --json | jq -r '.[].id' | xargs -r airlock sandbox rm`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one sandbox id; `airlock sandbox ls` lists them")}
			}
			for _, id := range args {
				if err := runner.CheckSandboxID(id); err != nil {
					return err
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			var errs []error
			for _, id := range ids {
				if err := g.removeSandbox(cmd, id); err != nil {
					errs = append(errs, fmt.Errorf("removing sandbox %s: %w", id, err))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return errors.Join(errs...)
		},
	}
}

func (g *globals) removeSandbox(cmd *cobra.Command, id string) error {
	return g.service("").Destroy(cmd.Context(), id)
}

func newSandboxSuperviseCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise ID",
		Short:  "Enforce a sandbox's TTL and idle timeout (started by create)",
		Hidden: true,
		Args:   exactArgs(1, "give one sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// It outlives whoever created the sandbox: it keeps none of
			// their descriptors (a lock held by `flock LOCK airlock …`).
			if err := proc.CloseInherited(); err != nil {
				return err
			}
			r, done, err := g.sandboxRunner(args[0])
			if errdefs.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			defer done()
			return r.Supervise(cmd.Context(), args[0])
		},
	}
}
