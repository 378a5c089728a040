package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/kube"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// Refusal is a pod the node will not run: Field is the pod's field, as
// the API spells its path, and Why says what to give instead. The pod
// fails with it as its message; nothing of the pod is started.
type Refusal struct {
	Field, Why string
}

func (r *Refusal) Error() string { return r.Field + ": " + r.Why }

func refuse(field, format string, args ...any) *Refusal {
	return &Refusal{Field: field, Why: fmt.Sprintf(format, args...)}
}

// Work is what a pod asks of the node: the sandbox, and the program that
// is the pod's one container.
type Work struct {
	Sandbox runner.SandboxSpec
	Argv    []string
	Workdir string
	// JobID and ExpectedStdout are a batch job's (kube.AnnotationJobID,
	// kube.AnnotationExpectedStdout), for the run's receipt.
	JobID          string
	ExpectedStdout *string
	// ExecTimeout bounds each `kubectl exec`; the container's program
	// runs until the pod's deadline.
	ExecTimeout time.Duration
}

// RuntimeClasses are the runtime classes a node serves, and the isolation
// each stands for.
var RuntimeClasses = map[string]isolation.Mode{"gvisor": isolation.GVisor, "runc": isolation.Seccomp}

// Sandbox mount points: the only volumes a pod may have are emptyDirs
// mounted at these.
var mounts = map[string]bool{"/tmp": true, runner.WorkspaceDir: true}

// Admit turns pod into Work, or refuses it naming the first field the node
// cannot honour. It fails closed: every field that would loosen what
// airlock guarantees (a host namespace or volume, a privilege, a
// capability, a user other than nobody, an image not pinned by digest)
// and every one it cannot carry out (probes, ports, restarts, secrets
// read through the API) is refused, never dropped, and so is a UID that
// is not a plain Kubernetes UID (it names the pod's log file).
// defaultProfile is the sha256 of airlock's default seccomp profile, the
// only Localhost profile a node holds.
func Admit(pod *corev1.Pod, defaultProfile string) (Work, error) {
	var w Work
	if err := podUID(string(pod.UID)); err != nil {
		return w, err
	}
	s := &pod.Spec
	mode, err := runtimeClass(s.RuntimeClassName)
	if err != nil {
		return w, err
	}
	if err := podLevel(s, defaultProfile); err != nil {
		return w, err
	}
	sizes, err := volumes(s)
	if err != nil {
		return w, err
	}
	if len(s.Containers) != 1 {
		return w, refuse("spec.containers", "%d containers: an airlock node runs a pod of exactly one container", len(s.Containers))
	}
	c := &s.Containers[0]
	if err := container(c, "spec.containers[0]", defaultProfile); err != nil {
		return w, err
	}
	p := wire.Policy{Image: c.Image, Isolation: string(mode), TmpSize: sizes["/tmp"]}
	for i, e := range c.Env {
		if e.ValueFrom != nil {
			return w, refuse(fmt.Sprintf("spec.containers[0].env[%d].valueFrom", i), "an airlock node reads no secret, config map or field for a pod: give %s a value", e.Name)
		}
		p.Env = append(p.Env, e.Name+"="+e.Value)
	}
	if err := resources(c, &p); err != nil {
		return w, err
	}
	ann, err := annotations(pod.Annotations, mode, &p)
	if err != nil {
		return w, err
	}
	pol, err := p.Parse()
	if err != nil {
		return w, podField(err)
	}
	pol.Limits.OpenFiles = ann.openFiles
	pol = pol.WithDefaults()

	ttl := runner.DefaultTTL
	if d := s.ActiveDeadlineSeconds; d != nil {
		if *d > int64(30*24*time.Hour/time.Second) {
			return w, refuse("spec.activeDeadlineSeconds", "%d: give at most 30 days", *d)
		}
		ttl = time.Duration(*d) * time.Second
	}
	// The container's program is one exec that lives as long as the pod;
	// kubectl exec gets the template's timeout (ExecTimeout).
	w.ExecTimeout = pol.Limits.Timeout
	pol.Limits.Timeout = max(pol.Limits.Timeout, ttl)
	w.Sandbox = runner.SandboxSpec{
		Image: c.Image, Env: p.Env, Policy: pol, TTL: ttl, IdleTimeout: ttl,
		Labels: map[string]string{"k8s-namespace": pod.Namespace, "k8s-pod": pod.Name, "k8s-uid": string(pod.UID)},
	}
	if ws := sizes[runner.WorkspaceDir]; ws != "" {
		if w.Sandbox.WorkspaceSize, err = wire.Size("workspace_size", ws); err != nil {
			return w, podField(err)
		}
	}
	w.JobID, w.ExpectedStdout = ann.jobID, ann.expected
	w.Argv = append(append([]string{}, c.Command...), c.Args...)
	w.Workdir = c.WorkingDir
	return w, nil
}

// podFields are the pod's fields that wire.Policy's fields come from.
var podFields = map[string]string{
	"memory": "spec.containers[0].resources.limits.memory", "cpus": "spec.containers[0].resources.limits.cpu",
	"tmp_size": "spec.volumes[/tmp].emptyDir.sizeLimit", "workspace_size": "spec.volumes[" + runner.WorkspaceDir + "].emptyDir.sizeLimit",
	"timeout": annotation("timeout"), "output_limit": annotation("output-limit"), "file_size": annotation("file-size"),
	"pids": annotation("pids"), "image": "spec.containers[0].image",
}

func annotation(k string) string { return "metadata.annotations[" + kube.AnnotationPrefix + k + "]" }

// podField names the pod's field in a refusal of wire's.
func podField(err error) error {
	var we *wire.Error
	if errors.As(err, &we) && podFields[we.Field] != "" {
		return refuse(podFields[we.Field], "%s: %s", we.Value, we.Want)
	}
	return refuse("spec", "%v", err)
}

// maxUID bounds a pod's UID. The API server gives a UUID (36
// characters); the bound leaves room for another cluster's form.
const maxUID = 64

// podUID refuses a UID that is not a plain Kubernetes UID: 1 to maxUID
// letters, digits and '-'. The UID, a string from the API server, names
// the pod's log file and labels its sandbox; a separator, a dot or
// anything else could make it name another file.
func podUID(uid string) error {
	ok := uid != "" && len(uid) <= maxUID && strings.IndexFunc(uid, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-')
	}) < 0
	if !ok {
		shown := uid
		if len(shown) > maxUID {
			shown = shown[:maxUID] + "…"
		}
		return refuse("metadata.uid", "%q is not a Kubernetes UID: an airlock node takes 1 to %d letters, digits and '-' (the API server gives a UUID)", shown, maxUID)
	}
	return nil
}

func runtimeClass(name *string) (isolation.Mode, error) {
	if name == nil || *name == "" {
		return "", refuse("spec.runtimeClassName", "not set: an airlock node runs only pods of runtime class gvisor or runc (airlock kube render writes it)")
	}
	m, ok := RuntimeClasses[*name]
	if !ok {
		return "", refuse("spec.runtimeClassName", "%q is not served here: give gvisor or runc", *name)
	}
	return m, nil
}

// podLevel checks the pod's own fields.
func podLevel(s *corev1.PodSpec, profile string) error {
	for _, f := range []struct {
		on    bool
		field string
	}{
		{s.HostNetwork, "spec.hostNetwork"}, {s.HostPID, "spec.hostPID"}, {s.HostIPC, "spec.hostIPC"},
	} {
		if f.on {
			return refuse(f.field, "true: an airlock sandbox shares no namespace with its host; remove it")
		}
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		return refuse("spec.restartPolicy", "%s: an airlock node runs a pod's program once; give Never", s.RestartPolicy)
	}
	switch {
	case len(s.InitContainers) > 0:
		return refuse("spec.initContainers", "an airlock node runs one container a pod and no init containers")
	case len(s.EphemeralContainers) > 0:
		return refuse("spec.ephemeralContainers", "an airlock node runs no ephemeral containers: use kubectl exec")
	case len(s.ResourceClaims) > 0:
		return refuse("spec.resourceClaims", "an airlock node has no devices to give")
	}
	if s.Resources != nil {
		return refuse("spec.resources", "an airlock node takes a pod's limits from its one container: move them to spec.containers[0].resources.limits")
	}
	if sc := s.SecurityContext; sc != nil {
		if err := identity("spec.securityContext", sc.RunAsUser, sc.RunAsGroup, sc.SELinuxOptions, sc.SeccompProfile, profile); err != nil {
			return err
		}
		if err := appArmor("spec.securityContext", sc.AppArmorProfile); err != nil {
			return err
		}
		switch {
		case sc.FSGroup != nil && *sc.FSGroup != isolation.Nobody:
			return refuse("spec.securityContext.fsGroup", "%d: airlock sandboxes run as uid and gid %d: remove it or give %d", *sc.FSGroup, isolation.Nobody, isolation.Nobody)
		case len(sc.SupplementalGroups) > 0:
			return refuse("spec.securityContext.supplementalGroups", "airlock sandboxes run with no supplementary group: remove it")
		case len(sc.Sysctls) > 0:
			return refuse("spec.securityContext.sysctls", "an airlock node sets no sysctl for a pod: remove it")
		}
	}
	return nil
}

// identity checks a security context's user, group, SELinux and seccomp
// fields.
func identity(at string, uid, gid *int64, se *corev1.SELinuxOptions, sp *corev1.SeccompProfile, profile string) error {
	for _, f := range []struct {
		v    *int64
		name string
	}{{uid, "runAsUser"}, {gid, "runAsGroup"}} {
		if f.v != nil && *f.v != isolation.Nobody {
			return refuse(at+"."+f.name, "%d: airlock sandboxes run as uid and gid %d (nobody): remove it or give %d", *f.v, isolation.Nobody, isolation.Nobody)
		}
	}
	if se != nil {
		return refuse(at+".seLinuxOptions", "an airlock node does not apply SELinux labels: remove it")
	}
	if sp == nil {
		return nil
	}
	switch sp.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return nil
	case corev1.SeccompProfileTypeLocalhost:
		if sp.LocalhostProfile != nil && *sp.LocalhostProfile == "airlock/"+profile+".json" {
			return nil
		}
		got := "<none>"
		if sp.LocalhostProfile != nil {
			got = *sp.LocalhostProfile
		}
		return refuse(at+".seccompProfile.localhostProfile", "%q: this node holds only airlock's default profile, airlock/%s.json", got, profile)
	}
	return refuse(at+".seccompProfile.type", "%s: airlock sandboxes always run under a seccomp profile: give RuntimeDefault or Localhost", sp.Type)
}

// appArmor refuses a Localhost AppArmor profile: a node loads none. The
// runtime's default (airlock's own confinement) and Unconfined ask for
// nothing the sandbox lacks.
func appArmor(at string, ap *corev1.AppArmorProfile) error {
	if ap != nil && ap.Type != corev1.AppArmorProfileTypeRuntimeDefault && ap.Type != corev1.AppArmorProfileTypeUnconfined {
		return refuse(at+".appArmorProfile.type", "%s: an airlock node loads no AppArmor profile; its sandboxes are confined by gVisor or seccomp: give RuntimeDefault or remove it", ap.Type)
	}
	return nil
}

// volumes checks that every volume is an emptyDir mounted at /tmp or the
// workspace, and returns their size limits by mount point.
func volumes(s *corev1.PodSpec) (map[string]string, error) {
	byName := map[string]int{}
	for i, v := range s.Volumes {
		field := fmt.Sprintf("spec.volumes[%d]", i)
		if v.EmptyDir == nil {
			return nil, refuse(field+"."+sourceName(v.VolumeSource), "volume %q: an airlock node gives a pod only emptyDir volumes at /tmp and %s (a service-account token comes as a projected volume: set automountServiceAccountToken: false)", v.Name, runner.WorkspaceDir)
		}
		byName[v.Name] = i
	}
	sizes := map[string]string{}
	if len(s.Containers) != 1 {
		return sizes, nil
	}
	for i, m := range s.Containers[0].VolumeMounts {
		field := fmt.Sprintf("spec.containers[0].volumeMounts[%d]", i)
		vi, ok := byName[m.Name]
		switch {
		case !ok:
			return nil, refuse(field+".name", "%q names no volume of the pod", m.Name)
		case !mounts[m.MountPath]:
			return nil, refuse(field+".mountPath", "%q: an emptyDir mounts only at /tmp or %s", m.MountPath, runner.WorkspaceDir)
		case m.SubPath != "" || m.SubPathExpr != "":
			return nil, refuse(field+".subPath", "an airlock node mounts whole volumes: remove it")
		case m.ReadOnly || m.RecursiveReadOnly != nil && *m.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled:
			return nil, refuse(field+".readOnly", "an airlock sandbox's /tmp and %s are writable (its root is read-only): remove it", runner.WorkspaceDir)
		case m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone:
			return nil, refuse(field+".mountPropagation", "%s: an airlock sandbox shares no mount with its host: remove it", *m.MountPropagation)
		}
		// The medium must be the sandbox's own: /tmp is memory (tmpfs),
		// the workspace the node's disk.
		want := corev1.StorageMediumDefault
		if m.MountPath == "/tmp" {
			want = corev1.StorageMediumMemory
		}
		if med := s.Volumes[vi].EmptyDir.Medium; med != want {
			return nil, refuse(fmt.Sprintf("spec.volumes[%d].emptyDir.medium", vi), "%q: an airlock sandbox's /tmp is in memory and %s on the node's disk: give Memory for /tmp and nothing for %s", med, runner.WorkspaceDir, runner.WorkspaceDir)
		}
		if _, dup := sizes[m.MountPath]; dup {
			return nil, refuse(field+".mountPath", "%q is mounted twice", m.MountPath)
		}
		sizes[m.MountPath] = ""
		if q := s.Volumes[vi].EmptyDir.SizeLimit; q != nil {
			if err := inRange(fmt.Sprintf("spec.volumes[%d].emptyDir.sizeLimit", vi), *q, maxQuantity); err != nil {
				return nil, err
			}
			if q.Sign() <= 0 {
				return nil, refuse(fmt.Sprintf("spec.volumes[%d].emptyDir.sizeLimit", vi), "%s: give a positive size", q)
			}
			sizes[m.MountPath] = strconv.FormatInt(q.Value(), 10)
		}
	}
	return sizes, nil
}

// sourceName is the JSON name of a volume's source, for the refusal.
func sourceName(v corev1.VolumeSource) string {
	switch {
	case v.HostPath != nil:
		return "hostPath"
	case v.Projected != nil:
		return "projected"
	case v.Secret != nil:
		return "secret"
	case v.ConfigMap != nil:
		return "configMap"
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case v.Ephemeral != nil:
		return "ephemeral"
	case v.Image != nil:
		return "image"
	case v.CSI != nil:
		return "csi"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	}
	return "source"
}

// container checks the one container's fields.
func container(c *corev1.Container, at, profile string) error {
	if _, err := images.ParseRef(c.Image); err != nil {
		return refuse(at+".image", "%q is not pinned by digest: give NAME@sha256:<64 hex digits> of an image this node holds (airlock image ls)", c.Image)
	}
	if len(c.Command) == 0 {
		return refuse(at+".command", "not set: an airlock node runs the command the pod gives, never an image's entrypoint")
	}
	for _, f := range []struct {
		set   bool
		field string
		why   string
	}{
		{len(c.Ports) > 0, "ports", "an airlock sandbox has no network: remove the ports"},
		{c.LivenessProbe != nil, "livenessProbe", "an airlock node runs no probes: remove it"},
		{c.ReadinessProbe != nil, "readinessProbe", "an airlock node runs no probes: remove it"},
		{c.StartupProbe != nil, "startupProbe", "an airlock node runs no probes: remove it"},
		{c.Lifecycle != nil, "lifecycle", "an airlock node runs no lifecycle hooks: remove it"},
		{c.Stdin || c.TTY, "stdin", "an airlock node does not attach to a pod's program: use kubectl exec"},
		{len(c.EnvFrom) > 0, "envFrom", "an airlock node reads no secret or config map for a pod: give env values inline"},
		{len(c.VolumeDevices) > 0, "volumeDevices", "an airlock node gives a pod no device"},
		{c.RestartPolicy != nil, "restartPolicy", "an airlock node runs a pod's program once: remove it"},
	} {
		if f.set {
			return refuse(at+"."+f.field, "%s", f.why)
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		return nil
	}
	switch {
	case sc.Privileged != nil && *sc.Privileged:
		return refuse(at+".securityContext.privileged", "true: an airlock sandbox is never privileged; remove it")
	case sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation:
		return refuse(at+".securityContext.allowPrivilegeEscalation", "true: airlock sandboxes run with no_new_privs; give false")
	case sc.Capabilities != nil && len(sc.Capabilities.Add) > 0:
		return refuse(at+".securityContext.capabilities.add", "%v: an airlock sandbox has no capability; remove them", sc.Capabilities.Add)
	case sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount:
		return refuse(at+".securityContext.procMount", "%s: an airlock sandbox's /proc is always masked; remove it", *sc.ProcMount)
	}
	if err := appArmor(at+".securityContext", sc.AppArmorProfile); err != nil {
		return err
	}
	return identity(at+".securityContext", sc.RunAsUser, sc.RunAsGroup, sc.SELinuxOptions, sc.SeccompProfile, profile)
}

// resources takes the container's CPU and memory limits (requests are
// the scheduler's business; the sandbox gets its limits). An extended
// resource is refused.
func resources(c *corev1.Container, p *wire.Policy) error {
	for _, rl := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range rl {
			switch name {
			case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			default:
				return refuse("spec.containers[0].resources", "%s: an airlock node has only cpu, memory and ephemeral-storage to give", name)
			}
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		if err := inRange("spec.containers[0].resources.limits.memory", q, maxQuantity); err != nil {
			return err
		}
		p.Memory = strconv.FormatInt(q.Value(), 10)
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		if err := inRange("spec.containers[0].resources.limits.cpu", q, maxCPUs); err != nil {
			return err
		}
		p.CPUs = wire.Number(units.MilliCPUs(q.MilliValue()).String())
	}
	return nil
}

// Bounds on a pod's quantities before they are converted, so that none
// wraps around an int64; the sandbox's own checks bound them further.
const (
	maxQuantity = 1 << 60 // bytes
	maxCPUs     = 1 << 20
)

// inRange refuses a quantity over max whole units.
func inRange(field string, q resource.Quantity, max int64) error {
	if q.CmpInt64(max) > 0 {
		return refuse(field, "%s is more than any node has: give a smaller value", q.String())
	}
	return nil
}

// nodeAnnotations are what an airlock node reads of a pod's airlock.dev/
// annotations (those kube.Render writes).
type nodeAnnotations struct {
	openFiles int64
	jobID     string
	expected  *string
}

// maxJobID caps a job id from a pod's annotation, as a batch file's are
// shown: one short printable line.
const maxJobID = 256

// annotations reads the limits Kubernetes has no field for into p.
func annotations(a map[string]string, mode isolation.Mode, p *wire.Policy) (nodeAnnotations, error) {
	var n nodeAnnotations
	get := func(k string) (string, string, bool) {
		v, ok := a[kube.AnnotationPrefix+k]
		return v, annotation(k), ok
	}
	if v, field, ok := get("isolation"); ok && v != string(mode) {
		return n, refuse(field, "%q does not match the runtime class's isolation %q", v, mode)
	}
	if v, field, ok := get("job-id"); ok {
		if v == "" || len(v) > maxJobID || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return n, refuse(field, "give a job id of 1 to %d printable characters", maxJobID)
		}
		n.jobID = v
	}
	if v, _, ok := get("expected-stdout"); ok {
		n.expected = &v
	}
	p.Timeout, _, _ = get("timeout")
	p.OutputLimit, _, _ = get("output-limit")
	p.FileSize, _, _ = get("file-size")
	for _, f := range []struct {
		key string
		dst func(int64)
	}{
		{"pids", func(v int64) { p.Pids = &v }},
		{"open-files", func(v int64) { n.openFiles = v }},
	} {
		if v, field, ok := get(f.key); ok {
			i, err := strconv.ParseInt(v, 10, 64)
			if err != nil || i <= 0 {
				return n, refuse(field, "%q: give a positive whole number", v)
			}
			f.dst(i)
		}
	}
	return n, nil
}
