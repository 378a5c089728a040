package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/wire"
)

// kubeFlags are sandbox create's flags for --engine kube.
type kubeFlags struct {
	kubeconfig, context, namespace, readyTimeout string
}

func (k *kubeFlags) add(fl *pflag.FlagSet, wait string) {
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "with --engine kube: the cluster's kubeconfig (default $KUBECONFIG)")
	fl.StringVar(&k.context, "context", "", "with --engine kube: the kubeconfig's context (default its current-context)")
	fl.StringVar(&k.namespace, "namespace", "", "with --engine kube: the warm pool's namespace (default the context's, else default)")
	fl.StringVar(&k.readyTimeout, "ready-timeout", claim.DefaultTimeout.String(), "with --engine kube: "+wait)
}

// kubeOnly are the flags that only --engine kube takes; kubeAllowed the
// flags it takes besides them.
var (
	kubeOnly    = []string{"kubeconfig", "context", "namespace", "ready-timeout"}
	kubeAllowed = []string{"engine", "template", "label", "json"}
)

// checkKubeFlags refuses kube's flags without --engine kube, and, with
// it, every policy flag: the warm pool's template is the policy. also are
// the command's own flags that --engine kube takes too.
func checkKubeFlags(cmd *cobra.Command, kube bool, also ...string) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch {
		case err != nil, cmd.InheritedFlags().Lookup(f.Name) != nil: // airlock's own: --root, --debug
		case !kube && slices.Contains(kubeOnly, f.Name):
			err = usageError{fmt.Errorf("--%s applies only with --engine kube", f.Name)}
		case kube && !slices.Contains(kubeOnly, f.Name) && !slices.Contains(kubeAllowed, f.Name) && !slices.Contains(also, f.Name):
			err = usageError{fmt.Errorf("--%s does not apply with --engine kube: the cluster's SandboxTemplate is the policy; render one with the policy wanted (airlock template create, airlock kube render)", f.Name)}
		}
	})
	return err
}

// runKubeCreate claims a sandbox from --template's warm pool on the
// cluster and prints its id.
func runKubeCreate(cmd *cobra.Command, g *globals, f *sandboxCreateFlags) error {
	if f.template == "" {
		return usageError{fmt.Errorf("--engine kube needs --template NAME: the SandboxWarmPool `airlock kube render --template NAME --warm N | kubectl apply -f -` made")}
	}
	timeout, err := wire.Duration("ready_timeout", f.kube.readyTimeout)
	if err != nil {
		return asFlag(err)
	}
	cfg, err := cluster.Load(f.kube.kubeconfig, f.kube.context)
	if err != nil {
		return asFlag(err)
	}
	labels := map[string]string{}
	for _, l := range f.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return usageError{fmt.Errorf("--label %q: use KEY=VALUE", l)}
		}
		labels[k] = v
	}
	stderr := cmd.ErrOrStderr()
	rec, err := g.service("").CreateKube(cmd.Context(), claim.CreateOptions{Config: cfg, Namespace: f.kube.namespace, WarmPool: f.template,
		Labels: labels, Timeout: timeout, Progress: func(s string) { sayf(stderr, "%s", s) }})
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), rec)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), rec.ID)
	return err
}

// runKube runs argv once in a pod of --template's SandboxTemplate.
func runKube(cmd *cobra.Command, g *globals, f *runFlags, argv []string) (runner.Result, error) {
	if err := checkKubeFlags(cmd, true); err != nil {
		return runner.Result{}, err
	}
	if f.template == "" {
		return runner.Result{}, usageError{fmt.Errorf("--engine kube needs --template NAME: the SandboxTemplate `airlock kube render --template NAME | kubectl apply -f -` made")}
	}
	start, err := wire.Duration("ready_timeout", f.kube.readyTimeout)
	if err != nil {
		return runner.Result{}, asFlag(err)
	}
	cfg, err := cluster.Load(f.kube.kubeconfig, f.kube.context)
	if err != nil {
		return runner.Result{}, err
	}
	stderr := cmd.ErrOrStderr()
	res, err := g.service("").RunKube(cmd.Context(), service.KubeRun{Config: cfg, Namespace: f.kube.namespace, Template: f.template, Argv: argv,
		Start: start, Progress: func(s string) {
			if !f.json {
				sayf(stderr, "%s", s)
			}
		}})
	if err == nil && !f.json {
		for _, s := range []struct {
			w io.Writer
			b []byte
		}{{cmd.OutOrStdout(), res.Stdout.Head}, {stderr, res.Stderr.Head}} {
			w := liveWriter(s.w)
			w.Write(s.b)
			flush(w)
		}
	}
	return res, err
}
