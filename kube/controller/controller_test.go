package controller

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/kube/node"
)

func lease(renew time.Time, seconds int32) *coordv1.Lease {
	rt := metav1.NewMicroTime(renew)
	return &coordv1.Lease{Spec: coordv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: &seconds}}
}

func TestTrackerObserve(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	// The node's clock is an hour behind: only changes count, not values.
	skewed := t0.Add(-time.Hour)
	tr := tracker{grace: 5 * time.Second, seen: map[string]observed{}}
	steps := []struct {
		name string
		l    *coordv1.Lease
		at   time.Duration
		lost bool
	}{
		{"first sight gives a whole period", lease(skewed, 10), 0, false},
		{"unchanged within duration+grace", lease(skewed, 10), 15 * time.Second, false},
		{"renewed", lease(skewed.Add(3*time.Second), 10), 16 * time.Second, false},
		{"the renewal restarts the clock", lease(skewed.Add(3*time.Second), 10), 31 * time.Second, false},
		{"past duration+grace since the renewal was seen", lease(skewed.Add(3*time.Second), 10), 31*time.Second + time.Millisecond, true},
		{"still lost", lease(skewed.Add(3*time.Second), 10), time.Minute, true},
		{"renewed again: back", lease(skewed.Add(time.Minute), 10), 61 * time.Second, false},
		{"no lease: never lost", nil, 10 * time.Minute, false},
		{"a lease again: a whole period", lease(skewed.Add(time.Minute), 10), 10*time.Minute + 14*time.Second, false},
		{"a zero duration is no lease", lease(skewed.Add(time.Minute), 0), 20 * time.Minute, false},
	}
	for _, s := range steps {
		if got, _ := tr.observe("n", s.l, t0.Add(s.at)); got != s.lost {
			t.Errorf("%s: lost = %v, want %v", s.name, got, s.lost)
		}
	}
	tr.observe("m", lease(skewed, 10), t0)
	tr.keep([]string{"n"})
	if _, ok := tr.seen["m"]; ok {
		t.Error("keep left a node not named")
	}
}

func TestFailedStatus(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	now := metav1.NewTime(started.Add(time.Hour))
	p := &corev1.Pod{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "img"}, {Name: "never-reported", Image: "img2"}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", Ready: true, ContainerID: "airlock://sb-1",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}},
		},
	}
	st := FailedStatus(p, "node a lost", now)
	if st.Phase != corev1.PodFailed || st.Reason != node.ReasonNodeLost || st.Message != "node a lost" {
		t.Errorf("phase %s reason %s message %q", st.Phase, st.Reason, st.Message)
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range st.Conditions {
		conds[c.Type] = c.Status
	}
	want := map[corev1.PodConditionType]corev1.ConditionStatus{corev1.PodReady: "False", corev1.PodScheduled: "True", corev1.ContainersReady: "False", corev1.DisruptionTarget: "True"}
	for k, v := range want {
		if conds[k] != v {
			t.Errorf("condition %s = %q, want %q (all: %v)", k, conds[k], v, conds)
		}
	}
	if len(st.ContainerStatuses) != 2 {
		t.Fatalf("container statuses: %+v", st.ContainerStatuses)
	}
	for _, cs := range st.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode != 137 || term.Reason != node.ReasonNodeLost || cs.Ready || cs.State.Running != nil {
			t.Errorf("container %s: %+v", cs.Name, cs)
		}
	}
	if term := st.ContainerStatuses[0].State.Terminated; !term.StartedAt.Equal(&started) || term.ContainerID != "airlock://sb-1" {
		t.Errorf("the running container's start and id are lost: %+v", term)
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Error("FailedStatus changed the pod it was given")
	}
}

func TestRBAC(t *testing.T) {
	for _, c := range []struct{ user, sa, subject string }{
		{"airlock-controller", "", "User/airlock-controller"},
		{"ops@example.org", "", "User/ops@example.org"},
		{"", "airlock/controller", "ServiceAccount/controller"},
	} {
		b, err := RBAC(c.user, c.sa)
		if err != nil {
			t.Fatalf("%s %s: %v", c.user, c.sa, err)
		}
		kinds := map[string]bool{}
		for _, doc := range strings.Split(string(b), "\n---\n")[1:] {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%v:\n%s", err, doc)
			}
			kinds[u.GetKind()] = true
			if strings.HasSuffix(u.GetKind(), "Binding") {
				subs, _, _ := unstructured.NestedSlice(u.Object, "subjects")
				s := subs[0].(map[string]any)
				if got := s["kind"].(string) + "/" + s["name"].(string); len(subs) != 1 || got != c.subject {
					t.Errorf("%s binds %v, want %s", u.GetKind(), subs, c.subject)
				}
			}
			if u.GetKind() == "Role" && u.GetNamespace() != corev1.NamespaceNodeLease {
				t.Errorf("the leases' Role is in %q", u.GetNamespace())
			}
		}
		for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
			if !kinds[k] {
				t.Errorf("no %s in:\n%s", k, b)
			}
		}
		for _, never := range []string{"delete", "secrets", "*"} {
			if strings.Contains(string(b), never) {
				t.Errorf("the roles hold %q:\n%s", never, b)
			}
		}
	}
	for _, bad := range [][2]string{{"system:masters", ""}, {"a\nb", ""}, {"", ""}, {"x", "no-slash"}, {"x", "Bad/Name"}, {"x", "a/b\nc"}} {
		if _, err := RBAC(bad[0], bad[1]); err == nil {
			t.Errorf("RBAC(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// The controller's credentials may update any pod's status. Its
// kubeconfig, read by client-go, is refused as the airlock binary's is
// (see node.ClientAs) when it names a plain-http server, skips TLS
// verification or runs an exec credential plugin: Run stops before any
// request is sent or program run.
func TestRunRefusesKubeconfigsClusterRefuses(t *testing.T) {
	var asked atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, `{"kind":"Status","status":"Failure","code":500}`, 500)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	dir := t.TempDir()
	marker := filepath.Join(dir, "plugin-ran")
	plugin := filepath.Join(dir, "plugin.sh")
	os.WriteFile(plugin, []byte("#!/bin/sh\ntouch "+marker+"\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"from-plugin\"}}'\n"), 0o700)
	kubeconfig := func(cluster, user string) string {
		return "apiVersion: v1\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" +
			"clusters: [{name: k, cluster: {" + cluster + "}}]\nusers: [{name: u, user: {" + user + "}}]\n"
	}
	for name, kc := range map[string]string{
		"http server":              kubeconfig("server: "+plain.URL, "token: controller-secret"),
		"insecure-skip-tls-verify": kubeconfig("server: "+tlsSrv.URL+", insecure-skip-tls-verify: true", "token: controller-secret"),
		"exec plugin":              kubeconfig("server: "+tlsSrv.URL, "exec: {apiVersion: client.authentication.k8s.io/v1, command: "+plugin+", interactiveMode: Never}"),
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "kubeconfig")
			os.WriteFile(p, []byte(kc), 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Run(ctx, Config{Kubeconfig: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Run: %v; want invalid input", err)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the exec credential plugin ran")
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the API server was asked %d times", n)
	}
}
