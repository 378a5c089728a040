package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/wire"
)

// kubeAttempts is how many pods a batch job on --engine kube may take: a
// job whose node is lost under it is run again, on another node.
const kubeAttempts = 3

// maxKubeExpected caps a job's expected stdout on --engine kube: it
// travels to the node in a pod annotation, and a pod's annotations hold
// 256 KiB in all.
const maxKubeExpected = 128 << 10

// batchKube runs jobs as one-shot pods of --template's SandboxTemplate on
// the cluster, --parallel at a time, emitting each job's result. A job
// takes its argv and expected stdout only: the template is the policy.
// Each result is the Result its airlock node signed, so it verifies with
// the node's key (`receipt verify --trust`).
func batchKube(cmd *cobra.Command, g *globals, f *batchFlags, jobs []runner.Job, done map[string]bool, emit func(runner.BatchResult)) error {
	if f.run.template == "" {
		return usageError{fmt.Errorf("--engine kube needs --template NAME: the SandboxTemplate `airlock kube render --template NAME | kubectl apply -f -` made")}
	}
	start, err := wire.Duration("ready_timeout", f.run.kube.readyTimeout)
	if err != nil {
		return asFlag(err)
	}
	cfg, err := cluster.Load(f.run.kube.kubeconfig, f.run.kube.context)
	if err != nil {
		return err
	}
	svc := g.service("")
	stderr := cmd.ErrOrStderr()
	ctx := cmd.Context()
	o := service.KubeRun{Config: cfg, Namespace: f.run.kube.namespace, Template: f.run.template, Start: start}
	var mu sync.Mutex // stderr's, shared by the jobs' progress
	return runner.EachJob(ctx, jobs, f.parallel, done, func(j runner.Job) runner.BatchResult {
		return kubeJob(ctx, svc, o, j, func(s string) {
			mu.Lock()
			defer mu.Unlock()
			sayf(stderr, "job %s: %s", j.ID, s)
		})
	}, emit)
}

// kubeJob runs job j as o's pod, again on another node (up to
// kubeAttempts) when its node is lost, and returns its result line.
func kubeJob(ctx context.Context, svc *service.Service, o service.KubeRun, j runner.Job, say func(string)) runner.BatchResult {
	br := runner.BatchResult{JobID: j.ID}
	if err := kubeJobFits(j); err != nil {
		br.Result = runner.Result{Reason: runner.ReasonError, ExitCode: -1, Error: err.Error(), ErrorKind: runner.ErrorKind(err)}
		return br
	}
	o.Argv, o.JobID, o.ExpectedStdout = j.Argv, j.ID, j.ExpectedStdout
	var res runner.Result
	var err error
	for attempt := 1; ; attempt++ {
		res, err = svc.RunKube(ctx, o)
		if !errors.Is(err, service.ErrNodeLost) || attempt == kubeAttempts || ctx.Err() != nil {
			break
		}
		say(fmt.Sprintf("%v; running it again (attempt %d of %d)", err, attempt+1, kubeAttempts))
	}
	if err != nil {
		res.Reason, res.ExitCode, res.Error, res.ErrorKind = runner.ReasonError, -1, err.Error(), runner.ErrorKind(err)
	}
	br.Result = res
	if res.Receipt != nil {
		// The node judged the job against its expected stdout, and signed
		// the verdict.
		br.Pass = res.Receipt.Receipt.Pass
	}
	return br
}

// kubeJobFits refuses, as invalid input, what a job on --engine kube
// cannot carry: everything but its id, argv and expected stdout is the
// SandboxTemplate's.
func kubeJobFits(j runner.Job) error {
	var field string
	switch {
	case j.Image != "":
		field = "image"
	case j.Template != "":
		field = "template"
	case len(j.Env) > 0:
		field = "env"
	case j.Workdir != "":
		field = "workdir"
	case j.Stdin != "":
		field = "stdin"
	case len(j.Inputs) > 0:
		field = "inputs"
	case j.Limits != (runner.JobLimits{}):
		field = "limits"
	case len(j.AllowHost) > 0:
		field = "allow_host"
	case len(j.Credential) > 0:
		field = "credential"
	case j.EgressLimit != "":
		field = "egress_limit"
	}
	if field != "" {
		return fmt.Errorf("%w: job %q: %q does not apply with --engine kube: a job there takes argv and expected_stdout, and --template's SandboxTemplate gives the rest (render one per setting with airlock kube render)",
			errdefs.ErrInvalidArgument, j.ID, field)
	}
	if j.ExpectedStdout != nil && len(*j.ExpectedStdout) > maxKubeExpected {
		return fmt.Errorf("%w: job %q: expected_stdout is %d bytes; with --engine kube it travels in a pod annotation, so give at most %d",
			errdefs.ErrInvalidArgument, j.ID, len(*j.ExpectedStdout), maxKubeExpected)
	}
	return nil
}
