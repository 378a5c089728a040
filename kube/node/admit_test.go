package node

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/kube"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
)

// rendered is the pod of a template as airlock kube render writes it,
// with a UID as the API server gives one.
func rendered(t *testing.T) (*corev1.Pod, string) {
	t.Helper()
	spec := runner.Spec{Env: []string{"A=1"}, Policy: isolation.Policy{Limits: isolation.Limits{Memory: 256 << 20, CPUs: 500, Timeout: 20 * time.Second}}}
	tp := fuzztest.PutTemplate(t, t.TempDir(), "py", spec, "oci")
	b, err := kube.Render(tp, kube.Options{TTL: 10 * time.Minute, Workspace: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Kind string
		Spec struct {
			PodTemplate corev1.PodTemplateSpec `json:"podTemplate"`
		}
	}
	for _, d := range bytes.Split(b, []byte("\n---\n"))[1:] {
		if err := yaml.Unmarshal(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Kind == "SandboxTemplate" {
			break
		}
	}
	p, err := seccomp.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: st.Spec.PodTemplate.ObjectMeta, Spec: st.Spec.PodTemplate.Spec}
	pod.UID = "6f1c2a9e-3b7d-4c8e-9a01-2d3e4f5a6b7c"
	return pod, p.SHA256()
}

// TestAdmitRendered: the pod airlock kube render writes is admitted with
// the template's policy, the limits Kubernetes cannot hold read back from
// its annotations.
func TestAdmitRendered(t *testing.T) {
	pod, profile := rendered(t)
	pod.Name, pod.Namespace, pod.UID = "py-abc", "evals", "uid-1"
	w, err := Admit(pod, profile)
	if err != nil {
		t.Fatal(err)
	}
	l := w.Sandbox.Policy.Limits
	switch {
	case w.Sandbox.Policy.Isolation != isolation.GVisor:
		t.Errorf("isolation %s", w.Sandbox.Policy.Isolation)
	case l.Memory != 256<<20 || l.CPUs != 500:
		t.Errorf("memory %v, cpus %v", l.Memory, l.CPUs)
	case w.ExecTimeout != 20*time.Second || l.Timeout != 10*time.Minute || w.Sandbox.TTL != 10*time.Minute:
		t.Errorf("exec timeout %v, policy timeout %v, ttl %v", w.ExecTimeout, l.Timeout, w.Sandbox.TTL)
	case w.Sandbox.WorkspaceSize != 64<<20 || l.Tmp == 0 || l.Pids == 0 || l.OpenFiles == 0 || l.Output == 0:
		t.Errorf("workspace %v, limits %+v", w.Sandbox.WorkspaceSize, l)
	case strings.Join(w.Argv, " ") != "sleep infinity" || strings.Join(w.Sandbox.Env, ",") != "A=1":
		t.Errorf("argv %v, env %v", w.Argv, w.Sandbox.Env)
	case w.Sandbox.Labels["k8s-uid"] != "uid-1" || w.Sandbox.Labels["k8s-pod"] != "py-abc":
		t.Errorf("labels %v", w.Sandbox.Labels)
	case w.JobID != "" || w.ExpectedStdout != nil:
		t.Errorf("a pod of no batch has job %q, expected stdout %v", w.JobID, w.ExpectedStdout)
	}

	// A batch job's pod: its id and expected stdout reach the receipt.
	pod.Annotations[cluster.AnnotationJobID], pod.Annotations[cluster.AnnotationExpectedStdout] = "job-7", "42\n"
	if w, err = Admit(pod, profile); err != nil || w.JobID != "job-7" || w.ExpectedStdout == nil || *w.ExpectedStdout != "42\n" {
		t.Errorf("batch job pod: job %q, expected %v, %v", w.JobID, w.ExpectedStdout, err)
	}
}

// TestAdmitRefuses: each field the node cannot honour fails the pod, with
// a refusal naming that field.
func TestAdmitRefuses(t *testing.T) {
	c0 := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	sc := func(p *corev1.Pod) *corev1.SecurityContext { return c0(p).SecurityContext }
	for _, c := range []struct {
		field  string
		mutate func(*corev1.Pod)
	}{
		{"spec.containers[0].image", func(p *corev1.Pod) { c0(p).Image = "python:3.12" }},
		{"spec.containers[0].image", func(p *corev1.Pod) { c0(p).Image = "python@sha256:abc" }},
		{"spec.volumes[0].hostPath", func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}},
		{"spec.volumes[2].projected", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
		}},
		{"spec.containers[0].volumeMounts[0].mountPath", func(p *corev1.Pod) { c0(p).VolumeMounts[0].MountPath = "/etc" }},
		{"spec.containers[0].volumeMounts[0].subPath", func(p *corev1.Pod) { c0(p).VolumeMounts[0].SubPath = "x" }},
		{"spec.containers[0].securityContext.privileged", func(p *corev1.Pod) { sc(p).Privileged = ptr(true) }},
		{"spec.containers[0].securityContext.allowPrivilegeEscalation", func(p *corev1.Pod) { sc(p).AllowPrivilegeEscalation = ptr(true) }},
		{"spec.containers[0].securityContext.capabilities.add", func(p *corev1.Pod) { sc(p).Capabilities.Add = []corev1.Capability{"NET_ADMIN"} }},
		{"spec.containers[0].securityContext.runAsUser", func(p *corev1.Pod) { sc(p).RunAsUser = ptr(int64(0)) }},
		{"spec.securityContext.runAsGroup", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsGroup = ptr(int64(0)) }},
		{"spec.securityContext.seccompProfile.type", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined }},
		{"spec.containers[0].securityContext.seccompProfile.localhostProfile", func(p *corev1.Pod) {
			sc(p).SeccompProfile.LocalhostProfile = ptr("airlock/other.json")
		}},
		{"spec.securityContext.sysctls", func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}
		}},
		{"spec.hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"spec.hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }},
		{"spec.hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }},
		{"spec.runtimeClassName", func(p *corev1.Pod) { p.Spec.RuntimeClassName = nil }},
		{"spec.runtimeClassName", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr("kata") }},
		{"spec.restartPolicy", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyAlways }},
		{"spec.initContainers", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "i"}} }},
		{"spec.containers", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) }},
		{"spec.containers[0].command", func(p *corev1.Pod) { c0(p).Command = nil }},
		{"spec.containers[0].ports", func(p *corev1.Pod) { c0(p).Ports = []corev1.ContainerPort{{ContainerPort: 80}} }},
		{"spec.containers[0].livenessProbe", func(p *corev1.Pod) { c0(p).LivenessProbe = &corev1.Probe{} }},
		{"spec.containers[0].envFrom", func(p *corev1.Pod) { c0(p).EnvFrom = []corev1.EnvFromSource{{}} }},
		{"spec.containers[0].env[1].valueFrom", func(p *corev1.Pod) {
			c0(p).Env = append(c0(p).Env, corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}})
		}},
		{"spec.containers[0].resources", func(p *corev1.Pod) { c0(p).Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1") }},
		{"spec.containers[0].resources.limits.memory", func(p *corev1.Pod) { c0(p).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("0") }},
		{"metadata.annotations[airlock.dev/timeout]", func(p *corev1.Pod) { p.Annotations["airlock.dev/timeout"] = "soon" }},
		{"metadata.annotations[airlock.dev/pids]", func(p *corev1.Pod) { p.Annotations["airlock.dev/pids"] = "-1" }},
		{"metadata.annotations[airlock.dev/isolation]", func(p *corev1.Pod) { p.Annotations["airlock.dev/isolation"] = "seccomp" }},
		{"metadata.annotations[airlock.dev/job-id]", func(p *corev1.Pod) { p.Annotations["airlock.dev/job-id"] = "j\x1b[2J" }},
		{"metadata.annotations[airlock.dev/job-id]", func(p *corev1.Pod) { p.Annotations["airlock.dev/job-id"] = strings.Repeat("j", 257) }},
		{"metadata.annotations[airlock.dev/job-id]", func(p *corev1.Pod) { p.Annotations["airlock.dev/job-id"] = "" }},
		{"spec.activeDeadlineSeconds", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(1 << 40)) }},
		{"spec.containers[0].image", func(p *corev1.Pod) { c0(p).Image = "sha256:abc" }},
		{"spec.containers[0].image", func(p *corev1.Pod) { c0(p).Image = "python:3.12@sha256:" + strings.Repeat("a", 64) }},
		{"spec.resources", func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}
		}},
		{"spec.securityContext.appArmorProfile.type", func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("deny-write")}
		}},
		{"spec.containers[0].securityContext.appArmorProfile.type", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("deny-write")}
		}},
		{"spec.containers[0].volumeMounts[0].readOnly", func(p *corev1.Pod) { c0(p).VolumeMounts[0].ReadOnly = true }},
		{"spec.containers[0].volumeMounts[0].mountPropagation", func(p *corev1.Pod) {
			c0(p).VolumeMounts[0].MountPropagation = ptr(corev1.MountPropagationBidirectional)
		}},
		{"spec.volumes[0].emptyDir.medium", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir.Medium = corev1.StorageMediumHugePages }},
		// The medium must be the sandbox's own: /tmp (volumes[0]) is in
		// memory, the workspace (volumes[1]) on the node's disk.
		{"spec.volumes[0].emptyDir.medium", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir.Medium = corev1.StorageMediumDefault }},
		{"spec.volumes[1].emptyDir.medium", func(p *corev1.Pod) { p.Spec.Volumes[1].EmptyDir.Medium = corev1.StorageMediumMemory }},
		// The UID names the pod's log file: only a plain UID is taken.
		{"metadata.uid", func(p *corev1.Pod) { p.UID = "../../../etc/cron.d/x" }},
		{"metadata.uid", func(p *corev1.Pod) { p.UID = "a/b" }},
		{"metadata.uid", func(p *corev1.Pod) { p.UID = ".." }},
		{"metadata.uid", func(p *corev1.Pod) { p.UID = "" }},
		{"metadata.uid", func(p *corev1.Pod) { p.UID = "uid\x00" }},
		{"metadata.uid", func(p *corev1.Pod) { p.UID = types.UID(strings.Repeat("a", maxUID+1)) }},
		// Past an int64 once converted: refused, never wrapped around.
		{"spec.containers[0].resources.limits.cpu", func(p *corev1.Pod) {
			c0(p).Resources.Limits[corev1.ResourceCPU] = resource.MustParse("18446744073709552")
		}},
		{"spec.containers[0].resources.limits.memory", func(p *corev1.Pod) { c0(p).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Ei") }},
		{"spec.volumes[0].emptyDir.sizeLimit", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir.SizeLimit = ptr(resource.MustParse("64Ei")) }},
	} {
		pod, profile := rendered(t)
		c.mutate(pod)
		_, err := Admit(pod, profile)
		var r *Refusal
		if !errors.As(err, &r) || r.Field != c.field || r.Why == "" {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
}

// TestAdmitNarrowerIsTaken: what only narrows the sandbox (a writable
// root asked, runAsNonRoot false, the runtime's default profile) is
// admitted: the sandbox is at least that strict.
func TestAdmitNarrowerIsTaken(t *testing.T) {
	pod, profile := rendered(t)
	sc := pod.Spec.Containers[0].SecurityContext
	sc.ReadOnlyRootFilesystem, sc.RunAsNonRoot = ptr(false), ptr(false)
	sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	pod.Spec.Containers[0].SecurityContext.Capabilities.Drop = nil
	if _, err := Admit(pod, profile); err != nil {
		t.Fatal(err)
	}
}

// TestAdmitPlainUIDs: the UIDs an API server gives, and any other plain
// token of letters, digits and '-' up to maxUID, are admitted (the
// refused ones are TestAdmitRefuses's).
func TestAdmitPlainUIDs(t *testing.T) {
	for _, uid := range []string{"6f1c2a9e-3b7d-4c8e-9a01-2d3e4f5a6b7c", "6F1C2A9E-3B7D-4C8E-9A01-2D3E4F5A6B7C", "uid-1", "7", strings.Repeat("a", maxUID)} {
		pod, profile := rendered(t)
		pod.UID = types.UID(uid)
		if _, err := Admit(pod, profile); err != nil {
			t.Errorf("UID %q: %v", uid, err)
		}
	}
}
