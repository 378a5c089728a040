package service

// Sandboxes on a Kubernetes cluster (--engine kube): a SandboxClaim on a
// warm pool that `airlock kube render` made, kept by package kube/claim.
// They are a kind of their own beside the engines' sandboxes, not an
// engine.Engine: the cluster makes, isolates and ends them, and the node
// enforces the policy, so nothing of an engine's contract (mounts, a
// policy to apply, reaping on this host) is this host's to do. The
// service dispatches by id: ls, inspect, exec, rm and one-file transfers
// (kube_transfer_linux.go) reach them, from the CLI and, through a
// server started WithKube, the API; the rest (pause, trees, a supervisor,
// streamed execs, which take a runner.Sandbox) refuses, saying so.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/runner"
)

func (s *Service) claims() *claim.Store { return claim.Open(s.root) }

// kubeCount counts the sandboxes on a cluster for admission: each from
// its record's writing, before the claim is made, until rm has seen the
// claim and its pod gone and removed the record. A corrupt record counts
// as one.
func (s *Service) kubeCount() (int, error) { return s.claims().Count() }

// CreateKube claims a sandbox from a warm pool on a cluster (o.ID is
// set here) and waits until it runs; admission counts it like any other,
// its record once written (kubeCount).
func (s *Service) CreateKube(ctx context.Context, o claim.CreateOptions) (claim.Record, error) {
	if err := runner.CheckLabels(o.Labels); err != nil {
		return claim.Record{}, err
	}
	release, err := s.gate.Admit()
	if err != nil {
		return claim.Record{}, err
	}
	defer release()
	if o.ID, err = runner.NewSandboxID(); err != nil {
		return claim.Record{}, err
	}
	return s.claims().Create(ctx, o)
}

// KubeTarget is the cluster the API and MCP claim sandboxes on: airlock
// serve's --kubeconfig, --context and --namespace.
type KubeTarget struct {
	Kubeconfig, Context, Namespace string
}

// WithKube has the faces without cluster flags of their own claim
// sandboxes on t's cluster (CreateKubeFor); without it they refuse.
func WithKube(t KubeTarget) Option { return func(s *Service) { s.kube = &t } }

// CreateKubeFor claims a sandbox from warm pool template on the cluster
// WithKube names, for a face with no cluster flags of its own. The
// kubeconfig is read at each create, so a rotated one is taken.
func (s *Service) CreateKubeFor(ctx context.Context, template string, labels map[string]string, timeout time.Duration) (runner.SandboxInfo, error) {
	if s.kube == nil {
		return runner.SandboxInfo{}, fmt.Errorf("%w: this server claims no sandboxes on Kubernetes: start it with --kubeconfig FILE (and --context, --namespace) to serve engine kube", errdefs.ErrNotImplemented)
	}
	if template == "" {
		return runner.SandboxInfo{}, fmt.Errorf("%w: engine kube needs a template: the SandboxWarmPool `airlock kube render --template NAME --warm N | kubectl apply -f -` made", errdefs.ErrInvalidArgument)
	}
	cfg, err := cluster.Load(s.kube.Kubeconfig, s.kube.Context)
	if err != nil {
		return runner.SandboxInfo{}, fmt.Errorf("%w: the server's kubeconfig: %v", errdefs.ErrUnavailable, err)
	}
	r, err := s.CreateKube(ctx, claim.CreateOptions{Config: cfg, Namespace: s.kube.Namespace, WarmPool: template, Labels: labels, Timeout: timeout})
	if err != nil {
		return runner.SandboxInfo{}, err
	}
	return kubeInfo(r), nil
}

// KubeSandbox reads the record of sandbox id if it is on a cluster; ok
// is false for any other id.
func (s *Service) KubeSandbox(id string) (r claim.Record, ok bool, err error) {
	if runner.CheckSandboxID(id) != nil || !s.claims().Has(id) {
		return r, false, nil
	}
	r, err = s.claims().Get(id)
	return r, true, err
}

// onCluster refuses an operation a sandbox on a cluster does not have.
func (s *Service) onCluster(id string) error {
	r, ok, err := s.KubeSandbox(id)
	if !ok {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: sandbox %q runs on Kubernetes (SandboxClaim %s/%s on %s): airlock exec, cp, sandbox ls, inspect and rm reach it (and the API's exec, files and trees), nothing else yet",
		errdefs.ErrNotImplemented, id, r.Namespace, r.Claim, r.Server)
}

// kubeInfo is a cluster sandbox's record as sandbox ls shows one.
func kubeInfo(r claim.Record) runner.SandboxInfo {
	st := lifecycle.Ready
	switch r.State {
	case claim.Ready:
	case claim.Corrupt:
		st = lifecycle.Orphaned
	default:
		st = lifecycle.Requested
	}
	iso := map[string]string{"gvisor": "gvisor", "runc": "seccomp"}[r.RuntimeClass]
	return runner.SandboxInfo{ID: r.ID, State: st, Image: r.Image, Engine: claim.Engine, Isolation: iso,
		Labels: r.Labels, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, Workspace: runner.WorkspaceDir, Error: r.Err}
}

// ExecKube runs spec in sandbox id on its cluster, through the API
// server's pod exec. The node applies the pod's exec timeout and output
// cap; what a pod exec cannot carry (env, workdir, detach, a narrower
// timeout or output cap) is refused, never dropped. The result has the
// program's exit code; the node's reason words (timeout, output_limit) do
// not travel through a pod exec, so the reason is exited.
func (s *Service) ExecKube(ctx context.Context, id string, spec runner.ExecSpec) (runner.Result, error) {
	for _, c := range []struct {
		set  bool
		what string
	}{
		{len(spec.Env) > 0, "--env (run `env NAME=VALUE COMMAND`)"},
		{spec.Workdir != "", "--workdir (run `sh -c 'cd DIR && …'`)"},
		{spec.Detach, "--detach"},
		{spec.Timeout > 0, "--timeout (the pod's airlock.dev/timeout applies)"},
		{spec.OutputLimit > 0, "--output-limit (the pod's airlock.dev/output-limit applies)"},
	} {
		if c.set {
			return runner.Result{}, fmt.Errorf("%w: sandbox %q runs on Kubernetes, where a pod exec cannot carry %s", errdefs.ErrInvalidArgument, id, c.what)
		}
	}
	release, err := s.AdmitExec(id)
	if err != nil {
		return runner.Result{}, err
	}
	defer release()
	r, err := s.claims().Get(id)
	if err != nil {
		return runner.Result{}, err
	}
	res := runner.Result{SandboxID: id, Engine: claim.Engine, Image: r.Image, Reason: runner.ReasonError, ExitCode: -1}
	var out, errw capture
	e := cluster.Exec{Argv: spec.Argv, Stdin: spec.Stdin, Stdout: io.MultiWriter(&out, orDiscard(spec.Stdout)), Stderr: io.MultiWriter(&errw, orDiscard(spec.Stderr))}
	res.StartedAt = time.Now().UTC()
	code, err := s.claims().Exec(ctx, id, e)
	res.FinishedAt = time.Now().UTC()
	res.DurationMS = res.FinishedAt.Sub(res.StartedAt).Milliseconds()
	res.Stdout, res.Stderr = out.stream(), errw.stream()
	if err != nil {
		return res, err
	}
	res.Reason, res.ExitCode = runner.ReasonExited, code
	return res, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// captureCap is how much of each stream a cluster exec's Result keeps;
// the node caps what the program may write.
const captureCap = 1 << 20

// capture keeps the head of a stream, its size and hash, for the Result.
type capture struct {
	head  bytes.Buffer
	n     int64
	sum   hash.Hash
	trunc bool
}

func (c *capture) Write(p []byte) (int, error) {
	if c.sum == nil {
		c.sum = sha256.New()
	}
	c.sum.Write(p)
	c.n += int64(len(p))
	keep := min(len(p), max(captureCap-c.head.Len(), 0))
	c.head.Write(p[:keep])
	c.trunc = c.trunc || keep < len(p)
	return len(p), nil
}

func (c *capture) stream() runner.Stream {
	if c.sum == nil {
		c.sum = sha256.New()
	}
	return runner.Stream{Head: c.head.Bytes(), Bytes: c.n, Truncated: c.trunc, SHA256: hex.EncodeToString(c.sum.Sum(nil))}
}
