package service

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/receipt"
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
	// the pod's activeDeadlineSeconds bounds its run, and Grace (default
	// 1m) how long past that the run waits for the node to say it ended.
	Start, Grace time.Duration
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

// kubeLogCap is how much of a one-shot pod's log a result reads.
const kubeLogCap = 16 << 20

// kubeGrace is how long past its pod's activeDeadlineSeconds a run waits
// for the node to end it.
const kubeGrace = time.Minute

// RunKube runs o.Argv once in a pod of its own on the cluster, waits for
// its end, and deletes the pod. The result is the Result the pod's
// airlock node signed, once its receipt verifies against the key the node
// publishes, for this pod, o's job and argv (see verifyResult); a pod of
// an airlock node without one fails the run (see kubeResult). A pod of a
// node that publishes no key has the reason and exit code of its
// container's terminated state and its log as stdout, stdout and stderr
// as one stream. A pod the node refuses is invalid input naming the
// field. The wait ends when the pod's phase is
// Succeeded or Failed, or Grace past its activeDeadlineSeconds.
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
	if o.Grace <= 0 {
		o.Grace = kubeGrace
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
	if err := claim.CheckPodSpec(pod["spec"].(map[string]any)); err != nil {
		return res, fmt.Errorf("SandboxTemplate %s/%s: %w; render it again (`airlock kube render --template %s | kubectl apply -f -`)", ns, o.Template, err, o.Template)
	}
	if err := denyAllLabels(ctx, c, ns, o.Template, pod); err != nil {
		return res, err
	}
	made, err := c.CreatePod(ctx, ns, pod)
	if err != nil {
		return res, fmt.Errorf("creating a pod from SandboxTemplate %s/%s: %w", ns, o.Template, err)
	}
	name := made.Metadata.Name
	defer func() {
		// The pod goes whatever happened, ctx done included.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := c.DeletePod(dctx, ns, name); derr != nil && err == nil {
			err = fmt.Errorf("deleting pod %s/%s: %w", ns, cluster.Printable(name), derr)
		}
	}()
	// The names the cluster gives are shown and recorded as they are.
	if err := cluster.CheckName("pod", name); err != nil {
		return res, fmt.Errorf("creating a pod from SandboxTemplate %s/%s: %w", ns, o.Template, err)
	}
	res.ID = name
	progress(fmt.Sprintf("pod %s/%s made from SandboxTemplate %q on %s; waiting for its end", ns, name, o.Template, o.Config.Server))
	deadline := time.Now().Add(o.Start) // to start
	var endBy time.Time                 // to end, once started
	var checked time.Time
	var node string // the pod's, once bound
	for {
		p, err := c.Pod(ctx, ns, name)
		if err != nil && !errdefs.IsUnavailable(err) {
			return res, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
		if err == nil {
			if n := p.Spec.NodeName; n != "" {
				if err := cluster.CheckName("node", n); err != nil {
					return res, fmt.Errorf("pod %s/%s: %w", ns, name, err)
				}
			}
			node = p.Spec.NodeName
			if p.Status.Reason == cluster.ReasonRefused {
				return res, fmt.Errorf("%w: pod %s/%s refused by node %s: %s", errdefs.ErrInvalidArgument, ns, name, node, cluster.Printable(p.Status.Message))
			}
			if p.Status.Reason == cluster.ReasonNodeLost {
				// airlock node controller failed it: its node's lease expired.
				return res, fmt.Errorf("%w: %w: pod %s/%s: %s; the run can be tried again",
					errdefs.ErrUnavailable, ErrNodeLost, ns, name, cluster.Printable(p.Status.Message))
			}
			if p.Status.Phase != "Pending" && endBy.IsZero() {
				// Started: the pod's own deadline holds, and the node,
				// whose clock started before this one saw it, ends it by
				// then. A node that does not is not waited on for ever.
				deadline, endBy = time.Time{}, time.Now().Add(activeDeadline(p)+o.Grace)
			}
			if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
				return kubeResult(ctx, c, res, ns, name, made.Metadata.UID, p, o)
			}
			if n := p.Spec.NodeName; n != "" && time.Since(checked) >= nodeCheck {
				checked = time.Now()
				nd, err := c.Node(ctx, n)
				if err == nil && !nd.Ready() {
					return res, fmt.Errorf("%w: %w: node %s is not Ready (its lease expired, or it said so) while pod %s/%s was on it; the pod is deleted, and the run can be tried again",
						errdefs.ErrUnavailable, ErrNodeLost, n, ns, name)
				}
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return res, fmt.Errorf("%w: pod %s/%s did not start within %v; see `kubectl describe pod -n %s %s` (no airlock node with room?)",
				errdefs.ErrUnavailable, ns, name, o.Start, ns, name)
		}
		if !endBy.IsZero() && time.Now().After(endBy) {
			return res, fmt.Errorf("%w: pod %s/%s was still not ended %v past its activeDeadlineSeconds; its node %q did not end it, and the pod is deleted",
				errdefs.ErrUnavailable, ns, name, o.Grace, node)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// activeDeadline is how long pod p may run: its activeDeadlineSeconds,
// else the TTL an airlock node gives a pod without one.
func activeDeadline(p *cluster.Pod) time.Duration {
	if d := p.Spec.ActiveDeadlineSeconds; d != nil && *d > 0 {
		return claim.ActiveDeadline(*d)
	}
	return runner.DefaultTTL
}

// kubeResult reads the outcome of p, the ended pod ns/name. On an
// airlock node (one that publishes a receipt key) it is the Result the
// node gave, once it verifies (receipt and separate streams included),
// and nothing else: a pod whose program ran but that has no Result is
// data loss, and one whose node ran no program (the exec failed, the
// sandbox was never made) is unavailable; neither takes the exit code in
// the container's state, which whoever may write pods/status can forge.
// On any other node it is the container's terminated state and the log.
func kubeResult(ctx context.Context, c *cluster.Client, res runner.Result, ns, name, uid string, p *cluster.Pod, o KubeRun) (runner.Result, error) {
	node := p.Spec.NodeName
	pub, err := receiptKey(ctx, c, node)
	if err != nil {
		return res, fmt.Errorf("%w: pod %s/%s: %w", errdefs.ErrUnavailable, ns, name, err)
	}
	if cd := p.Condition(cluster.ResultCondition); cd != nil {
		var nr runner.Result
		if err := json.Unmarshal([]byte(cd.Message), &nr); err != nil || nr.Receipt == nil {
			return res, fmt.Errorf("%w: pod %s/%s's %s condition, from node %s, is not a Result with a receipt (%v); %s",
				errdefs.ErrDataLoss, ns, name, cluster.ResultCondition, node, err, notVerified(ns, name, node))
		}
		if err := verifyResult(p, uid, o, nr, pub); err != nil {
			return res, fmt.Errorf("%w: pod %s/%s's Result (its %s condition) is not node %s's for this run: %w; %s",
				errdefs.ErrDataLoss, ns, name, cluster.ResultCondition, node, err, notVerified(ns, name, node))
		}
		return nr, nil
	}
	cs := p.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Terminated == nil {
		// Failed by the cluster before it ran (a kubelet's admission), or
		// a node's word that says nothing.
		why := cmp.Or(p.Status.Reason, "no reason given")
		if p.Status.Message != "" {
			why += ": " + p.Status.Message
		}
		return res, fmt.Errorf("%w: pod %s/%s ended %s on node %s with no Result and no ended container: %s; see `kubectl describe pod -n %s %s`",
			errdefs.ErrUnavailable, ns, name, cluster.Printable(p.Status.Phase), node, cluster.Printable(why), ns, name)
	}
	term := cs[0].State.Terminated
	if pub != nil {
		return res, noResult(ns, name, node, term.Reason, term.Message)
	}
	log, cut, err := c.PodLog(ctx, ns, name, claim.Container, kubeLogCap)
	if err != nil {
		return res, fmt.Errorf("reading the log of pod %s/%s: %w", ns, name, err)
	}
	var out capture
	out.Write(log)
	res.Stdout = out.stream()
	if cut {
		// The log went on past what was read: its size and hash are
		// unknown, so the stream says only what was read.
		res.Stdout.Truncated, res.Stdout.SHA256 = true, ""
	}
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

// noResult is the error of pod ns/name, ended on airlock node node with
// its container terminated for reason (message) but no Result. A node
// gives a Result for every program that ran, so its absence there is data
// loss; the node's words for a program with no outcome (see noOutcome)
// are an error of their own (a failed exec's is in the message).
// Either way the container's exit code is nobody's signed word, and is
// not given.
func noResult(ns, name, node, reason, message string) error {
	why := cluster.Printable(cmp.Or(reason, "no reason given"))
	if message != "" {
		why += ": " + cluster.Printable(message)
	}
	if slices.Contains(noOutcome, reason) {
		return fmt.Errorf("%w: pod %s/%s's program gave no outcome on node %s (%s); see `kubectl describe pod -n %s %s` and the node's log",
			errdefs.ErrUnavailable, ns, name, node, why, ns, name)
	}
	return fmt.Errorf("%w: pod %s/%s ended on airlock node %s (its container says %s) without the %s condition that carries its signed Result, which that node gives for every program that ran: its outcome is not verified, and not given; %s",
		errdefs.ErrDataLoss, ns, name, node, why, cluster.ResultCondition, notVerified(ns, name, node))
}

// noOutcome are the reasons an airlock node gives a pod whose program
// has no outcome: its exec failed or its sandbox was destroyed under it
// (runner's words), or it never ran, or was lost with the node's previous
// process, or the pod was deleted while it ran (cluster's).
var noOutcome = []string{string(runner.ReasonError), string(runner.ReasonDestroyed), cluster.ReasonCreateFailed, cluster.ReasonNodeRestarted, cluster.ReasonDeleted}

// notVerified says what to do when a pod's Result does not verify or is
// missing: that is no bug of the client's.
func notVerified(ns, name, node string) string {
	return fmt.Sprintf("the pod's status was changed by someone other than its node (whoever may update pods/status), or node %s runs an airlock older than this client's; "+
		"see `kubectl get pod -n %s %s -o yaml` and the node's log", node, ns, name)
}

// receiptKey is the receipt key node publishes on its Node
// (cluster.AnnotationReceiptKey); nil when it publishes none, as a node
// that is not airlock's. A Node that cannot be read is an error: whether
// the pod's outcome must be a signed Result depends on it.
func receiptKey(ctx context.Context, c *cluster.Client, node string) (ed25519.PublicKey, error) {
	if node == "" {
		return nil, fmt.Errorf("the pod names no node, whose key would verify its Result")
	}
	n, err := c.Node(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("reading node %s, whose receipt key verifies the pod's Result: %w", node, err)
	}
	v := n.Metadata.Annotations[cluster.AnnotationReceiptKey]
	if v == "" {
		return nil, nil
	}
	pub, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("node %s's annotation %s is not a base64 ed25519 public key", node, cluster.AnnotationReceiptKey)
	}
	return pub, nil
}

// verifyResult holds nr, the Result in pod p's ResultCondition, to the
// run o asked for. Whoever may update pods/status can write that
// condition (airlock node controller's credentials reach every pod's),
// but only the pod's node holds the key its receipts are signed with,
// pub, published on its Node (cluster.AnnotationReceiptKey): the receipt
// must verify against that key, be of a version that binds the Result
// around it, name uid, the UID of the pod the run made (so a Result the
// node signed for another pod, such as an earlier run of the same job, is
// refused), o's job ("" outside a batch) and the hash of o.Argv, and the
// Result, as the run or batch gives it on, must agree with it field by
// field.
func verifyResult(p *cluster.Pod, uid string, o KubeRun, nr runner.Result, pub ed25519.PublicKey) error {
	node := p.Spec.NodeName
	if pub == nil {
		return fmt.Errorf("node %s publishes no receipt key (the annotation %s on its Node): it is no airlock node", node, cluster.AnnotationReceiptKey)
	}
	s := *nr.Receipt
	if err := receipt.Verify(s, pub); err != nil {
		return fmt.Errorf("its receipt does not verify against node %s's key %s: %w", node, receipt.KeyID(pub), err)
	}
	if s.Legacy() {
		return fmt.Errorf("its receipt is version 1, which binds no Result around it")
	}
	if got := s.Receipt.PodUID; got != uid || uid == "" || p.Metadata.UID != uid {
		return fmt.Errorf("its receipt is for pod UID %q, not the UID %q of the pod this run made", got, uid)
	}
	if r := s.Receipt; r.JobID != o.JobID {
		return fmt.Errorf("its receipt is for job %q, not %q", r.JobID, o.JobID)
	}
	argv, err := receipt.Hash(o.Argv)
	if err != nil {
		return err
	}
	if got := s.Receipt.ArgvSHA256; got != argv {
		return fmt.Errorf("its receipt's argv_sha256 is %q, not %s, the hash of the argv sent", got, argv)
	}
	// The verdict is the node's, on the expected stdout it was given (an
	// annotation, which pods/status can change before the node reads it):
	// it must be the verdict on this run's, judged on the signed stdout.
	if got, want := s.Receipt.Pass, receipt.Verdict(s.Receipt, o.ExpectedStdout); !receipt.SamePass(got, want) {
		return fmt.Errorf("its receipt's verdict (pass %s) is not the verdict on the expected stdout sent (%s)", receipt.ShowPass(got), receipt.ShowPass(want))
	}
	// A batch gives the Result on as a job's line, with the job's id and
	// the receipt's verdict.
	var line any = nr
	if o.JobID != "" {
		line = runner.BatchResult{JobID: o.JobID, Pass: s.Receipt.Pass, Result: nr}
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	if err := receipt.CheckResult(b); err != nil {
		return fmt.Errorf("it disagrees with its receipt: %w", err)
	}
	return nil
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

// policyWait is how long a run waits for agent-sandbox to make the
// NetworkPolicy of a template just applied.
const policyWait = 5 * time.Second

// denyAllLabels puts on pod, made from SandboxTemplate ns/template by a
// run and not by agent-sandbox, the labels by which the NetworkPolicy
// agent-sandbox made for the template (<template>-network-policy,
// controlled by the template) selects its pods, so that the run's pod is
// denied the network both ways as the template's are. A template with no
// such policy, or one that is not deny-all both ways, or that selects by
// more than labels, fails the run: the pod would have the namespace's
// network.
func denyAllLabels(ctx context.Context, c *cluster.Client, ns, template string, pod map[string]any) error {
	name := template + "-network-policy"
	np, err := c.NetworkPolicy(ctx, ns, name)
	// A template just applied has its policy a moment later.
	for wait := time.Now().Add(policyWait); errdefs.IsNotFound(err) && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		np, err = c.NetworkPolicy(ctx, ns, name)
	}
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("%w: SandboxTemplate %s/%s has no NetworkPolicy %s, which agent-sandbox's controller makes from the template's networkPolicy: is the controller running (with --extensions)? A run's pod without it would have the namespace's network",
			errdefs.ErrFailedPrecondition, ns, template, name)
	}
	if err != nil {
		return fmt.Errorf("reading NetworkPolicy %s/%s, which denies the run's pod the network: %w", ns, name, err)
	}
	var why string
	sp := np.Spec
	owned := slices.ContainsFunc(np.Metadata.OwnerReferences, func(r cluster.OwnerReference) bool {
		return r.Kind == "SandboxTemplate" && r.Name == template && r.Controller != nil && *r.Controller
	})
	switch {
	case !owned:
		why = "it is not controlled by the SandboxTemplate"
	case !slices.Contains(sp.PolicyTypes, "Ingress") || !slices.Contains(sp.PolicyTypes, "Egress") || len(sp.Ingress) > 0 || len(sp.Egress) > 0:
		why = "it does not deny all ingress and egress"
	case len(sp.PodSelector.MatchLabels) == 0 || len(sp.PodSelector.MatchExpressions) > 0:
		why = "it selects pods by no labels, or by expressions"
	}
	if why != "" {
		return fmt.Errorf("%w: NetworkPolicy %s/%s, agent-sandbox's for SandboxTemplate %s: %s; render the template again (`airlock kube render --template %s | kubectl apply -f -`), whose networkPolicy denies both ways",
			errdefs.ErrFailedPrecondition, ns, name, template, why, template)
	}
	meta := pod["metadata"].(map[string]any)
	labels := meta["labels"].(map[string]any)
	for k, v := range sp.PodSelector.MatchLabels {
		labels[k] = v
	}
	return nil
}
