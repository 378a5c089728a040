// Package controller is airlock's cluster controller. It fails the pods of
// an airlock node whose lease has expired: the node, killed or cut off,
// cannot say that its pods' programs are gone, and NodeRestriction lets no
// other node say it for it.
//
// Rules:
//   - Only airlock nodes (label airlock.dev/node=true) are watched; a
//     kubelet's pods are the kubelet's and the node lifecycle controller's.
//   - A lease expires by this process's clock: a node is lost once its
//     renewTime has not changed, as seen here, for its
//     leaseDurationSeconds plus Grace. A restarted controller gives every
//     node a whole period again. A node with no lease is never lost.
//   - A lost node's pods that have not ended are failed, reason
//     AirlockNodeLost, each container terminated with exit code 137, and a
//     DisruptionTarget condition. Nothing is deleted: their owners decide.
//   - Each failure is one status update at the pod's resourceVersion, so a
//     node that wrote first wins; the next sweep looks again.
//   - A node that comes back ends the sandboxes of the pods failed here
//     (node.Provider.EndedElsewhere): a program never outlives its pod.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/node"
)

// Config configures the controller.
type Config struct {
	// Kubeconfig holds the controller's credentials (bound to the
	// roles RBAC prints), mode 0600.
	Kubeconfig string
	// Grace is how long past a lease's own duration a node is given before
	// its pods fail.
	Grace time.Duration
	Log   *slog.Logger
}

// interval is how often the leases are looked at.
const interval = 2 * time.Second

// resweep is how often a lost node's pods are looked at again, for a pod
// bound to it since or a failure a node's own update beat.
const resweep = 30 * time.Second

// Run fails lost airlock nodes' pods until ctx ends; ready, when not nil,
// is called once the nodes and leases are watched.
func Run(ctx context.Context, c Config, ready func()) error {
	if c.Grace < 0 {
		return fmt.Errorf("%w: --grace %v: give a duration of 0 or more", errdefs.ErrInvalidArgument, c.Grace)
	}
	client, err := node.ClientAs(c.Kubeconfig, "airlock-controller")
	if err != nil {
		return err
	}
	if err := preflight(ctx, client); err != nil {
		return err
	}
	nodes := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{node.NodeLabel: "true"}).String()
	}))
	leases := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, informers.WithNamespace(corev1.NamespaceNodeLease))
	nodeLister, leaseLister := nodes.Core().V1().Nodes().Lister(), leases.Coordination().V1().Leases().Lister()
	nodes.Start(ctx.Done())
	leases.Start(ctx.Done())
	for what, synced := range map[string]func(<-chan struct{}) map[reflect.Type]bool{"nodes": nodes.WaitForCacheSync, "leases": leases.WaitForCacheSync} {
		for _, ok := range synced(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%w: listing %s: see the log above; does the controller's user hold the roles `airlock node controller --print-rbac` prints?", errdefs.ErrUnavailable, what)
			}
		}
	}
	eb := record.NewBroadcaster()
	defer eb.Shutdown()
	eb.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	s := &sweeper{client: client, log: c.Log, recorder: eb.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "airlock-controller"}),
		leases: tracker{grace: c.Grace, seen: map[string]observed{}}}
	c.Log.Info("watching airlock nodes' leases", "grace", c.Grace)
	if ready != nil {
		ready()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		all, err := nodeLister.List(labels.Everything())
		if err != nil {
			return fmt.Errorf("%w: listing airlock nodes: %v", errdefs.ErrInternal, err)
		}
		now := time.Now()
		names := make([]string, 0, len(all))
		for _, n := range all {
			names = append(names, n.Name)
			l, err := leaseLister.Leases(corev1.NamespaceNodeLease).Get(n.Name)
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: node %s's lease: %v", errdefs.ErrInternal, n.Name, err)
			}
			if err != nil {
				l = nil
			}
			s.check(ctx, n.Name, l, now)
		}
		s.leases.keep(names)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweeper fails the pods of the nodes its tracker finds lost.
type sweeper struct {
	client   kubernetes.Interface
	log      *slog.Logger
	recorder record.EventRecorder
	leases   tracker
}

// check looks at one node's lease and, when it is lost and due, fails its
// pods.
func (s *sweeper) check(ctx context.Context, name string, l *coordv1.Lease, now time.Time) {
	lost, o := s.leases.observe(name, l, now)
	if !lost {
		return
	}
	if !o.swept.IsZero() && now.Sub(o.swept) < resweep {
		return
	}
	if o.swept.IsZero() {
		s.log.Warn("airlock node lost: its lease expired", "node", name, "renewed", o.renew, "unchanged_for", now.Sub(o.seen).Round(time.Second))
	}
	failed, err := s.sweep(ctx, name, o, now)
	if err != nil {
		s.log.Error("failing a lost node's pods", "node", name, "error", err)
		return // the next tick tries again
	}
	s.leases.swept(name, now)
	if failed > 0 {
		s.log.Warn("failed a lost node's pods", "node", name, "pods", failed)
	}
}

// sweep fails every pod bound to node that has not ended, and says how
// many it failed.
func (s *sweeper) sweep(ctx context.Context, name string, o observed, now time.Time) (int, error) {
	list, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", name),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed))).String(),
	})
	if err != nil {
		return 0, fmt.Errorf("listing node %s's pods: %w", name, err)
	}
	failed := 0
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		msg := fmt.Sprintf("node %s stopped renewing its lease (last renewed %s, for %ds; unchanged for %v): the pod's program is lost with the node and is not started again",
			name, o.renew.UTC().Format(time.RFC3339), o.duration, now.Sub(o.seen).Round(time.Second))
		up := p.DeepCopy()
		up.Status = FailedStatus(p, msg, metav1.NewTime(now))
		_, err := s.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, up, metav1.UpdateOptions{})
		switch {
		case err == nil:
			failed++
			s.recorder.Event(p, corev1.EventTypeWarning, node.ReasonNodeLost, msg)
			s.log.Info("pod failed: its node is lost", "pod", p.Namespace+"/"+p.Name, "node", name)
		case apierrors.IsNotFound(err):
		default:
			// A conflict: the node, or another writer, came first.
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return failed, errors.Join(errs...)
}

// FailedStatus is p's status once its node is lost: Failed, reason
// node.ReasonNodeLost with msg, not ready, a DisruptionTarget condition,
// and every container that has not ended terminated with exit code 137.
func FailedStatus(p *corev1.Pod, msg string, now metav1.Time) corev1.PodStatus {
	st := *p.Status.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, node.ReasonNodeLost, msg
	set := func(t corev1.PodConditionType, status corev1.ConditionStatus, reason string) {
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != status {
					st.Conditions[i].LastTransitionTime = now
				}
				st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].Message = status, reason, msg
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
	}
	set(corev1.PodReady, corev1.ConditionFalse, node.ReasonNodeLost)
	set(corev1.ContainersReady, corev1.ConditionFalse, node.ReasonNodeLost)
	set(corev1.DisruptionTarget, corev1.ConditionTrue, node.ReasonNodeLost)

	byName := map[string]int{}
	for i, cs := range st.ContainerStatuses {
		byName[cs.Name] = i
	}
	for _, c := range p.Spec.Containers {
		if _, ok := byName[c.Name]; !ok {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image})
			byName[c.Name] = len(st.ContainerStatuses) - 1
		}
	}
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		if cs.State.Terminated != nil {
			continue
		}
		term := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: node.ReasonNodeLost, Message: msg, FinishedAt: now, ContainerID: cs.ContainerID}
		if r := cs.State.Running; r != nil {
			term.StartedAt = r.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: term}
		cs.Ready, cs.Started = false, new(false)
	}
	return st
}

// tracker times each node's lease by this process's clock; Run's loop
// alone uses it.
type tracker struct {
	grace time.Duration
	seen  map[string]observed
}

// observed is what the tracker knows of one node's lease.
type observed struct {
	renew    time.Time // the lease's renewTime, by the node's clock
	duration int32     // its leaseDurationSeconds
	seen     time.Time // when renew was first seen at its value, by ours
	swept    time.Time // when its pods were last failed, if lost
}

// observe records node name's lease l at now and says whether the node is
// lost: l's renewTime unchanged, here, for longer than its duration plus
// the grace. A nil lease forgets the node.
func (t *tracker) observe(name string, l *coordv1.Lease, now time.Time) (bool, observed) {
	if l == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		delete(t.seen, name)
		return false, observed{}
	}
	renew := l.Spec.RenewTime.Time
	o, ok := t.seen[name]
	if !ok || !o.renew.Equal(renew) {
		o = observed{renew: renew, seen: now}
	}
	o.duration = *l.Spec.LeaseDurationSeconds
	t.seen[name] = o
	return now.Sub(o.seen) > time.Duration(o.duration)*time.Second+t.grace, o
}

// swept records that name's pods were failed at now.
func (t *tracker) swept(name string, now time.Time) {
	if o, ok := t.seen[name]; ok {
		o.swept = now
		t.seen[name] = o
	}
}

// keep forgets every node but names.
func (t *tracker) keep(names []string) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for n := range t.seen {
		if !want[n] {
			delete(t.seen, n)
		}
	}
}
