package controller

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/containerd/errdefs"
)

// Name names the controller's roles and bindings.
const Name = "airlock-controller"

// rule is one permission the controller needs; namespace "" is cluster-wide.
type rule struct {
	group, resource, sub, namespace string
	verbs                           []string
}

// rules are all the controller may do: read airlock nodes and their
// leases, list pods and update a lost node's pods' status, record events.
// No pod is created or deleted, no secret read.
var rules = []rule{
	{resource: "nodes", verbs: []string{"get", "list", "watch"}},
	{resource: "pods", verbs: []string{"list"}},
	{resource: "pods", sub: "status", verbs: []string{"update"}},
	{resource: "events", verbs: []string{"create", "patch"}},
	{group: "coordination.k8s.io", resource: "leases", namespace: corev1.NamespaceNodeLease, verbs: []string{"get", "list", "watch"}},
}

var (
	userName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9@._:-]{0,252}$`)
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// RBAC returns, as YAML for kubectl apply, the controller's roles (a
// ClusterRole, and a Role in kube-node-lease for the leases) bound to the
// user, or to the service account "NAMESPACE/NAME" when serviceAccount is
// set.
func RBAC(user, serviceAccount string) ([]byte, error) {
	var subject string
	switch {
	case serviceAccount != "":
		ns, name, ok := strings.Cut(serviceAccount, "/")
		if !ok || !dnsLabel.MatchString(ns) || !dnsLabel.MatchString(name) {
			return nil, fmt.Errorf("%w: --service-account %q: give NAMESPACE/NAME, each a DNS label", errdefs.ErrInvalidArgument, serviceAccount)
		}
		subject = fmt.Sprintf("- kind: ServiceAccount\n  namespace: %s\n  name: %s\n", ns, name)
	case userName.MatchString(user) && !strings.HasPrefix(user, "system:"):
		subject = fmt.Sprintf("- kind: User\n  apiGroup: rbac.authorization.k8s.io\n  name: %q\n", user)
	default:
		return nil, fmt.Errorf("%w: --user %q: give the user name the controller's credentials carry (letters, digits, @._:-), not a system: name", errdefs.ErrInvalidArgument, user)
	}
	var b strings.Builder
	b.WriteString("# airlock node controller: fails the pods of an airlock node whose lease\n# expired. It reads nodes, leases and pods, and writes only pods' status\n# and events.\n")
	role := func(kind, ns string, rs []rule) {
		fmt.Fprintf(&b, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: %s\nmetadata:\n  name: %s\n", kind, Name)
		if ns != "" {
			fmt.Fprintf(&b, "  namespace: %s\n", ns)
		}
		b.WriteString("rules:\n")
		for _, r := range rs {
			res := r.resource
			if r.sub != "" {
				res += "/" + r.sub
			}
			fmt.Fprintf(&b, "- apiGroups: [%q]\n  resources: [%s]\n  verbs: [%s]\n", r.group, res, strings.Join(r.verbs, ", "))
		}
		fmt.Fprintf(&b, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: %sBinding\nmetadata:\n  name: %s\n", kind, Name)
		if ns != "" {
			fmt.Fprintf(&b, "  namespace: %s\n", ns)
		}
		fmt.Fprintf(&b, "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: %s\n  name: %s\nsubjects:\n%s", kind, Name, subject)
	}
	var cluster, leases []rule
	for _, r := range rules {
		if r.namespace == "" {
			cluster = append(cluster, r)
		} else {
			leases = append(leases, r)
		}
	}
	role("ClusterRole", "", cluster)
	role("Role", corev1.NamespaceNodeLease, leases)
	return []byte(b.String()), nil
}

// preflight asks the API server whether the controller's user may do all
// it needs, and names what it may not.
func preflight(ctx context.Context, client kubernetes.Interface) error {
	var missing []string
	for _, r := range rules {
		for _, v := range r.verbs {
			rev, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
				Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
					Group: r.group, Resource: r.resource, Subresource: r.sub, Namespace: r.namespace, Verb: v,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("%w: asking the API server what the controller may do: %v", errdefs.ErrUnavailable, err)
			}
			if !rev.Status.Allowed {
				what := r.resource
				if r.sub != "" {
					what += "/" + r.sub
				}
				if r.namespace != "" {
					what += " in " + r.namespace
				}
				missing = append(missing, v+" "+what)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the controller's credentials may not %s: apply the roles `airlock node controller --print-rbac --user NAME` prints for them",
			errdefs.ErrPermissionDenied, strings.Join(missing, ", "))
	}
	return nil
}
