package claim_test

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/kube"
	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/runner"
)

// renderedPodSpec is the pod spec of a template `airlock kube render`
// writes.
func renderedPodSpec(t *testing.T) map[string]any {
	t.Helper()
	tp := fuzztest.PutTemplate(t, t.TempDir(), "py", runner.Spec{}, "oci")
	b, err := kube.Render(tp, kube.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o struct {
			Kind string
			Spec struct {
				PodTemplate struct {
					Spec map[string]any `json:"spec"`
				} `json:"podTemplate"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err == nil && o.Kind == "SandboxTemplate" {
			return o.Spec.PodTemplate.Spec
		}
	}
	t.Fatal("no SandboxTemplate rendered")
	return nil
}

// What kube.Render writes passes; each widening of it is refused, naming
// its field.
func TestCheckPodSpec(t *testing.T) {
	if err := claim.CheckPodSpec(renderedPodSpec(t)); err != nil {
		t.Fatalf("the rendered spec: %v", err)
	}
	ct := func(s map[string]any) map[string]any { return s["containers"].([]any)[0].(map[string]any) }
	sc := func(s map[string]any) map[string]any { return ct(s)["securityContext"].(map[string]any) }
	for _, tc := range []struct {
		field string
		widen func(s map[string]any)
	}{
		{"spec.hostNetwork", func(s map[string]any) { s["hostNetwork"] = true }},
		{"spec.hostPID", func(s map[string]any) { s["hostPID"] = true }},
		{"spec.hostIPC", func(s map[string]any) { s["hostIPC"] = true }},
		{"spec.automountServiceAccountToken", func(s map[string]any) { delete(s, "automountServiceAccountToken") }},
		{"spec.runtimeClassName", func(s map[string]any) { delete(s, "runtimeClassName") }},
		{"spec.initContainers", func(s map[string]any) { s["initContainers"] = []any{map[string]any{"name": "i"}} }},
		{"spec.volumes[2] is a hostPath", func(s map[string]any) {
			s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "h", "hostPath": map[string]any{"path": "/"}})
		}},
		{"spec.securityContext.sysctls", func(s map[string]any) {
			s["securityContext"].(map[string]any)["sysctls"] = []any{map[string]any{"name": "x"}}
		}},
		{"spec.containers has 2", func(s map[string]any) { s["containers"] = append(s["containers"].([]any), ct(s)) }},
		{"privileged", func(s map[string]any) { sc(s)["privileged"] = true }},
		{"allowPrivilegeEscalation", func(s map[string]any) { delete(sc(s), "allowPrivilegeEscalation") }},
		{"readOnlyRootFilesystem", func(s map[string]any) { sc(s)["readOnlyRootFilesystem"] = false }},
		{"runAsNonRoot", func(s map[string]any) { sc(s)["runAsNonRoot"] = false }},
		{"runAsUser is not 65534", func(s map[string]any) { sc(s)["runAsUser"] = 0.0 }},
		{"runAsGroup is not 65534", func(s map[string]any) {
			delete(sc(s), "runAsGroup")
			delete(s["securityContext"].(map[string]any), "runAsGroup")
		}},
		{"capabilities.add", func(s map[string]any) { sc(s)["capabilities"].(map[string]any)["add"] = []any{"SYS_ADMIN"} }},
		{"capabilities.drop", func(s map[string]any) { sc(s)["capabilities"] = map[string]any{} }},
		{"Unconfined", func(s map[string]any) { sc(s)["seccompProfile"] = map[string]any{"type": "Unconfined"} }},
		{"procMount", func(s map[string]any) { sc(s)["procMount"] = "Unmasked" }},
		{"hostPort", func(s map[string]any) {
			ct(s)["ports"] = []any{map[string]any{"containerPort": 80.0, "hostPort": 80.0}}
		}},
	} {
		s := renderedPodSpec(t)
		tc.widen(s)
		err := claim.CheckPodSpec(s)
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s widened: %v; want failed precondition naming it", tc.field, err)
		}
	}
}
