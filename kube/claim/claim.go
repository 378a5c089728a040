// Package claim keeps airlock's sandboxes that live on a Kubernetes
// cluster (`airlock sandbox create --engine kube`): each is one
// agent-sandbox SandboxClaim on a warm pool, named by its airlock id, and
// a record under <root>/claims/<id>.json that says where it is (the
// kubeconfig, context, server, namespace, and once ready its pod and
// node). The record holds no credentials: an exec or rm loads the
// kubeconfig it names again.
//
// Rules:
//   - The record is written before the claim is made, so an interrupted
//     create leaves something rm can find; a create that fails deletes the
//     claim it made, on a context of its own, and its record.
//   - Destroy is idempotent: a claim or record already gone succeeds; it
//     returns once the API server has deleted the claim and what it owns
//     (foreground deletion: its Sandbox and its pod).
//   - The policy is the cluster's: the warm pool's template, as
//     `airlock kube render` wrote it, and the node's enforcement of it.
package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/kube/cluster"
)

// Engine is the engine name a claimed sandbox shows.
const Engine = "kube"

// Container is the container airlock's rendered pods run in.
const Container = "sandbox"

// States of a record.
const (
	// Creating: the claim may exist, and is not yet ready.
	Creating = "creating"
	// Ready: the claim is bound to a running pod.
	Ready = "ready"
	// Corrupt: List's word for a record it could not read; never
	// written. Record.Err says why and what to do.
	Corrupt = "corrupt"
)

// Record is where a claimed sandbox lives.
type Record struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Engine is always "kube".
	Engine     string `json:"engine"`
	Kubeconfig string `json:"kubeconfig"`
	Context    string `json:"context"`
	Server     string `json:"server"`
	Namespace  string `json:"namespace"`
	// Claim is the SandboxClaim's name (the id), WarmPool the pool it
	// claimed from.
	Claim    string `json:"claim"`
	WarmPool string `json:"warm_pool"`
	// Pod and Node are where it runs; Image and RuntimeClass are the
	// pod's.
	Pod          string            `json:"pod,omitempty"`
	Node         string            `json:"node,omitempty"`
	Image        string            `json:"image,omitempty"`
	RuntimeClass string            `json:"runtime_class,omitempty"`
	Labels       map[string]string `json:"labels"`
	CreatedAt    time.Time         `json:"created_at"`
	// ExpiresAt is the pod's end by its activeDeadlineSeconds, counted
	// from the pod's start (a warm pod starts before it is claimed).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Err is why a Corrupt record could not be read.
	Err string `json:"-"`
}

// Store is the records under one airlock root.
type Store struct {
	dir string
	// timeout, when set, is its clients' request timeout (tests shorten
	// it); else cluster.RequestTimeout.
	timeout time.Duration
}

// client is a client of cfg's API server.
func (s *Store) client(cfg *cluster.Config) *cluster.Client {
	return cluster.New(cfg, cluster.WithRequestTimeout(s.timeout))
}

// Open returns the store of root's claimed sandboxes.
func Open(root string) *Store { return &Store{dir: filepath.Join(root, "claims")} }

func (s *Store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// Get reads sandbox id's record; a sandbox with none is not found.
func (s *Store) Get(id string) (Record, error) {
	var r Record
	b, err := os.ReadFile(s.path(filepath.Base(id)))
	if errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("%w: no claimed sandbox %q", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("%w: reading claimed sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.ID != id {
		return r, fmt.Errorf("%w: the record of claimed sandbox %q (%s) is corrupt; delete its claim with kubectl and remove the file", errdefs.ErrDataLoss, id, s.path(id))
	}
	return r, nil
}

// Has says whether id has a record here.
func (s *Store) Has(id string) bool {
	_, err := os.Lstat(s.path(filepath.Base(id)))
	return err == nil
}

// Count is how many records there are, a corrupt one included: admission
// counts a sandbox whose record it cannot read, as it does a local one,
// rather than refusing every admission over it.
func (s *Store) Count() (int, error) {
	files, err := filepath.Glob(filepath.Join(s.dir, "sb-*.json"))
	return len(files), err
}

// List reads every record, oldest first; one it cannot read is listed
// Corrupt, with its id and Err, so that the others are still seen.
func (s *Store) List() ([]Record, error) {
	files, _ := filepath.Glob(filepath.Join(s.dir, "sb-*.json"))
	var out []Record
	for _, f := range files {
		id := strings.TrimSuffix(filepath.Base(f), ".json")
		r, err := s.Get(id)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			r = Record{ID: id, State: Corrupt, Engine: Engine, Labels: map[string]string{}, Err: err.Error()}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (s *Store) put(r *Record) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	b, _ := json.Marshal(r)
	if err := atomicfile.WriteFile(s.path(r.ID), b, 0o600); err != nil {
		return fmt.Errorf("%w: writing the record of sandbox %q: %v", errdefs.ErrUnavailable, r.ID, err)
	}
	return nil
}

func (s *Store) remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: removing the record of sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	return nil
}

// CreateOptions is a sandbox to claim.
type CreateOptions struct {
	// ID is the new sandbox's id (runner.NewSandboxID).
	ID string
	// Config is the kubeconfig context to claim with.
	Config *cluster.Config
	// Namespace is the warm pool's; "" takes the context's, else default.
	Namespace string
	// WarmPool is the SandboxWarmPool to claim from (`airlock kube
	// render --template T --warm N` names it T).
	WarmPool string
	Labels   map[string]string
	// Timeout bounds the create as a whole (default 2m): reading the warm
	// pool, the claim, the wait for it to be ready, and reading its pod.
	// Cleaning up after a failed create has a minute of its own.
	Timeout time.Duration
	// Progress, when set, is told what the create is waiting for.
	Progress func(string)
}

// DefaultTimeout is how long a create may take by default.
const DefaultTimeout = 2 * time.Minute

// poll is how often a wait asks the API server.
const poll = 250 * time.Millisecond

// podFailed is the reason of a claim's Ready condition when the pod of
// the sandbox it was given has failed; a create claims again past such
// sandboxes, up to the warm pool's size plus two claims, and at least
// minClaims.
const (
	podFailed = "PodFailed"
	minClaims = 3
)

// Create claims a sandbox from o's warm pool and waits until its pod
// runs, within o.Timeout. On any error nothing it made is left.
func (s *Store) Create(ctx context.Context, o CreateOptions) (rec Record, err error) {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	ns := o.Config.NamespaceOr(o.Namespace)
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	parent := ctx
	ctx, cancelCreate := context.WithTimeout(ctx, o.Timeout)
	defer cancelCreate()
	// within says, of an error that the create's Timeout (not its
	// caller) cut short, that it did.
	within := func(err error) error {
		if ctx.Err() != nil && parent.Err() == nil {
			return fmt.Errorf("%w (the create's %v, --ready-timeout, ran out)", err, o.Timeout)
		}
		return err
	}
	c := s.client(o.Config)
	pool, err := c.WarmPool(ctx, ns, o.WarmPool)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return rec, fmt.Errorf("%w: no SandboxWarmPool %q in namespace %q on %s: make one with `airlock kube render --template %s --warm 2 | kubectl apply -f -`",
				errdefs.ErrNotFound, o.WarmPool, ns, o.Config.Server, o.WarmPool)
		}
		return rec, within(fmt.Errorf("reading warm pool %s/%s: %w", ns, o.WarmPool, err))
	}
	rec = Record{ID: o.ID, State: Creating, Engine: Engine, Kubeconfig: o.Config.Path, Context: o.Config.Context, Server: o.Config.Server,
		Namespace: ns, Claim: o.ID, WarmPool: o.WarmPool, Labels: o.Labels, CreatedAt: time.Now().UTC()}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	if err := s.put(&rec); err != nil {
		return rec, err
	}
	defer func() {
		if err == nil {
			return
		}
		// A create cut short leaves nothing: the claim, if made, and the
		// record go, whatever ctx is.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := s.destroy(cctx, c, rec); derr != nil {
			err = errors.Join(err, fmt.Errorf("and cleaning up: %w", derr))
		}
	}()
	start := time.Now()
	claim := func() error {
		labels := map[string]string{"app.kubernetes.io/managed-by": "airlock"}
		if _, err := c.CreateClaim(ctx, ns, rec.Claim, o.WarmPool, labels); err != nil {
			return within(fmt.Errorf("creating SandboxClaim %s/%s: %w", ns, rec.Claim, err))
		}
		progress(fmt.Sprintf("claimed %s/%s from warm pool %q on %s; waiting for it to be ready", ns, rec.Claim, o.WarmPool, o.Config.Server))
		return nil
	}
	if err := claim(); err != nil {
		return rec, err
	}
	var last string
	failed := 0
	// Every warm sandbox may have failed at once (their node restarted):
	// claim past them all.
	maxClaims := minClaims
	if r := pool.Spec.Replicas; r != nil {
		maxClaims = max(minClaims, int(*r)+2)
	}
	for {
		cl, err := c.Claim(ctx, ns, rec.Claim)
		if err == nil {
			// The sandbox's name is its pod's, which is recorded and shown.
			if n := cl.Status.Sandbox.Name; n != "" {
				if err := cluster.CheckName("pod", n); err != nil {
					return rec, fmt.Errorf("SandboxClaim %s/%s's sandbox: %w", ns, rec.Claim, err)
				}
			}
			cond, _ := cl.Ready()
			if cond.Status == "True" && cl.Status.Sandbox.Name != "" {
				rec.Pod = cl.Status.Sandbox.Name
				break
			}
			// The condition is the cluster's word (agent-sandbox's, from
			// what the pod's node said): shown cut and escaped.
			if now := fmt.Sprintf("Ready=%s %s %s", cluster.Printable(cond.Status), cluster.Printable(cond.Reason), cluster.Printable(cond.Message)); now != last {
				last = now
				progress("waiting: " + strings.TrimSpace(now))
			}
			// agent-sandbox may hand a claim a warm sandbox whose pod has
			// failed (its node restarted); that claim never becomes
			// ready. Give it back and claim again.
			if cond.Reason == podFailed {
				if failed++; failed == maxClaims {
					return rec, fmt.Errorf("%w: warm pool %s/%s gave %d sandboxes whose pods had failed; see `kubectl get pods -n %s -l airlock.dev/template`",
						errdefs.ErrUnavailable, ns, o.WarmPool, failed, ns)
				}
				progress(fmt.Sprintf("the warm pool's sandbox %q had failed; claiming again", cl.Status.Sandbox.Name))
				if err := deleteClaim(ctx, c, ns, rec.Claim, cl.Status.Sandbox.Name); err != nil {
					return rec, within(err)
				}
				if err := claim(); err != nil {
					return rec, err
				}
				last = ""
			}
		} else if ctx.Err() == nil && !errdefs.IsUnavailable(err) {
			return rec, fmt.Errorf("reading SandboxClaim %s/%s: %w", ns, rec.Claim, err)
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return rec, parent.Err()
			}
			return rec, fmt.Errorf("%w: SandboxClaim %s/%s was not ready within %v (last: %s); see `kubectl get sandboxwarmpool -n %s %s` and `kubectl describe sandboxclaim -n %s %s`, or wait longer with --ready-timeout",
				errdefs.ErrUnavailable, ns, rec.Claim, o.Timeout, strings.TrimSpace(last), ns, o.WarmPool, ns, rec.Claim)
		case <-time.After(poll):
		}
	}
	pod, err := c.Pod(ctx, ns, rec.Pod)
	if err != nil {
		return rec, within(fmt.Errorf("reading the claim's pod %s/%s: %w", ns, rec.Pod, err))
	}
	if pod.Status.Phase != "Running" {
		return rec, fmt.Errorf("%w: the claim's pod %s/%s is %s, not Running: %s", errdefs.ErrUnavailable, ns, rec.Pod, cluster.Printable(pod.Status.Phase), cluster.Printable(pod.Status.Message))
	}
	if n := pod.Spec.NodeName; n != "" {
		if err := cluster.CheckName("node", n); err != nil {
			return rec, fmt.Errorf("the claim's pod %s/%s: %w", ns, rec.Pod, err)
		}
	}
	if rc := pod.Spec.RuntimeClassName; rc != "" {
		if err := cluster.CheckName("runtime class", rc); err != nil {
			return rec, fmt.Errorf("the claim's pod %s/%s: %w", ns, rec.Pod, err)
		}
	}
	// The pod is agent-sandbox's, from the warm pool's template as the
	// cluster has it now: held to what airlock renders before it is used.
	spec, err := c.PodSpec(ctx, ns, rec.Pod)
	if err != nil {
		return rec, within(fmt.Errorf("reading the claim's pod %s/%s: %w", ns, rec.Pod, err))
	}
	if err := CheckPodSpec(spec); err != nil {
		return rec, fmt.Errorf("the claim's pod %s/%s, from warm pool %q: %w; render its template again (`airlock kube render --template %s --warm N | kubectl apply -f -`)",
			ns, rec.Pod, o.WarmPool, err, o.WarmPool)
	}
	rec.State, rec.Node, rec.RuntimeClass = Ready, pod.Spec.NodeName, pod.Spec.RuntimeClassName
	for _, ct := range pod.Spec.Containers {
		if ct.Name != Container {
			continue
		}
		if !imageRef(ct.Image) {
			return rec, fmt.Errorf("%w: the claim's pod %s/%s names image \"%s\", which is no image reference (printable ASCII, at most %d bytes)",
				errdefs.ErrUnavailable, ns, rec.Pod, cluster.Printable(ct.Image), maxImageRef)
		}
		rec.Image = ct.Image
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil && pod.Status.StartTime != nil {
		rec.ExpiresAt = pod.Status.StartTime.Add(ActiveDeadline(*d)).UTC()
	}
	if err := s.put(&rec); err != nil {
		return rec, err
	}
	progress(fmt.Sprintf("ready in %.1fs: pod %s/%s on node %s", time.Since(start).Seconds(), ns, rec.Pod, rec.Node))
	return rec, nil
}

// maxImageRef bounds an image reference read from a pod, as a
// registry's name and digest need.
const maxImageRef = 4096

// imageRef says whether s can be an image reference: printable ASCII
// without spaces, at most maxImageRef bytes. It is recorded and shown.
func imageRef(s string) bool {
	if s == "" || len(s) > maxImageRef {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// clientOf loads the kubeconfig r was made with and checks that it still
// names the same API server.
func (s *Store) clientOf(r *Record) (*cluster.Client, error) {
	cfg, err := cluster.Load(r.Kubeconfig, r.Context)
	if err != nil {
		return nil, fmt.Errorf("%w: sandbox %q was claimed with kubeconfig %s (context %q), which cannot be used now (%v): restore it, or delete SandboxClaim %s/%s on %s with kubectl and remove the record %s",
			errdefs.ErrFailedPrecondition, r.ID, r.Kubeconfig, r.Context, err, r.Namespace, r.Claim, r.Server, s.path(r.ID))
	}
	if cfg.Server != r.Server {
		return nil, fmt.Errorf("%w: sandbox %q is on %s, and context %q of %s now names %s: restore it, or delete SandboxClaim %s/%s with kubectl and remove the record %s",
			errdefs.ErrFailedPrecondition, r.ID, r.Server, r.Context, r.Kubeconfig, cfg.Server, r.Namespace, r.Claim, s.path(r.ID))
	}
	return s.client(cfg), nil
}

// Exec runs e in sandbox id's pod (e's Namespace, Pod and Container are
// set from the record) and returns the program's exit code.
func (s *Store) Exec(ctx context.Context, id string, e cluster.Exec) (int, error) {
	r, err := s.Get(id)
	if err != nil {
		return -1, err
	}
	if r.State != Ready {
		return -1, fmt.Errorf("%w: sandbox %q is %s, not ready", errdefs.ErrFailedPrecondition, id, r.State)
	}
	c, err := s.clientOf(&r)
	if err != nil {
		return -1, err
	}
	e.Namespace, e.Pod, e.Container = r.Namespace, r.Pod, Container
	code, err := c.Exec(ctx, e)
	if errdefs.IsNotFound(err) {
		return code, fmt.Errorf("%w: sandbox %q: its pod %s/%s is gone (its TTL passed, or it was deleted): `airlock sandbox rm %s` removes the record: %v",
			errdefs.ErrNotFound, id, r.Namespace, r.Pod, id, err)
	}
	return code, err
}

// Destroy deletes sandbox id's claim, waits until the API server has
// deleted it and what it owns, and removes the record. An id with no
// record succeeds.
func (s *Store) Destroy(ctx context.Context, id string) error {
	r, err := s.Get(id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c, err := s.clientOf(&r)
	if err != nil {
		return err
	}
	return s.destroy(ctx, c, r)
}

// destroyWait bounds a destroy: the DELETE and the wait for the deleted
// claim to go.
const destroyWait = 2 * time.Minute

func (s *Store) destroy(ctx context.Context, c *cluster.Client, r Record) error {
	if err := deleteClaim(ctx, c, r.Namespace, r.Claim, r.Pod); err != nil {
		return err
	}
	return s.remove(r.ID)
}

// deleteClaim deletes claim ns/name and waits until it is gone, with what
// it owns (pod names its pod, for the error), within destroyWait.
func deleteClaim(ctx context.Context, c *cluster.Client, ns, name, pod string) error {
	wctx, cancel := context.WithTimeout(ctx, destroyWait)
	defer cancel()
	if err := c.DeleteClaim(wctx, ns, name); err != nil {
		return fmt.Errorf("deleting SandboxClaim %s/%s: %w", ns, name, err)
	}
	for {
		_, err := c.Claim(wctx, ns, name)
		if errdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%w: SandboxClaim %s/%s is still being deleted after %v (its pod's node must confirm the pod's end): `kubectl get pod -n %s %s` shows it; run rm again",
				errdefs.ErrUnavailable, ns, name, destroyWait, ns, pod)
		case <-time.After(poll):
		}
	}
}
