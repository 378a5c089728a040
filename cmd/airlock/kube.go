package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/kube"
	"github.com/airlock-sandbox/airlock/wire"
)

func newKubeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Run airlock's templates on Kubernetes (kubernetes-sigs/agent-sandbox)",
		Args:  exactArgs(0, "use a subcommand: render"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKubeRenderCmd(g))
	return cmd
}

func newKubeRenderCmd(g *globals) *cobra.Command {
	var o kube.Options
	var template, ttl, workspace string
	cmd := &cobra.Command{
		Use:   "render --template NAME [--warm N] [--namespace NS]",
		Short: "Print a template as agent-sandbox objects, for kubectl apply",
		Long: `Print template NAME as YAML for kubernetes-sigs/agent-sandbox: a RuntimeClass
(gvisor with handler runsc, or runc for the seccomp mode), a SandboxTemplate
and, with --warm N, a SandboxWarmPool of N sandboxes.

The pod carries the template's policy: the image by digest only, the runtime
class, uid and gid 65534 and runAsNonRoot, a read-only root, no privilege
escalation, every capability dropped, the template's seccomp profile as a
Localhost profile (airlock/<sha256>.json), CPU, memory and ephemeral storage
limits equal to their requests, size-limited emptyDirs for /tmp (in memory)
and /home/user (--workspace-size), no service account token, no service
links, no host namespaces, and an activeDeadlineSeconds of --ttl.

The network is denied both ways, always: the SandboxTemplate carries an
explicit, empty networkPolicy, because agent-sandbox allows public egress
when it is omitted. What Kubernetes has no field for (output caps, the exec
timeout, artifact scanning, receipts, the audit log) is listed in the
output's header and carried in airlock.dev/ annotations, which airlock nodes
enforce. See docs/kubernetes.md.`,
		Example: `  airlock kube render --template py --warm 2 | kubectl apply -f -
  airlock kube render --template py --namespace evals --ttl 30m
  airlock kube render --template py --image registry.example/py@sha256:<manifest digest>`,
		Args: exactArgs(0, "name the template with --template"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.TTL, err = wire.Duration("ttl", ttl); err != nil {
				return asFlag(err)
			}
			if o.Workspace, err = wire.Size("workspace_size", workspace); err != nil {
				return asFlag(err)
			}
			t, err := g.service("").Template(template)
			if err != nil {
				return err
			}
			b, err := kube.Render(t, o)
			if err != nil {
				return usageError{err}
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&template, "template", "", "the template to render (airlock template ls)")
	fl.IntVar(&o.Warm, "warm", 0, "add a SandboxWarmPool of this many ready sandboxes")
	fl.StringVar(&o.Namespace, "namespace", "default", "namespace of the SandboxTemplate and SandboxWarmPool")
	fl.StringVar(&o.Name, "name", "", "name of the SandboxTemplate and SandboxWarmPool (default: the template's)")
	fl.StringVar(&o.Image, "image", "", "image reference for a cluster that pulls, pinned by its manifest digest (default: the template's)")
	fl.StringVar(&ttl, "ttl", "1h", "each sandbox pod's lifetime (activeDeadlineSeconds)")
	fl.StringVar(&workspace, "workspace-size", "1GiB", "size of /home/user")
	fl.StringVar(&o.RuntimeClass, "runtime-class", "", "RuntimeClass name (default: gvisor, or runc for the seccomp mode)")
	fl.StringVar(&o.Handler, "runtime-handler", "", "the RuntimeClass's handler (default: runsc, or runc for the seccomp mode)")
	cmd.MarkFlagRequired("template")
	return cmd
}
