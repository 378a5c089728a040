package cluster

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
)

// The agent-sandbox API group of claims and warm pools.
const extensions = "extensions.agents.x-k8s.io/v1beta1"

// ObjectMeta is the part of an object's metadata the client uses.
type ObjectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
}

// What a client and an airlock node exchange on a one-shot pod.
const (
	// AnnotationJobID and AnnotationExpectedStdout make a one-shot pod a
	// batch job: the node signs the job's id, and its verdict against the
	// expected stdout, into the run's receipt.
	AnnotationJobID          = "airlock.dev/job-id"
	AnnotationExpectedStdout = "airlock.dev/expected-stdout"
	// ResultCondition is the pod condition in which an airlock node gives
	// the Result of every pod's program that ran, receipt included, as
	// JSON (its message) of at most MaxResultBytes: a larger Result has
	// its streams cut to fit, and its receipt signed again.
	ResultCondition = "airlock.dev/result"
	MaxResultBytes  = 512 << 10
	// AnnotationReceiptKey holds, on an airlock node's Node, the base64
	// ed25519 public key its receipts are signed with: a client holds the
	// Result in a pod's ResultCondition to it.
	AnnotationReceiptKey = "airlock.dev/receipt-key"
)

// Pod status reasons of an airlock node's own, beside airlock's run
// reasons (exited, timeout, oom, output_limit …) in a container's
// terminated state.
const (
	// ReasonRefused: the pod asks for what the node does not honour.
	ReasonRefused = "AirlockRefused"
	// ReasonCreateFailed: the sandbox could not be made.
	ReasonCreateFailed = "AirlockCreateFailed"
	// ReasonNodeRestarted: the pod's program was lost with the node's
	// previous process; it is never started a second time.
	ReasonNodeRestarted = "AirlockNodeRestarted"
	// ReasonDeleted: the pod was deleted while its program ran.
	ReasonDeleted = "Deleted"
	// ReasonNodeLost: the pod's node stopped renewing its lease while the
	// pod ran; airlock's cluster controller failed the pod, and the node,
	// should it come back, ends the pod's sandbox.
	ReasonNodeLost = "AirlockNodeLost"
)

// MaxName is the longest object name CheckName takes: a DNS-1123
// subdomain's, as Kubernetes gives pods and nodes.
const MaxName = 253

// CheckName says whether name, the name of a kind ("pod", "node") as the
// cluster gave it, is a DNS-1123 subdomain (lower-case letters, digits,
// '-' and '.', starting and ending with a letter or digit, at most
// MaxName bytes), as Kubernetes requires of pods' and nodes' names. A
// name read from the cluster is checked before it is recorded or shown:
// anyone who may write an object's status chooses what it names, and a
// valid name needs no escaping on a terminal. Another is unavailable (the
// answer is not one an API server gives), shown as Printable.
func CheckName(kind, name string) error {
	ok := name != "" && len(name) <= MaxName
	for i := 0; ok && i < len(name); i++ {
		switch ch := name[i]; {
		case 'a' <= ch && ch <= 'z', '0' <= ch && ch <= '9':
		case ch == '-' || ch == '.':
			ok = i > 0 && i < len(name)-1
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%w: the cluster named a %s \"%s\", which is no DNS-1123 name of at most %d bytes, as Kubernetes gives", errdefs.ErrUnavailable, kind, Printable(name), MaxName)
	}
	return nil
}

// NameRef names an object in the same namespace.
type NameRef struct {
	Name string `json:"name"`
}

// Condition is one of an object's status conditions.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// SandboxClaim is agent-sandbox's claim of a sandbox from a warm pool.
type SandboxClaim struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       struct {
		WarmPoolRef NameRef `json:"warmPoolRef"`
	} `json:"spec"`
	Status struct {
		Conditions []Condition `json:"conditions,omitempty"`
		// Sandbox names the Sandbox bound to the claim, and so its pod.
		Sandbox NameRef `json:"sandbox,omitzero"`
	} `json:"status,omitzero"`
}

// Ready is the claim's Ready condition, if it has one.
func (c *SandboxClaim) Ready() (Condition, bool) {
	for _, cd := range c.Status.Conditions {
		if cd.Type == "Ready" {
			return cd, true
		}
	}
	return Condition{}, false
}

// SandboxWarmPool is agent-sandbox's pool of ready sandboxes.
type SandboxWarmPool struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		Replicas           *int32  `json:"replicas"`
		SandboxTemplateRef NameRef `json:"sandboxTemplateRef"`
	} `json:"spec"`
	Status struct {
		ReadyReplicas int32 `json:"readyReplicas"`
	} `json:"status"`
}

// Pod is the part of a pod the client uses.
type Pod struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		NodeName              string `json:"nodeName"`
		RuntimeClassName      string `json:"runtimeClassName"`
		ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds"`
		Containers            []struct {
			Name  string `json:"name"`
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase             string      `json:"phase"`
		Reason            string      `json:"reason"`
		Message           string      `json:"message"`
		StartTime         *time.Time  `json:"startTime"`
		Conditions        []Condition `json:"conditions"`
		ContainerStatuses []struct {
			Name  string `json:"name"`
			State struct {
				Terminated *struct {
					ExitCode   int        `json:"exitCode"`
					Reason     string     `json:"reason"`
					Message    string     `json:"message"`
					StartedAt  *time.Time `json:"startedAt"`
					FinishedAt *time.Time `json:"finishedAt"`
				} `json:"terminated"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// Condition returns p's condition of type t, or nil.
func (p *Pod) Condition(t string) *Condition { return find(p.Status.Conditions, t) }

// Node is the part of a node the client uses.
type Node struct {
	Metadata ObjectMeta `json:"metadata"`
	Status   struct {
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

// Ready says whether the node's Ready condition is True: false once the
// node controller has found its lease expired (Unknown), or the node said
// it is not (False).
func (n *Node) Ready() bool {
	c := find(n.Status.Conditions, "Ready")
	return c != nil && c.Status == "True"
}

func find(cs []Condition, t string) *Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// Node reads node name.
func (c *Client) Node(ctx context.Context, name string) (*Node, error) {
	out := &Node{}
	return out, c.do(ctx, "GET", "/api/v1/nodes/"+url.PathEscape(name), nil, nil, out)
}

func claimPath(ns, name string) string {
	p := "/apis/" + extensions + "/namespaces/" + url.PathEscape(ns) + "/sandboxclaims"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// CreateClaim creates a SandboxClaim named name on warm pool pool.
func (c *Client) CreateClaim(ctx context.Context, ns, name, pool string, labels map[string]string) (*SandboxClaim, error) {
	in := &SandboxClaim{APIVersion: extensions, Kind: "SandboxClaim", Metadata: ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
	in.Spec.WarmPoolRef.Name = pool
	out := &SandboxClaim{}
	return out, c.do(ctx, "POST", claimPath(ns, ""), nil, in, out)
}

// Claim reads SandboxClaim ns/name.
func (c *Client) Claim(ctx context.Context, ns, name string) (*SandboxClaim, error) {
	out := &SandboxClaim{}
	return out, c.do(ctx, "GET", claimPath(ns, name), nil, nil, out)
}

// DeleteClaim deletes SandboxClaim ns/name and, in the background, what
// it owns (its Sandbox and pod). Deleting one that is gone succeeds.
func (c *Client) DeleteClaim(ctx context.Context, ns, name string) error {
	body := map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
	err := c.do(ctx, "DELETE", claimPath(ns, name), nil, body, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

// WarmPool reads SandboxWarmPool ns/name.
func (c *Client) WarmPool(ctx context.Context, ns, name string) (*SandboxWarmPool, error) {
	out := &SandboxWarmPool{}
	return out, c.do(ctx, "GET", "/apis/"+extensions+"/namespaces/"+url.PathEscape(ns)+"/sandboxwarmpools/"+url.PathEscape(name), nil, nil, out)
}

// Pod reads pod ns/name.
func (c *Client) Pod(ctx context.Context, ns, name string) (*Pod, error) {
	out := &Pod{}
	return out, c.do(ctx, "GET", "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil, nil, out)
}

// SandboxTemplatePod reads SandboxTemplate ns/name's pod template
// (spec.podTemplate: metadata and spec), as the API server has it.
func (c *Client) SandboxTemplatePod(ctx context.Context, ns, name string) (map[string]any, error) {
	var t struct {
		Spec struct {
			PodTemplate map[string]any `json:"podTemplate"`
		} `json:"spec"`
	}
	err := c.do(ctx, "GET", "/apis/"+extensions+"/namespaces/"+url.PathEscape(ns)+"/sandboxtemplates/"+url.PathEscape(name), nil, nil, &t)
	return t.Spec.PodTemplate, err
}

// CreatePod creates pod (a Pod object as JSON-shaped values) in ns.
func (c *Client) CreatePod(ctx context.Context, ns string, pod map[string]any) (*Pod, error) {
	out := &Pod{}
	return out, c.do(ctx, "POST", "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods", nil, pod, out)
}

// DeletePod deletes pod ns/name at once; one already gone succeeds.
func (c *Client) DeletePod(ctx context.Context, ns, name string) error {
	err := c.do(ctx, "DELETE", "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil,
		map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

// PodLog reads container's log in pod ns/name, up to limit bytes (its
// own cap, not maxBody's); truncated says that the log went on past them.
func (c *Client) PodLog(ctx context.Context, ns, name, container string, limit int64) (log []byte, truncated bool, err error) {
	// One byte more than kept tells a log of exactly limit bytes from a
	// longer one.
	q := url.Values{"container": {container}, "limitBytes": {strconv.FormatInt(limit+1, 10)}}
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name) + "/log"
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.send(ctx, "GET", path, q, nil)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	b, err := readAll(ctx, resp.Body, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("reading the log of pod %s/%s: %w", ns, name, c.failed(ctx, "GET", path, err))
	}
	if int64(len(b)) > limit {
		return b[:limit], true, nil
	}
	return b, false, nil
}

// PodSpec reads pod ns/name's spec whole, as the API server has it, for
// a check of every field (see claim.CheckPodSpec).
func (c *Client) PodSpec(ctx context.Context, ns, name string) (map[string]any, error) {
	var p struct {
		Spec map[string]any `json:"spec"`
	}
	err := c.do(ctx, "GET", "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil, nil, &p)
	return p.Spec, err
}

// OwnerReference names an object's owner.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"`
}

// NetworkPolicy is the part of a NetworkPolicy the client uses.
type NetworkPolicy struct {
	Metadata struct {
		Name            string           `json:"name"`
		OwnerReferences []OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		PodSelector struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []any             `json:"matchExpressions"`
		} `json:"podSelector"`
		PolicyTypes []string `json:"policyTypes"`
		Ingress     []any    `json:"ingress"`
		Egress      []any    `json:"egress"`
	} `json:"spec"`
}

// NetworkPolicy reads NetworkPolicy ns/name.
func (c *Client) NetworkPolicy(ctx context.Context, ns, name string) (*NetworkPolicy, error) {
	out := &NetworkPolicy{}
	return out, c.do(ctx, "GET", "/apis/networking.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/networkpolicies/"+url.PathEscape(name), nil, nil, out)
}
