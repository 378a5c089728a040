package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
)

// KubeRun is a one-shot run on a cluster: one pod made from a rendered
// SandboxTemplate's pod template, its program Argv.
type KubeRun struct {
	Config *cluster.Config
	// Namespace is the template's; "" takes the context's, else default.
	Namespace string
	// Template is the SandboxTemplate (`airlock kube render --template`).
	Template string
	Argv     []string
	// Start bounds the wait for the pod to start running (default 2m);
	// the pod's activeDeadlineSeconds bounds its run.
	Start time.Duration
	// Progress, when set, is told what the run waits for.
	Progress func(string)
	// JobID and ExpectedStdout make the run a batch job's: the node signs
	// them into the run's receipt (see runner.Job).
	JobID          string
	ExpectedStdout *string
}

// ErrNodeLost is wrapped (with errdefs.ErrUnavailable) when the node a
// run's pod was on stopped answering before the pod ended: the node
// lifecycle controller marked it not Ready, or airlock node controller
// failed the pod once its lease expired. The pod is deleted; the run may
// be tried again, on another node.
var ErrNodeLost = errors.New("the pod's node was lost")

// nodeCheck is how often a waiting run asks whether its pod's node is
// still Ready.
const nodeCheck = 2 * time.Second

// kubeLogCap is how much of a one-shot pod's log a result keeps.
const kubeLogCap = 16 << 20

// RunKube runs o.Argv once in a pod of its own on the cluster, waits for
// its end, reads its log and deletes the pod. The result's reason and
// exit code are the node's (an airlock node writes airlock's reason word
// as the container's terminated reason); its stdout is the pod's log,
// stdout and stderr as one stream. A pod the node refuses is invalid
// input naming the field.
func (s *Service) RunKube(ctx context.Context, o KubeRun) (res runner.Result, err error) {
	res = runner.Result{Engine: claim.Engine, Reason: runner.ReasonError, ExitCode: -1}
	release, err := s.gate.Admit()
	if err != nil {
		return res, err
	}
	defer release()
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	ns := o.Config.NamespaceOr(o.Namespace)
	if o.Start <= 0 {
		o.Start = claim.DefaultTimeout
	}
	c := cluster.New(o.Config)
	tpl, err := c.SandboxTemplatePod(ctx, ns, o.Template)
	if errdefs.IsNotFound(err) {
		return res, fmt.Errorf("%w: no SandboxTemplate %q in namespace %q on %s: make one with `airlock kube render --template %s | kubectl apply -f -`",
			errdefs.ErrNotFound, o.Template, ns, o.Config.Server, o.Template)
	}
	if err != nil {
		return res, fmt.Errorf("reading SandboxTemplate %s/%s: %w", ns, o.Template, err)
	}
	pod, err := oneShotPod(tpl, o)
	if err != nil {
		return res, err
	}
	made, err := c.CreatePod(ctx, ns, pod)
	if err != nil {
		return res, fmt.Errorf("creating a pod from SandboxTemplate %s/%s: %w", ns, o.Template, err)
	}
	name := made.Metadata.Name
	res.ID = name
	defer func() {
		// The pod goes whatever happened, ctx done included.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := c.DeletePod(dctx, ns, name); derr != nil && err == nil {
			err = fmt.Errorf("deleting pod %s/%s: %w", ns, name, derr)
		}
	}()
	progress(fmt.Sprintf("pod %s/%s made from SandboxTemplate %q on %s; waiting for its end", ns, name, o.Template, o.Config.Server))
	started := time.Now()
	deadline := started.Add(o.Start)
	var checked time.Time
	for {
		p, err := c.Pod(ctx, ns, name)
		if err != nil && !errdefs.IsUnavailable(err) {
			return res, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		if err == nil {
			if p.Status.Reason == "AirlockRefused" {
				return res, fmt.Errorf("%w: pod %s/%s refused by node %s: %s", errdefs.ErrInvalidArgument, ns, name, p.Spec.NodeName, p.Status.Message)
			}
			if p.Status.Reason == "AirlockNodeLost" {
				// airlock node controller failed it: its node's lease expired.
				return res, fmt.Errorf("%w: %w: pod %s/%s: %s; the run can be tried again",
					errdefs.ErrUnavailable, ErrNodeLost, ns, name, p.Status.Message)
			}
			if p.Status.Phase != "Pending" {
				deadline = time.Time{} // started: the pod's own deadline holds
			}
			if ended(p) {
				return kubeResult(ctx, c, res, p)
			}
			if n := p.Spec.NodeName; n != "" && time.Since(checked) >= nodeCheck {
				checked = time.Now()
				node, err := c.Node(ctx, n)
				if err == nil && !node.Ready() {
					return res, fmt.Errorf("%w: %w: node %s is not Ready (its lease expired, or it said so) while pod %s/%s was on it; the pod is deleted, and the run can be tried again",
						errdefs.ErrUnavailable, ErrNodeLost, n, ns, name)
				}
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return res, fmt.Errorf("%w: pod %s/%s did not start within %v; see `kubectl describe pod -n %s %s` (no airlock node with room?)",
				errdefs.ErrUnavailable, ns, name, o.Start, ns, name)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ended says whether p's program has ended with a known outcome.
func ended(p *cluster.Pod) bool {
	if p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed" {
		return false
	}
	cs := p.Status.ContainerStatuses
	return len(cs) == 1 && cs[0].State.Terminated != nil
}

// kubeResult reads an ended pod's outcome: the Result its airlock node
// gave, receipt and separate streams included, or else its terminated
// state and log.
func kubeResult(ctx context.Context, c *cluster.Client, res runner.Result, p *cluster.Pod) (runner.Result, error) {
	if cd := p.Condition(cluster.ResultCondition); cd != nil {
		var nr runner.Result
		if err := json.Unmarshal([]byte(cd.Message), &nr); err != nil || nr.Receipt == nil {
			return res, fmt.Errorf("%w: pod %s/%s's %s condition, from node %s, is not a Result with a receipt (%v)",
				errdefs.ErrDataLoss, p.Metadata.Namespace, p.Metadata.Name, cluster.ResultCondition, p.Spec.NodeName, err)
		}
		return nr, nil
	}
	term := p.Status.ContainerStatuses[0].State.Terminated
	log, err := c.PodLog(ctx, p.Metadata.Namespace, p.Metadata.Name, claim.Container, kubeLogCap)
	if err != nil {
		return res, fmt.Errorf("reading the log of pod %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err)
	}
	var out capture
	out.Write(log)
	res.Stdout = out.stream()
	res.Stdout.Truncated = res.Stdout.Truncated || int64(len(log)) >= kubeLogCap
	res.ExitCode, res.Reason = term.ExitCode, runner.ReasonExited
	if r := runner.Reason(term.Reason); slices.Contains(kubeReasons, r) {
		res.Reason = r
	}
	if term.StartedAt != nil && term.FinishedAt != nil {
		res.StartedAt, res.FinishedAt = term.StartedAt.UTC(), term.FinishedAt.UTC()
		res.DurationMS = term.FinishedAt.Sub(*term.StartedAt).Milliseconds()
	}
	return res, nil
}

// kubeReasons are the reason words an airlock node writes that a result
// takes as they are.
var kubeReasons = []runner.Reason{runner.ReasonExited, runner.ReasonTimeout, runner.ReasonOOM, runner.ReasonOutputLimit, runner.ReasonPidsLimit, runner.ReasonKilled}

// oneShotPod is the template's pod running o.Argv once: a name generated
// from the template's, restartPolicy Never, the one container's command
// argv, and o's job in annotations. Everything else, the policy included,
// is the template's.
func oneShotPod(tpl map[string]any, o KubeRun) (map[string]any, error) {
	template, argv := o.Template, o.Argv
	spec, _ := tpl["spec"].(map[string]any)
	meta, _ := tpl["metadata"].(map[string]any)
	if spec == nil {
		return nil, fmt.Errorf("%w: SandboxTemplate %q has no pod spec", errdefs.ErrInvalidArgument, template)
	}
	cs, _ := spec["containers"].([]any)
	if len(cs) != 1 {
		return nil, fmt.Errorf("%w: SandboxTemplate %q's pod has %d containers; airlock renders one", errdefs.ErrInvalidArgument, template, len(cs))
	}
	ct, _ := cs[0].(map[string]any)
	if ct == nil {
		return nil, fmt.Errorf("%w: SandboxTemplate %q's container is malformed", errdefs.ErrInvalidArgument, template)
	}
	ct["command"] = argv
	delete(ct, "args")
	spec["restartPolicy"] = "Never"
	if meta == nil {
		meta = map[string]any{}
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels["airlock.dev/run"] = "true"
	meta["labels"] = labels
	if o.JobID != "" || o.ExpectedStdout != nil {
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		if o.JobID != "" {
			ann[cluster.AnnotationJobID] = o.JobID
		}
		if o.ExpectedStdout != nil {
			ann[cluster.AnnotationExpectedStdout] = *o.ExpectedStdout
		}
		meta["annotations"] = ann
	}
	meta["generateName"] = template + "-run-"
	delete(meta, "name")
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, nil
}
