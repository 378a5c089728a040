package service

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/claim"
)

func TestOneShotPod(t *testing.T) {
	var tpl map[string]any
	json.Unmarshal([]byte(`{"metadata":{"labels":{"airlock.dev/template":"py"},"annotations":{"airlock.dev/timeout":"10s"}},
 "spec":{"runtimeClassName":"gvisor","activeDeadlineSeconds":600,"containers":[{"name":"sandbox","image":"py@sha256:01","command":["sleep","infinity"],"args":["x"]}]}}`), &tpl)
	pod, err := oneShotPod(tpl, "py", []string{"python3", "-c", "print(1)"})
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
		if _, err := oneShotPod(tpl, "py", []string{"true"}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v", bad, err)
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
