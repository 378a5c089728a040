package service

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/runner"
)

func TestOneShotPod(t *testing.T) {
	var tpl map[string]any
	json.Unmarshal([]byte(`{"metadata":{"labels":{"airlock.dev/template":"py"},"annotations":{"airlock.dev/timeout":"10s"}},
 "spec":{"runtimeClassName":"gvisor","activeDeadlineSeconds":600,"containers":[{"name":"sandbox","image":"py@sha256:01","command":["sleep","infinity"],"args":["x"]}]}}`), &tpl)
	pod, err := oneShotPod(tpl, KubeRun{Template: "py", Argv: []string{"python3", "-c", "print(1)"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(pod)
	want := `{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{"airlock.dev/timeout":"10s"},"generateName":"py-run-","labels":{"airlock.dev/run":"true","airlock.dev/template":"py"}},` +
		`"spec":{"activeDeadlineSeconds":600,"containers":[{"command":["python3","-c","print(1)"],"image":"py@sha256:01","name":"sandbox"}],"restartPolicy":"Never","runtimeClassName":"gvisor"}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	for _, bad := range []string{`{}`, `{"spec":{"containers":[]}}`, `{"spec":{"containers":[{},{}]}}`} {
		var tpl map[string]any
		json.Unmarshal([]byte(bad), &tpl)
		if _, err := oneShotPod(tpl, KubeRun{Template: "py", Argv: []string{"true"}}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}

	// A batch job's pod carries its id and expected stdout for the node.
	want42 := "42\n"
	json.Unmarshal([]byte(`{"metadata":{"annotations":{"airlock.dev/timeout":"10s"}},"spec":{"containers":[{"name":"sandbox"}]}}`), &tpl)
	pod, err = oneShotPod(tpl, KubeRun{Template: "py", Argv: []string{"true"}, JobID: "j1", ExpectedStdout: &want42})
	if err != nil {
		t.Fatal(err)
	}
	ann := pod["metadata"].(map[string]any)["annotations"].(map[string]any)
	if ann["airlock.dev/job-id"] != "j1" || ann["airlock.dev/expected-stdout"] != "42\n" || ann["airlock.dev/timeout"] != "10s" {
		t.Errorf("annotations %v", ann)
	}
}

// An ended pod's Result is the node's, when it gave one; a condition that
// is not a Result with a receipt is refused, not taken.
func TestKubeResultFromNode(t *testing.T) {
	nr := runner.Result{ID: "e1", SandboxID: "sb1", Engine: "oci", Reason: runner.ReasonExited, ExitCode: 3, Receipt: &receipt.Signed{KeyID: "k"}}
	b, _ := json.Marshal(nr)
	pod := func(msg string) *cluster.Pod {
		p := &cluster.Pod{}
		p.Status.Phase = "Failed"
		p.Status.Conditions = []cluster.Condition{{Type: "Ready", Status: "False"}, {Type: cluster.ResultCondition, Status: "True", Message: msg}}
		return p
	}
	got, err := kubeResult(context.Background(), nil, runner.Result{}, pod(string(b)))
	if err != nil || got.ID != "e1" || got.ExitCode != 3 || got.Receipt == nil {
		t.Errorf("result from the node: %+v, %v", got, err)
	}
	for _, bad := range []string{"not json", `{"id":"e1","exit_code":0}`, `[]`} {
		if _, err := kubeResult(context.Background(), nil, runner.Result{}, pod(bad)); !errdefs.IsDataLoss(err) {
			t.Errorf("%q: err = %v, want data loss", bad, err)
		}
	}
}

// sandbox ls's ENDS column is a cluster sandbox's pod deadline.
func TestKubeInfoDeadline(t *testing.T) {
	end := time.Date(2026, 1, 2, 3, 14, 5, 0, time.UTC)
	si := kubeInfo(claim.Record{ID: "sb-0123456789abcdef0123", State: claim.Ready, RuntimeClass: "gvisor", CreatedAt: end.Add(-time.Hour), ExpiresAt: end})
	if got := si.Deadline(end.Add(-time.Minute)); !got.Equal(end) || si.Isolation != "gvisor" || si.Engine != "kube" {
		t.Errorf("deadline %v, want %v; %+v", got, end, si)
	}
}

// A face with no cluster of its own refuses engine kube, naming the
// flag that gives it one; with one, a create names its template.
func TestCreateKubeForRefusals(t *testing.T) {
	ctx := context.Background()
	if _, err := New(t.TempDir(), nil).CreateKubeFor(ctx, "kt", nil, 0); !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("without WithKube: %v; want not implemented, naming --kubeconfig", err)
	}
	s := New(t.TempDir(), nil, WithKube(KubeTarget{Kubeconfig: filepath.Join(t.TempDir(), "none")}))
	if _, err := s.CreateKubeFor(ctx, "", nil, 0); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "template") {
		t.Errorf("no template: %v; want invalid, naming the template", err)
	}
	if _, err := s.CreateKubeFor(ctx, "kt", nil, 0); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("a kubeconfig that is gone: %v; want unavailable, naming it", err)
	}
}
