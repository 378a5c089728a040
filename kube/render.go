// Package kube renders airlock's templates as Kubernetes objects for
// kubernetes-sigs/agent-sandbox: a RuntimeClass, a SandboxTemplate whose
// pod carries the template's policy, and a SandboxWarmPool. The objects
// are airlock's own minimal types, encoded as the API reads them; the
// API server's validation (kubectl apply --dry-run=server) is their test.
package kube

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/units"
)

// Labels, annotations and the taint airlock puts on what it renders and
// on its nodes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelTemplate  = "airlock.dev/template"
	// TaintSandbox is the taint on airlock nodes: only sandbox pods,
	// which tolerate it, are scheduled there.
	TaintSandbox = "airlock.dev/sandbox"
	// AnnotationPrefix starts the annotations holding what Kubernetes
	// cannot express, for airlock nodes to enforce.
	AnnotationPrefix = "airlock.dev/"
)

// Options shape a render.
type Options struct {
	// Namespace of the SandboxTemplate and SandboxWarmPool.
	Namespace string
	// Name of the SandboxTemplate and SandboxWarmPool; "" is the
	// template's.
	Name string
	// Warm, when above zero, adds a SandboxWarmPool of that many.
	Warm int
	// Image replaces the template's image reference, for a cluster that
	// pulls: a registry reference pinned by its manifest digest.
	Image string
	// TTL bounds each sandbox's pod (activeDeadlineSeconds); 0 is
	// runner.DefaultTTL.
	TTL time.Duration
	// Workspace sizes /home/user; 0 is runner.DefaultWorkspaceSize.
	Workspace units.Bytes
	// RuntimeClass and Handler name the RuntimeClass; "" takes the
	// isolation's (gvisor/runsc, runc/runc).
	RuntimeClass, Handler string
	// Command is the container's long-running process; nil is
	// DefaultCommand.
	Command []string
}

// extensions is agent-sandbox's API group and version for templates,
// warm pools and claims.
const extensions = "extensions.agents.x-k8s.io/v1beta1"

// DefaultCommand keeps a sandbox's container alive for its execs.
var DefaultCommand = []string{"sleep", "infinity"}

// dnsName is what Kubernetes takes as an object name here: lowercase
// letters, digits, '-' and '.', starting and ending with a letter or digit.
var dnsName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// Render writes t as YAML documents: a header of what Kubernetes cannot
// express, the RuntimeClass, the SandboxTemplate and, with o.Warm, the
// SandboxWarmPool. The network is always denied both ways: an omitted
// networkPolicy would let agent-sandbox allow public egress.
func Render(t *templates.Template, o Options) ([]byte, error) {
	if t.Egress.On() {
		// The pods would have no network at all, not the proxy they ask
		// for: said, never rendered as something else.
		return nil, fmt.Errorf("%w: template %q has egress (allow_host, credential), which its rendering cannot express: its pods would have no network; render a template without it", errdefs.ErrNotImplemented, t.Name)
	}
	if err := o.fill(t); err != nil {
		return nil, err
	}
	sum, err := profileSHA(t)
	if err != nil {
		return nil, err
	}
	uid, gid := int64(isolation.Nobody), int64(isolation.Nobody)
	l := t.Limits
	storage := o.Workspace + 64<<20 // the workspace, and the container's logs
	res := map[string]string{
		"cpu":               fmt.Sprintf("%dm", l.CPUs),
		"memory":            strconv.FormatInt(int64(l.Memory), 10),
		"ephemeral-storage": strconv.FormatInt(int64(storage), 10),
	}
	profile := &seccompProfile{Type: "Localhost", LocalhostProfile: "airlock/" + sum + ".json"}
	id := identity{RunAsNonRoot: true, RunAsUser: uid, RunAsGroup: gid, SeccompProfile: profile}
	env := []envVar{}
	for _, kv := range t.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, envVar{Name: k, Value: v})
	}
	workdir := runner.WorkspaceDir
	if t.Workdir != "" {
		workdir = t.Workdir
	}
	pod := podTemplate{
		Metadata: podMeta{Labels: o.labels(), Annotations: annotations(t)},
		Spec: podSpec{
			RuntimeClassName:             o.RuntimeClass,
			AutomountServiceAccountToken: false,
			EnableServiceLinks:           false,
			RestartPolicy:                "Never",
			ActiveDeadlineSeconds:        int64(o.TTL / time.Second),
			// An airlock node ends a deleted pod's sandbox at once; the
			// API server's wait for the node's word is this long, not the
			// default 30 s that every sandbox rm would sit through.
			TerminationGracePeriodSeconds: 1,
			SecurityContext:               id,
			Tolerations:                   []toleration{{Key: TaintSandbox, Operator: "Exists", Effect: "NoSchedule"}},
			Containers: []container{{
				Name: "sandbox", Image: o.Image, Command: o.Command, Env: env, WorkingDir: workdir,
				Resources:       resources{Requests: res, Limits: res},
				SecurityContext: containerSecurity{identity: id, ReadOnlyRootFilesystem: true, Capabilities: capabilities{Drop: []string{"ALL"}}},
				VolumeMounts:    []volumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "workspace", MountPath: runner.WorkspaceDir}},
			}},
			Volumes: []volume{
				{Name: "tmp", EmptyDir: emptyDir{Medium: "Memory", SizeLimit: strconv.FormatInt(int64(l.Tmp), 10)}},
				{Name: "workspace", EmptyDir: emptyDir{SizeLimit: strconv.FormatInt(int64(o.Workspace), 10)}},
			},
		},
	}
	meta := objectMeta{Name: o.Name, Namespace: o.Namespace, Labels: o.labels(), Annotations: map[string]string{AnnotationPrefix + "template-version": t.Version()}}
	docs := []any{
		runtimeClass{head: head{"node.k8s.io/v1", "RuntimeClass", objectMeta{Name: o.RuntimeClass, Labels: map[string]string{LabelManagedBy: "airlock"}}}, Handler: o.Handler},
		sandboxTemplate{head: head{extensions, "SandboxTemplate", meta}, Spec: templateSpec{
			PodTemplate:             pod,
			NetworkPolicyManagement: "Managed",
			NetworkPolicy:           &networkPolicy{Ingress: []struct{}{}, Egress: []struct{}{}},
			EnvVarsInjection:        "Disallowed",
			VolumeClaimTemplates:    "Disallowed",
		}},
	}
	if o.Warm > 0 {
		replicas := int32(o.Warm)
		docs = append(docs, warmPool{head: head{extensions, "SandboxWarmPool", meta},
			Spec: warmPoolSpec{Replicas: &replicas, TemplateRef: nameRef{Name: o.Name}}})
	}
	var b bytes.Buffer
	header(&b, t, o, profile.LocalhostProfile)
	for _, d := range docs {
		y, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding %T: %v", errdefs.ErrInternal, d, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

// fill checks o against t and fills in its defaults.
func (o *Options) fill(t *templates.Template) error {
	if o.Name == "" {
		o.Name = t.Name
	}
	if !dnsName.MatchString(o.Name) {
		return fmt.Errorf("%w: template name %q is not a Kubernetes object name (lowercase letters, digits, '-' and '.', ending with a letter or digit): give one with --name", errdefs.ErrInvalidArgument, o.Name)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if !dnsName.MatchString(o.Namespace) || strings.Contains(o.Namespace, ".") {
		return fmt.Errorf("%w: namespace %q: use lowercase letters, digits and '-', starting and ending with a letter or digit", errdefs.ErrInvalidArgument, o.Namespace)
	}
	if o.Warm < 0 || o.Warm > 1000 {
		return fmt.Errorf("%w: --warm %d: give a number of sandboxes from 0 to 1000", errdefs.ErrInvalidArgument, o.Warm)
	}
	if o.Image == "" {
		o.Image = t.Image
	}
	if _, digest, ok := strings.Cut(o.Image, "@sha256:"); !ok || len(digest) != 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: image %q is not pinned by digest: give NAME@sha256:<64 hex digits>", errdefs.ErrInvalidArgument, o.Image)
	}
	if o.TTL == 0 {
		o.TTL = runner.DefaultTTL
	}
	if o.TTL < time.Second {
		return fmt.Errorf("%w: --ttl %v: give at least 1s", errdefs.ErrInvalidArgument, o.TTL)
	}
	if o.Workspace == 0 {
		o.Workspace = runner.DefaultWorkspaceSize
	}
	def := map[isolation.Mode][2]string{isolation.GVisor: {"gvisor", "runsc"}, isolation.Seccomp: {"runc", "runc"}}[t.Isolation]
	if def[0] == "" {
		return fmt.Errorf("%w: template %q has isolation %q, which has no Kubernetes runtime class", errdefs.ErrInvalidArgument, t.Name, t.Isolation)
	}
	if o.RuntimeClass == "" {
		o.RuntimeClass = def[0]
	}
	if o.Handler == "" {
		o.Handler = def[1]
	}
	for _, n := range []string{o.RuntimeClass, o.Handler} {
		if !dnsName.MatchString(n) || strings.Contains(n, ".") {
			return fmt.Errorf("%w: runtime class or handler %q: use lowercase letters, digits and '-'", errdefs.ErrInvalidArgument, n)
		}
	}
	if o.Command == nil {
		o.Command = DefaultCommand
	}
	return nil
}

func (o *Options) labels() map[string]string {
	return map[string]string{LabelManagedBy: "airlock", LabelTemplate: o.Name}
}

// annotations carry the limits Kubernetes has no field for, for airlock
// nodes to enforce; other nodes ignore them.
func annotations(t *templates.Template) map[string]string {
	l := t.Limits
	return map[string]string{
		AnnotationPrefix + "template-version": t.Version(),
		AnnotationPrefix + "isolation":        string(t.Isolation),
		AnnotationPrefix + "timeout":          l.Timeout.String(),
		AnnotationPrefix + "pids":             strconv.FormatInt(l.Pids, 10),
		AnnotationPrefix + "output-limit":     strconv.FormatInt(int64(l.Output), 10),
		AnnotationPrefix + "file-size":        strconv.FormatInt(int64(l.FileSize), 10),
		AnnotationPrefix + "open-files":       strconv.FormatInt(l.OpenFiles, 10),
	}
}

// header names, as YAML comments, what the objects cannot hold.
func header(b *bytes.Buffer, t *templates.Template, o Options, profile string) {
	l := t.Limits
	lines := []string{
		fmt.Sprintf("airlock template %q (version %s), rendered for kubernetes-sigs/agent-sandbox.", t.Name, t.Version()[:12]),
		"The network is denied both ways (an explicit empty networkPolicy): agent-sandbox",
		"would allow public egress if it were omitted.",
		"Kubernetes has no field for these; airlock nodes enforce them from the pod's",
		"airlock.dev/ annotations, other nodes do not:",
		fmt.Sprintf("  - output caps (%v per stream), the exec timeout (%v), the process limit (%d,", l.Output, l.Timeout, l.Pids),
		"    only as the node's podPidsLimit elsewhere), RLIMIT_FSIZE and RLIMIT_NOFILE,",
		"    and RLIMIT_CORE, MEMLOCK, NICE, RTPRIO and RTTIME pinned as on one machine;",
		"  - artifact scanning of what leaves the sandbox, signed receipts and the audit log.",
		fmt.Sprintf("Every node needs the seccomp profile at <kubelet root>/seccomp/%s:", profile),
		"  " + profileHint(t),
	}
	if !t.Output.Disabled {
		// An airlock node mounts only /tmp and the workspace, and nothing
		// on a cluster collects or scans an output directory.
		lines = append(lines, fmt.Sprintf("The template's output directory %s is not rendered: a pod has none (its root is", t.Output.Dir),
			"read-only); write to "+runner.WorkspaceDir+" or /tmp, and copy files out with `airlock cp`.")
	}
	if o.Image == t.Image {
		lines = append(lines, "The image is airlock's reference (its config digest): airlock nodes hold it;",
			"a cluster that pulls needs --image REGISTRY/NAME@sha256:<manifest digest>.")
	}
	for _, s := range lines {
		b.WriteString("# " + s + "\n")
	}
}

// profileSHA is the sha256 of t's seccomp profile: its own, or airlock's
// default.
func profileSHA(t *templates.Template) (string, error) {
	if t.SeccompSHA256 != "" {
		return t.SeccompSHA256, nil
	}
	p, err := seccomp.Load("default")
	if err != nil {
		return "", err
	}
	return p.SHA256(), nil
}

func profileHint(t *templates.Template) string {
	if p := t.ProfilePath(); p != "" {
		return "airlock seccomp export " + p
	}
	return "airlock seccomp export default"
}

// The objects' shapes: only the fields airlock sets, as the API names them.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// head is what every object starts with.
type head struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
}

type runtimeClass struct {
	head
	Handler string `json:"handler"`
}

type sandboxTemplate struct {
	head
	Spec templateSpec `json:"spec"`
}

type templateSpec struct {
	PodTemplate             podTemplate    `json:"podTemplate"`
	NetworkPolicyManagement string         `json:"networkPolicyManagement"`
	NetworkPolicy           *networkPolicy `json:"networkPolicy"`
	EnvVarsInjection        string         `json:"envVarsInjectionPolicy"`
	VolumeClaimTemplates    string         `json:"volumeClaimTemplatesPolicy"`
}

// networkPolicy's empty lists deny all: they are written, never omitted.
type networkPolicy struct {
	Ingress []struct{} `json:"ingress"`
	Egress  []struct{} `json:"egress"`
}

type warmPool struct {
	head
	Spec warmPoolSpec `json:"spec"`
}

type warmPoolSpec struct {
	Replicas    *int32  `json:"replicas"`
	TemplateRef nameRef `json:"sandboxTemplateRef"`
}

type nameRef struct {
	Name string `json:"name"`
}

type podTemplate struct {
	Metadata podMeta `json:"metadata"`
	Spec     podSpec `json:"spec"`
}

type podMeta struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// podSpec writes its false booleans: the host namespaces, the service
// account token and service links are off by airlock's word, not by a
// default that could change.
type podSpec struct {
	RuntimeClassName              string       `json:"runtimeClassName"`
	AutomountServiceAccountToken  bool         `json:"automountServiceAccountToken"`
	EnableServiceLinks            bool         `json:"enableServiceLinks"`
	HostNetwork                   bool         `json:"hostNetwork"`
	HostPID                       bool         `json:"hostPID"`
	HostIPC                       bool         `json:"hostIPC"`
	RestartPolicy                 string       `json:"restartPolicy"`
	ActiveDeadlineSeconds         int64        `json:"activeDeadlineSeconds"`
	TerminationGracePeriodSeconds int64        `json:"terminationGracePeriodSeconds"`
	SecurityContext               identity     `json:"securityContext"`
	Tolerations                   []toleration `json:"tolerations"`
	Containers                    []container  `json:"containers"`
	Volumes                       []volume     `json:"volumes"`
}

type seccompProfile struct {
	Type             string `json:"type"`
	LocalhostProfile string `json:"localhostProfile,omitempty"`
}

// identity is who a pod's processes run as, and their seccomp profile.
type identity struct {
	RunAsNonRoot   bool            `json:"runAsNonRoot"`
	RunAsUser      int64           `json:"runAsUser"`
	RunAsGroup     int64           `json:"runAsGroup"`
	SeccompProfile *seccompProfile `json:"seccompProfile"`
}

type toleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Effect   string `json:"effect"`
}

type container struct {
	Name            string            `json:"name"`
	Image           string            `json:"image"`
	Command         []string          `json:"command"`
	Env             []envVar          `json:"env,omitempty"`
	WorkingDir      string            `json:"workingDir"`
	Resources       resources         `json:"resources"`
	SecurityContext containerSecurity `json:"securityContext"`
	VolumeMounts    []volumeMount     `json:"volumeMounts"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

type containerSecurity struct {
	identity
	Privileged               bool         `json:"privileged"`
	AllowPrivilegeEscalation bool         `json:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   bool         `json:"readOnlyRootFilesystem"`
	Capabilities             capabilities `json:"capabilities"`
}

type capabilities struct {
	Drop []string `json:"drop"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

type volume struct {
	Name     string   `json:"name"`
	EmptyDir emptyDir `json:"emptyDir"`
}

type emptyDir struct {
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"sizeLimit"`
}
