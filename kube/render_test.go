package kube

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"

	"github.com/containerd/errdefs"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// docs splits a render into its objects.
func docs(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range bytes.Split(b, []byte("\n---\n"))[1:] {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatalf("a rendered document does not parse: %v\n%s", err, d)
		}
		out = append(out, m)
	}
	return out
}

// at follows a path of map keys and list indexes.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func TestRender(t *testing.T) {
	spec := runner.Spec{Env: []string{"A=1=2"}, Policy: isolation.Policy{Limits: isolation.Limits{Memory: 256 << 20, CPUs: 500}}}
	tp := fuzztest.PutTemplate(t, t.TempDir(), "py", spec, "oci")
	for _, warm := range []int{0, 3} {
		b, err := Render(tp, Options{Warm: warm, Namespace: "evals", TTL: 30 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		objs := docs(t, b)
		if want := map[int]int{0: 2, 3: 3}[warm]; len(objs) != want {
			t.Fatalf("--warm %d: %d objects, want %d", warm, len(objs), want)
		}
		rc, st := objs[0], objs[1]
		if at(rc, "kind") != "RuntimeClass" || at(rc, "metadata", "name") != "gvisor" || at(rc, "handler") != "runsc" {
			t.Errorf("RuntimeClass: %v", rc)
		}
		if at(st, "kind") != "SandboxTemplate" || at(st, "metadata", "namespace") != "evals" || at(st, "metadata", "name") != "py" {
			t.Errorf("SandboxTemplate metadata: %v", at(st, "metadata"))
		}
		// The network is denied both ways, warm pool or not.
		np, ok := at(st, "spec", "networkPolicy").(map[string]any)
		if !ok || len(np) != 2 || at(np, "ingress") == nil || at(np, "egress") == nil || len(at(np, "ingress").([]any))+len(at(np, "egress").([]any)) != 0 {
			t.Errorf("--warm %d: networkPolicy %v, want empty ingress and egress written out", warm, at(st, "spec", "networkPolicy"))
		}
		pod := at(st, "spec", "podTemplate", "spec")
		c := at(pod, "containers", 0)
		for _, want := range []struct {
			path []any
			v    any
		}{
			{[]any{"runtimeClassName"}, "gvisor"},
			{[]any{"automountServiceAccountToken"}, false},
			{[]any{"enableServiceLinks"}, false},
			{[]any{"hostNetwork"}, false},
			{[]any{"hostPID"}, false},
			{[]any{"hostIPC"}, false},
			{[]any{"activeDeadlineSeconds"}, float64(1800)},
			{[]any{"terminationGracePeriodSeconds"}, float64(1)},
			{[]any{"securityContext", "runAsNonRoot"}, true},
			{[]any{"securityContext", "runAsUser"}, float64(65534)},
			{[]any{"securityContext", "seccompProfile", "type"}, "Localhost"},
			{[]any{"containers", 0, "image"}, tp.Image},
			{[]any{"containers", 0, "securityContext", "readOnlyRootFilesystem"}, true},
			{[]any{"containers", 0, "securityContext", "allowPrivilegeEscalation"}, false},
			{[]any{"containers", 0, "securityContext", "privileged"}, false},
			{[]any{"containers", 0, "securityContext", "capabilities", "drop", 0}, "ALL"},
			{[]any{"containers", 0, "resources", "limits", "cpu"}, "500m"},
			{[]any{"containers", 0, "resources", "limits", "memory"}, "268435456"},
			{[]any{"containers", 0, "env", 0, "value"}, "1=2"},
			{[]any{"volumes", 0, "emptyDir", "medium"}, "Memory"},
			{[]any{"volumes", 1, "emptyDir", "sizeLimit"}, "1073741824"},
		} {
			if got := at(pod, want.path...); got != want.v {
				t.Errorf("--warm %d: pod %v = %#v, want %#v", warm, want.path, got, want.v)
			}
		}
		for _, r := range []string{"cpu", "memory", "ephemeral-storage"} {
			if at(c, "resources", "limits", r) != at(c, "resources", "requests", r) || at(c, "resources", "limits", r) == nil {
				t.Errorf("--warm %d: %s limit %v, request %v: want equal", warm, r, at(c, "resources", "limits", r), at(c, "resources", "requests", r))
			}
		}
		if p, _ := at(pod, "securityContext", "seccompProfile", "localhostProfile").(string); !strings.HasPrefix(p, "airlock/") || len(p) != len("airlock/")+64+len(".json") {
			t.Errorf("localhost profile %q", p)
		}
		ann := at(st, "spec", "podTemplate", "metadata", "annotations")
		if at(ann, "airlock.dev/output-limit") != "1048576" || at(ann, "airlock.dev/pids") != "256" || at(ann, "airlock.dev/template-version") != tp.Version() {
			t.Errorf("annotations %v", ann)
		}
		if warm > 0 {
			wp := objs[2]
			if at(wp, "kind") != "SandboxWarmPool" || at(wp, "spec", "replicas") != float64(warm) || at(wp, "spec", "sandboxTemplateRef", "name") != "py" {
				t.Errorf("SandboxWarmPool %v", wp)
			}
		}
		if !strings.Contains(string(b), "# ") || !strings.Contains(string(b), "output caps") {
			t.Errorf("no header naming what Kubernetes cannot hold:\n%s", b)
		}
	}
}

func TestRenderRefuses(t *testing.T) {
	root := t.TempDir()
	tp := fuzztest.PutTemplate(t, root, "py", runner.Spec{}, "oci")
	under := fuzztest.PutTemplate(t, root, "my_py", runner.Spec{}, "oci")
	for _, c := range []struct {
		name string
		o    Options
		says string
	}{
		{"a name Kubernetes refuses", Options{}, "--name"},
		{"a tag", Options{Image: "python:3.12"}, "pinned by digest"},
		{"a short digest", Options{Image: "python@sha256:abc"}, "pinned by digest"},
		{"a bad namespace", Options{Namespace: "a.b"}, "namespace"},
		{"a negative pool", Options{Warm: -1}, "--warm"},
		{"a TTL under a second", Options{TTL: time.Millisecond}, "--ttl"},
		{"a bad runtime class", Options{RuntimeClass: "G"}, "runtime class"},
	} {
		tt := tp
		if c.name == "a name Kubernetes refuses" {
			tt = under
		}
		if _, err := Render(tt, c.o); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want invalid input saying %q", c.name, err, c.says)
		}
	}
	if b, err := Render(under, Options{Name: "my-py"}); err != nil || !strings.Contains(string(b), "name: my-py") {
		t.Errorf("--name my-py: %v", err)
	}
	allow, err := egress.ParseAllowlist([]string{"pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	net := fuzztest.PutTemplate(t, root, "net", runner.Spec{Policy: isolation.Policy{Egress: isolation.Egress{Allow: allow}}}, "oci")
	if _, err := Render(net, Options{}); !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "allow_host") {
		t.Errorf("a template with egress: %v; want not implemented, naming allow_host", err)
	}
	seccomp := fuzztest.PutTemplate(t, root, "plain", runner.Spec{Policy: isolation.Policy{Isolation: isolation.Seccomp}}, "oci")
	if b, err := Render(seccomp, Options{}); err != nil || !strings.Contains(string(b), "runtimeClassName: runc") || !strings.Contains(string(b), "handler: runc") {
		t.Errorf("the seccomp mode: %v\n%s", err, b)
	}
}

// A template's output directory has no place on a cluster (an airlock node
// mounts only /tmp and the workspace, and nothing collects the directory):
// the render says so in its header, never dropping it unsaid.
func TestRenderNamesTheOutputDirectoryItLeavesOut(t *testing.T) {
	tp := fuzztest.PutTemplate(t, t.TempDir(), "py", runner.Spec{}, "oci")
	if tp.Output.Disabled || tp.Output.Dir == "" {
		t.Fatalf("the default template has no output directory: %+v", tp.Output)
	}
	b, err := Render(tp, Options{})
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(b), "\n---\n")
	if !strings.Contains(head, "# The template's output directory "+tp.Output.Dir+" is not rendered") {
		t.Errorf("the header does not name the output directory %s:\n%s", tp.Output.Dir, head)
	}
	if strings.Contains(string(b), "mountPath: "+tp.Output.Dir) {
		t.Errorf("the output directory is mounted, which an airlock node refuses:\n%s", b)
	}
	none := fuzztest.PutTemplate(t, t.TempDir(), "bare", runner.Spec{Output: runner.Output{Disabled: true}}, "oci")
	if b, err := Render(none, Options{}); err != nil || strings.Contains(string(b), "output directory") {
		t.Errorf("a template without an output directory: %v\n%s", err, b)
	}
}
