package service

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/kube/cluster/clustertest"
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

// renderedSpec is a pod spec as `airlock kube render` writes it.
var renderedSpec = clustertest.RenderedSpec(1)

// denyAllPolicy is the NetworkPolicy agent-sandbox makes for the
// rendered SandboxTemplate py: controlled by it, deny-all both ways,
// selecting its pods by agents.x-k8s.io/sandbox-template-ref-hash.
const denyAllPolicy = `{"metadata":{"name":"py-network-policy","ownerReferences":[{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxTemplate","name":"py","uid":"t1","controller":true}]},
 "spec":{"podSelector":{"matchLabels":{"agents.x-k8s.io/sandbox-template-ref-hash":"8d0ad1e5"}},"policyTypes":["Ingress","Egress"]}}`

const (
	templatePath = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxtemplates/py"
	policyPath   = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/py-network-policy"
)

// serveTemplate answers for SandboxTemplate py, as rendered, and the
// NetworkPolicy agent-sandbox makes for it.
func serveTemplate(m *http.ServeMux) {
	m.HandleFunc("GET "+templatePath, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"spec":{"podTemplate":{"metadata":{},"spec":` + renderedSpec + `}}}`))
	})
	m.HandleFunc("GET "+policyPath, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(denyAllPolicy)) })
}

// oneShotAPI is the part of an API server a one-shot run meets:
// SandboxTemplate "py", pod "py-run-abc" (UID thisPod) made from it,
// whose status is status's (the node's word, or whoever else writes
// pods/status), node "n1", which publishes key, and the pod's log.
type oneShotAPI struct {
	mu      sync.Mutex
	status  map[string]any
	key     string
	log     []byte
	deletes int
}

func (a *oneShotAPI) handler() http.Handler {
	m := http.NewServeMux()
	serveTemplate(m)
	m.HandleFunc("POST /api/v1/namespaces/default/pods", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"metadata":{"name":"py-run-abc","namespace":"default","uid":"` + thisPod + `"}}`))
	})
	m.HandleFunc("GET /api/v1/namespaces/default/pods/py-run-abc", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{
			"metadata": map[string]any{"name": "py-run-abc", "namespace": "default", "uid": thisPod},
			"spec":     map[string]any{"nodeName": "n1", "activeDeadlineSeconds": 1},
			"status":   a.status,
		})
	})
	m.HandleFunc("GET /api/v1/namespaces/default/pods/py-run-abc/log", func(w http.ResponseWriter, r *http.Request) {
		w.Write(a.log)
	})
	m.HandleFunc("DELETE /api/v1/namespaces/default/pods/py-run-abc", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.deletes++
		a.mu.Unlock()
		w.Write([]byte(`{}`))
	})
	m.HandleFunc("GET /api/v1/nodes/n1", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"metadata": map[string]any{"name": "n1", "annotations": map[string]string{cluster.AnnotationReceiptKey: a.key}},
			"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
		})
	})
	return m
}

// run runs o, its Config and Template filled in, against a.
func (a *oneShotAPI) run(t *testing.T, ctx context.Context, o KubeRun) (runner.Result, error) {
	t.Helper()
	o.Config, _ = clustertest.Serve(t, a.handler())
	o.Template = "py"
	return New(t.TempDir(), nil).RunKube(ctx, o)
}

// ended is the status of a pod whose program ended with code, and whose
// Result condition, when result is not "", is result.
func ended(code int, result string) map[string]any {
	st := map[string]any{"phase": "Succeeded",
		"containerStatuses": []any{map[string]any{"name": "sandbox", "state": map[string]any{"terminated": map[string]any{"exitCode": code, "reason": "exited"}}}}}
	if code != 0 {
		st["phase"] = "Failed"
	}
	if result != "" {
		st["conditions"] = []any{map[string]any{"type": "Ready", "status": "False"}, map[string]any{"type": cluster.ResultCondition, "status": "True", "message": result}}
	}
	return st
}

func hexSum(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

// thisPod is the UID of the pod oneShotAPI makes.
const thisPod = "0b5e6a7c-uid-of-this-pod"

// nodeResult is the Result, as JSON, an airlock node gives for an exec of
// argv for job, of pod thisPod, that exited code after printing stdout,
// its receipt signed with key, with the verdict on "42\n" when job is not
// "".
func nodeResult(t *testing.T, key ed25519.PrivateKey, job string, argv []string, code int, stdout string) []byte {
	return nodeRun{job: job, argv: argv, code: code, stdout: stdout, expected: "42\n", pod: thisPod}.result(t, key)
}

// judgedResult is nodeResult, the verdict on expected.
func judgedResult(t *testing.T, key ed25519.PrivateKey, job string, argv []string, code int, stdout, expected string) []byte {
	return nodeRun{job: job, argv: argv, code: code, stdout: stdout, expected: expected, pod: thisPod}.result(t, key)
}

// nodeRun is an exec an airlock node ran for pod UID pod: argv, for job,
// exited code after printing stdout, judged on expected. With cut > 0 its
// Result carries only the first and last cut bytes of stdout, marked
// truncated, as a node cuts a Result too large for a pod's status.
type nodeRun struct {
	job, stdout, expected, pod string
	argv                       []string
	code, cut                  int
}

// result is r's Result as JSON, its receipt signed with key.
func (r nodeRun) result(t *testing.T, key ed25519.PrivateKey) []byte {
	t.Helper()
	job, argv, code, stdout, expected := r.job, r.argv, r.code, r.stdout, r.expected
	pol := isolation.Record{
		Isolation: isolation.GVisor,
		Limits:    isolation.LimitsRecord{TimeoutMS: 30000, MemoryBytes: 512 << 20, MilliCPUs: 1000, CPUs: 1, Pids: 256, OutputBytes: 1 << 20, TmpBytes: 64 << 20, FileSizeBytes: 64 << 20, OpenFiles: 1024},
		UID:       65534, GID: 65534, Hostname: "sandbox", SeccompSHA256: hexSum("seccomp"),
		Mounts: []isolation.MountRecord{}, Runtime: isolation.RuntimeRecord{Name: "runsc", Flags: []string{"--network=none"}},
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res := runner.Result{ID: "ex-0123", SandboxID: "sb-0123", Image: "sha256:" + hexSum("image"), Engine: "oci", Isolation: "gvisor", Seccomp: pol.SeccompSHA256,
		Reason: runner.ReasonExited, ExitCode: code, DurationMS: 1500, Limits: pol.Limits,
		Stdout:    runner.Stream{Head: []byte(stdout), Bytes: int64(len(stdout)), SHA256: hexSum(stdout)},
		Stderr:    runner.Stream{SHA256: hexSum("")},
		StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond)}
	if r.cut > 0 {
		res.Stdout.Head, res.Stdout.Tail, res.Stdout.Truncated = []byte(stdout[:r.cut]), []byte(stdout[len(stdout)-r.cut:]), true
	}
	polHash, _ := receipt.Hash(pol)
	argvHash, _ := receipt.Hash(argv)
	var pass *bool
	if job != "" {
		p := code == 0 && stdout == expected
		pass = &p
	}
	signed, err := receipt.Sign(key, receipt.Receipt{RunID: res.ID, SandboxID: res.SandboxID, JobID: job, Pass: pass, PodUID: r.pod,
		Image: res.Image, Engine: res.Engine, Runtime: "runsc", RuntimeVersion: "release-1", Isolation: res.Isolation,
		SeccompSHA256: res.Seccomp, Policy: pol, PolicySHA256: polHash, ArgvSHA256: argvHash,
		Inputs: []receipt.File{}, Artifacts: []receipt.File{}, Rejected: []receipt.Rejection{},
		Stdout: receipt.StreamOf(res.Stdout.SHA256, res.Stdout.Bytes, res.Stdout.Truncated, res.Stdout.Head, res.Stdout.Tail),
		Stderr: receipt.StreamOf(res.Stderr.SHA256, 0, false, nil, nil),
		Reason: string(res.Reason), ExitCode: code, AirlockVersion: "v1", StartedAt: res.StartedAt, FinishedAt: res.FinishedAt})
	if err != nil {
		t.Fatal(err)
	}
	res.Policy, res.Receipt = &signed.Receipt.Policy, &signed
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newKey(t *testing.T) (ed25519.PrivateKey, string) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return key, base64.StdEncoding.EncodeToString(pub)
}

// A Result in a pod's status is taken only as its node signed it for this
// run: anyone who may update pods/status (airlock node controller, across
// the cluster) can write the condition, but not sign with the key the
// pod's node publishes, and a genuine receipt of another job or argv, or
// around an edited Result, is refused too.
func TestRunKubeVerifiesResult(t *testing.T) {
	nodeKey, nodePub := newKey(t)
	otherKey, _ := newKey(t)
	argv := []string{"python3", "x.py"}
	genuine := nodeResult(t, nodeKey, "job-1", argv, 3, "41\n")
	pass := true
	unsigned, _ := json.Marshal(runner.Result{ID: "someone-elses-run", Engine: "oci", Reason: runner.ReasonExited, ExitCode: 0,
		Receipt: &receipt.Signed{KeyID: "junk", Receipt: receipt.Receipt{JobID: "job-1", Pass: &pass, ArgvSHA256: strings.Repeat("0", 64)}}})
	edited := strings.Replace(string(genuine), `"exit_code":3`, `"exit_code":0`, 1)
	v1, err := os.ReadFile("../receipt/testdata/v1-receipt.json")
	if err != nil {
		t.Fatal(err)
	}
	var v1Signed receipt.Signed
	if err := json.Unmarshal(v1, &v1Signed); err != nil {
		t.Fatal(err)
	}
	v1Result, _ := json.Marshal(map[string]any{"id": "run-1", "engine": "oci", "reason": "exited", "exit_code": 0, "receipt": json.RawMessage(v1)})

	for _, tc := range []struct {
		name, key, result, says string
		job                     string
	}{
		{name: "genuine", key: nodePub, result: string(genuine), job: "job-1"},
		{name: "genuine, a run's", key: nodePub, result: string(nodeResult(t, nodeKey, "", argv, 3, "41\n"))},
		{"unsigned", nodePub, string(unsigned), "does not verify against node n1's key", "job-1"},
		{"another key's", nodePub, string(nodeResult(t, otherKey, "job-1", argv, 0, "42\n")), "does not verify against node n1's key", "job-1"},
		{"another job's", nodePub, string(nodeResult(t, nodeKey, "job-2", argv, 0, "42\n")), `for job "job-2", not "job-1"`, "job-1"},
		{"another argv's", nodePub, string(nodeResult(t, nodeKey, "job-1", []string{"true"}, 0, "42\n")), "the hash of the argv sent", "job-1"},
		{"a run's", nodePub, string(nodeResult(t, nodeKey, "", argv, 0, "42\n")), `for job "", not "job-1"`, "job-1"},
		{"judged on another expected stdout", nodePub, string(judgedResult(t, nodeKey, "job-1", argv, 0, "41\n", "41\n")), "not the verdict on the expected stdout sent", "job-1"},
		{"a job's, for a run", nodePub, string(genuine), `for job "job-1", not ""`, ""},
		{"edited", nodePub, edited, "exit_code", "job-1"},
		{"version 1", base64.StdEncoding.EncodeToString(v1Signed.PublicKey), string(v1Result), "version 1", "job-1"},
		{"no key on the node", "", string(genuine), "node n1 publishes no receipt key", "job-1"},
		// The same node's Result for another pod: an earlier run of this
		// job and argv, replayed.
		{"another pod's", nodePub, string(nodeRun{job: "job-1", argv: argv, code: 0, stdout: "42\n", expected: "42\n", pod: "uid-of-an-earlier-pod"}.result(t, nodeKey)),
			`its receipt is for pod UID "uid-of-an-earlier-pod", not the UID "` + thisPod + `" of the pod this run made`, "job-1"},
		{"no pod's", nodePub, string(nodeRun{job: "job-1", argv: argv, code: 0, stdout: "42\n", expected: "42\n"}.result(t, nodeKey)),
			`its receipt is for pod UID "", not`, "job-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &oneShotAPI{key: tc.key, status: ended(0, tc.result), log: []byte("forged\n")}
			o := KubeRun{Argv: argv, JobID: tc.job}
			if tc.job != "" {
				want := "42\n"
				o.ExpectedStdout = &want
			}
			res, err := a.run(t, context.Background(), o)
			if tc.says == "" {
				if err != nil || res.ExitCode != 3 || string(res.Stdout.Head) != "41\n" || res.Receipt == nil || res.Receipt.Receipt.JobID != tc.job {
					t.Errorf("the node's own Result: %+v, %v", res, err)
				}
				return
			}
			if !errdefs.IsDataLoss(err) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "node n1") {
				t.Errorf("err = %v; want data loss naming node n1 and %q", err, tc.says)
			}
			if res.Receipt != nil || res.ExitCode != -1 {
				t.Errorf("a refused Result was taken: %+v", res)
			}
			if a.deletes != 1 {
				t.Errorf("the pod was deleted %d times", a.deletes)
			}
		})
	}
}

// A pod that has ended, by its phase, ends the wait whatever its
// container statuses say; one whose node keeps it running is given up
// Grace past its activeDeadlineSeconds, and deleted.
func TestRunKubeWaitEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status map[string]any
		is     func(error) bool
		says   string
	}{
		{"failed before it ran", map[string]any{"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource: cpu", "containerStatuses": []any{}},
			errdefs.IsUnavailable, "ended Failed on node n1 with no Result and no ended container: OutOfcpu: Node didn't have enough resource: cpu"},
		{"succeeded, says nothing", map[string]any{"phase": "Succeeded"}, errdefs.IsUnavailable, "ended Succeeded on node n1 with no Result"},
		{"running for ever", map[string]any{"phase": "Running"}, errdefs.IsUnavailable, "still not ended 300ms past its activeDeadlineSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &oneShotAPI{status: tc.status}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := a.run(t, ctx, KubeRun{Argv: []string{"true"}, Start: 100 * time.Millisecond, Grace: 300 * time.Millisecond})
			if took := time.Since(start); !tc.is(err) || !strings.Contains(err.Error(), tc.says) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("after %v: %v; want %q", took.Round(time.Millisecond), err, tc.says)
			}
			if a.deletes != 1 {
				t.Errorf("the pod was deleted %d times", a.deletes)
			}
		})
	}
}

// What a pod's status says reaches the error cut and escaped: whoever
// writes pods/status chooses it, and it ends on a person's terminal.
func TestRunKubeStatusMessagePrintable(t *testing.T) {
	msg := "spec.volumes[0]: \x1b]0;pwned\x07\x1b[2J" + strings.Repeat("x", 1<<20)
	for _, reason := range []string{"AirlockRefused", "AirlockNodeLost", "Whatever"} {
		a := &oneShotAPI{status: map[string]any{"phase": "Failed", "reason": reason, "message": msg}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := a.run(t, ctx, KubeRun{Argv: []string{"true"}})
		cancel()
		if err == nil || strings.Contains(err.Error(), "\x1b") || len(err.Error()) > 2*cluster.MaxPrintable || !strings.Contains(err.Error(), `\x1b]0;pwned`) {
			t.Errorf("%s: the status message is not cut and escaped: %.300q (%d bytes)", reason, err, len(err.Error()))
		}
	}
}

// A pod whose node gave no Result has its log as stdout, read up to
// kubeLogCap; a longer log says it was cut, and claims no size or hash
// of the whole.
func TestRunKubeLogCap(t *testing.T) {
	for _, tc := range []struct {
		size      int
		truncated bool
	}{{10 << 20, true}, {kubeLogCap, true}, {kubeLogCap + 1, true}, {5, false}} {
		log := []byte(strings.Repeat("y", tc.size))
		a := &oneShotAPI{status: ended(3, ""), log: log}
		res, err := a.run(t, context.Background(), KubeRun{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 3 || res.Stdout.Truncated != tc.truncated {
			t.Fatalf("a log of %d bytes: exit %d, truncated %v, %v", tc.size, res.ExitCode, res.Stdout.Truncated, err)
		}
		whole := tc.size <= kubeLogCap
		if wantBytes := int64(min(tc.size, kubeLogCap)); res.Stdout.Bytes != wantBytes {
			t.Errorf("a log of %d bytes: bytes %d, want %d", tc.size, res.Stdout.Bytes, wantBytes)
		}
		if wantSum := hexSum(string(log)); whole && res.Stdout.SHA256 != wantSum || !whole && res.Stdout.SHA256 != "" {
			t.Errorf("a log of %d bytes: sha256 %q", tc.size, res.Stdout.SHA256)
		}
	}
}

// A Result a node cut to fit the pod's status carries only part of stdout:
// it verifies, and the verdict is still the one on all the program wrote,
// by its size and hash.
func TestRunKubeCutResult(t *testing.T) {
	nodeKey, nodePub := newKey(t)
	argv := []string{"python3", "x.py"}
	stdout := strings.Repeat("0123456789", 100)
	for _, tc := range []struct {
		name, expected string
		pass           bool
	}{{"passed", stdout, true}, {"did not pass", stdout + "!", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := nodeRun{job: "job-1", argv: argv, stdout: stdout, expected: tc.expected, pod: thisPod, cut: 10}
			a := &oneShotAPI{key: nodePub, status: ended(0, string(r.result(t, nodeKey)))}
			res, err := a.run(t, context.Background(), KubeRun{Argv: argv, JobID: "job-1", ExpectedStdout: &tc.expected})
			if err != nil || res.Receipt == nil || !res.Stdout.Truncated || len(res.Stdout.Head) != 10 || res.Stdout.Bytes != int64(len(stdout)) {
				t.Fatalf("a cut Result: %+v, %v", res.Stdout, err)
			}
			if p := res.Receipt.Receipt.Pass; p == nil || *p != tc.pass {
				t.Errorf("pass %v, want %v", p, tc.pass)
			}
		})
	}
}

// A pod of an airlock node (one that publishes a receipt key) is given
// only with its verified Result: without one, the exit code in its
// container's state (anyone's who may write pods/status) is not taken.
// A node that publishes no key is no airlock node: its pods fall back to
// that state and the log.
func TestRunKubeNoResult(t *testing.T) {
	_, nodePub := newKey(t)
	terminated := func(reason, message string) map[string]any {
		return map[string]any{"phase": "Failed", "reason": reason, "message": message,
			"containerStatuses": []any{map[string]any{"name": "sandbox", "state": map[string]any{"terminated": map[string]any{"exitCode": -1, "reason": reason, "message": message}}}}}
	}
	for _, tc := range []struct {
		name, key string
		status    map[string]any
		is        func(error) bool
		says      []string
	}{
		{"condition removed", nodePub, ended(0, ""), errdefs.IsDataLoss,
			[]string{"airlock node n1", "without the airlock.dev/result condition", "not verified", "kubectl get pod -n default py-run-abc -o yaml", "node's log"}},
		{"condition removed, a failure written", nodePub, ended(3, ""), errdefs.IsDataLoss, []string{"airlock node n1", "airlock.dev/result"}},
		{"the exec failed", nodePub, terminated("error", "starting the program: runsc: boom"), errdefs.IsUnavailable,
			[]string{"gave no outcome on node n1", "error: starting the program: runsc: boom"}},
		{"destroyed under it", nodePub, terminated("destroyed", "another airlock process destroyed the sandbox"), errdefs.IsUnavailable, []string{"gave no outcome on node n1"}},
		{"never made", nodePub, terminated("AirlockCreateFailed", "unavailable: no runsc"), errdefs.IsUnavailable,
			[]string{"gave no outcome on node n1", "AirlockCreateFailed: unavailable: no runsc"}},
		{"a key that is not one", "not-a-key", ended(0, ""), errdefs.IsUnavailable, []string{"node n1's annotation airlock.dev/receipt-key is not a base64 ed25519 public key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &oneShotAPI{key: tc.key, status: tc.status, log: []byte("forged\n")}
			res, err := a.run(t, context.Background(), KubeRun{Argv: []string{"true"}})
			if !tc.is(err) {
				t.Fatalf("err = %v; want another kind", err)
			}
			for _, want := range tc.says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v; want it to say %q", err, want)
				}
			}
			if res.ExitCode != -1 || res.Reason != runner.ReasonError || len(res.Stdout.Head) != 0 {
				t.Errorf("the pod's unverified state was taken: %+v", res)
			}
			if a.deletes != 1 {
				t.Errorf("the pod was deleted %d times", a.deletes)
			}
		})
	}
	// No key: not an airlock node, and the fallback holds.
	a := &oneShotAPI{status: ended(3, ""), log: []byte("its log\n")}
	res, err := a.run(t, context.Background(), KubeRun{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 3 || string(res.Stdout.Head) != "its log\n" || res.Receipt != nil {
		t.Errorf("a node with no key: %+v, %v", res, err)
	}
}

// The made pod's name and its node's are the cluster's word, as its
// status message is: a name that is no DNS-1123 name fails the run before
// it is shown, and no progress or error line has it raw.
func TestRunKubeRefusesNamesNotDNS(t *testing.T) {
	evil := "\x1b]0;pwned\x07\x1b[2J" + strings.Repeat("n", 4096)
	for _, tc := range []struct{ pod, node string }{{pod: "py-run-" + evil, node: "n1"}, {pod: "py-run-abc", node: "node-" + evil}} {
		m := http.NewServeMux()
		serveTemplate(m)
		m.HandleFunc("POST /api/v1/namespaces/default/pods", func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": tc.pod, "uid": "u"}})
		})
		m.HandleFunc("GET /api/v1/namespaces/default/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": r.PathValue("name"), "uid": "u"},
				"spec": map[string]any{"nodeName": tc.node}, "status": map[string]any{"phase": "Failed", "reason": "AirlockRefused", "message": "no"}})
		})
		deleted := make(chan string, 1)
		m.HandleFunc("DELETE /api/v1/namespaces/default/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
			deleted <- r.PathValue("name")
			w.Write([]byte(`{}`))
		})
		cfg, _ := clustertest.Serve(t, m)
		var progress []string
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := New(t.TempDir(), nil).RunKube(ctx, KubeRun{Config: cfg, Template: "py", Argv: []string{"true"}, Progress: func(p string) { progress = append(progress, p) }})
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "no DNS-1123 name") {
			t.Errorf("err = %.300v; want unavailable, naming the rule", err)
		}
		for _, p := range append(progress, fmt.Sprint(err)) {
			if strings.Contains(p, "\x1b") || len(p) > 3*cluster.MaxPrintable {
				t.Errorf("a progress or error line of %d bytes with the cluster's raw text: %.120q", len(p), p)
			}
		}
		select {
		case name := <-deleted:
			if name != tc.pod {
				t.Errorf("deleted pod %.40q, not the one made", name)
			}
		default:
			t.Errorf("the pod made was not deleted")
		}
	}
}

// labelsAPI is an API server where warm pool "py" in namespace default
// hands out ready sandboxes at once; made counts the claims.
func labelsAPI(made *atomic.Int32) http.Handler {
	const base = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default"
	m := http.NewServeMux()
	m.HandleFunc("GET "+base+"/sandboxwarmpools/py", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"metadata":{"name":"py"},"spec":{"replicas":1}}`))
	})
	m.HandleFunc("POST "+base+"/sandboxclaims", func(w http.ResponseWriter, r *http.Request) {
		made.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{}`))
	})
	m.HandleFunc("GET "+base+"/sandboxclaims/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":{"conditions":[{"type":"Ready","status":"True"}],"sandbox":{"name":"py-abcde"}}}`))
	})
	m.HandleFunc("GET /api/v1/namespaces/default/pods/py-abcde", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"metadata":{"name":"py-abcde"},"spec":` + renderedSpec + `,"status":{"phase":"Running"}}`))
	})
	return m
}

// A cluster sandbox's labels are checked as a local sandbox's are
// (runner.CheckLabels), before anything is claimed.
func TestCreateKubeChecksLabels(t *testing.T) {
	var made atomic.Int32
	_, kc := clustertest.Serve(t, labelsAPI(&made))
	s := New(t.TempDir(), nil, WithKube(KubeTarget{Kubeconfig: kc, Context: "x", Namespace: "default"}))
	for name, labels := range map[string]map[string]string{
		"control characters": {"owner": "\x1b]0;pwned\x07\x1b[2J"},
		"a bad key":          {"bad key=\n": "v"},
		"a long value":       {"k": strings.Repeat("v", 1<<20)},
	} {
		if si, err := s.CreateKubeFor(context.Background(), "py", labels, 0); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v (sandbox %q); want invalid input", name, err, si.ID)
		}
	}
	if n := made.Load(); n > 0 {
		t.Errorf("%d claims made for labels refused", n)
	}
	if _, err := s.CreateKubeFor(context.Background(), "py", map[string]string{"owner": "eval-7"}, 0); err != nil || made.Load() != 1 {
		t.Errorf("good labels: %v, %d claims", err, made.Load())
	}
}

// A one-shot run refuses a template whose pod spec widens what airlock
// renders (privileged, a hostPath of /, the host's namespaces), before
// any pod is made: on a node that is not airlock's, a kubelet runs it as
// asked.
func TestRunKubeRefusesWideningTemplate(t *testing.T) {
	var posted atomic.Int32
	m := http.NewServeMux()
	m.HandleFunc("GET "+templatePath, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"spec":{"podTemplate":{"metadata":{},"spec":{"activeDeadlineSeconds":1,"hostNetwork":true,"hostPID":true,
 "automountServiceAccountToken":true,"runtimeClassName":"gvisor",
 "volumes":[{"name":"root","hostPath":{"path":"/"}}],
 "containers":[{"name":"sandbox","image":"py@sha256:01","securityContext":{"privileged":true,"runAsUser":0,"capabilities":{"add":["SYS_ADMIN"]}},
   "volumeMounts":[{"name":"root","mountPath":"/host"}]}]}}}}`))
	})
	m.HandleFunc("GET "+policyPath, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(denyAllPolicy)) })
	m.HandleFunc("POST /api/v1/namespaces/default/pods", func(w http.ResponseWriter, r *http.Request) {
		posted.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	})
	cfg, _ := clustertest.Serve(t, m)
	_, err := New(t.TempDir(), nil).RunKube(context.Background(), KubeRun{Config: cfg, Template: "py", Argv: []string{"id"}})
	if !errdefs.IsFailedPrecondition(err) || posted.Load() > 0 {
		t.Fatalf("a widening template: %v, %d pods posted; want failed precondition before any pod", err, posted.Load())
	}
	for _, field := range []string{"hostNetwork", "hostPID", "automountServiceAccountToken", "volumes[0] is a hostPath", "privileged", "runAsUser", "capabilities.add", "airlock kube render"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the refusal does not name %s: %v", field, err)
		}
	}
}

// A one-shot run's pod carries the labels by which agent-sandbox's
// deny-all NetworkPolicy for its template selects the template's pods; a
// template without such a policy fails the run before any pod is made.
func TestRunKubePodSelectedByNetworkPolicy(t *testing.T) {
	a := &oneShotAPI{status: ended(0, ""), log: []byte("ok\n")}
	var pod atomic.Value
	inner := a.handler()
	cfg, _ := clustertest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/api/v1/namespaces/default/pods" {
			var b bytes.Buffer
			b.ReadFrom(r.Body)
			pod.Store(b.String())
		}
		inner.ServeHTTP(w, r)
	}))
	if _, err := New(t.TempDir(), nil).RunKube(context.Background(), KubeRun{Config: cfg, Template: "py", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Metadata struct{ Labels map[string]string } `json:"metadata"`
	}
	s, _ := pod.Load().(string)
	json.Unmarshal([]byte(s), &sent)
	if sent.Metadata.Labels["agents.x-k8s.io/sandbox-template-ref-hash"] != "8d0ad1e5" {
		t.Errorf("the run's pod is not selected by the template's NetworkPolicy: %s", s)
	}

	for name, policy := range map[string]string{
		"none":            "",
		"egress allowed":  strings.Replace(denyAllPolicy, `"policyTypes":["Ingress","Egress"]`, `"policyTypes":["Ingress","Egress"],"egress":[{}]`, 1),
		"ingress only":    strings.Replace(denyAllPolicy, `"policyTypes":["Ingress","Egress"]`, `"policyTypes":["Ingress"]`, 1),
		"not the owner's": strings.Replace(denyAllPolicy, `"controller":true`, `"controller":false`, 1),
		"by expressions":  strings.Replace(denyAllPolicy, `"podSelector":{`, `"podSelector":{"matchExpressions":[{"key":"a","operator":"Exists"}],`, 1),
	} {
		var posted atomic.Int32
		m := http.NewServeMux()
		m.HandleFunc("GET "+templatePath, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"spec":{"podTemplate":{"metadata":{},"spec":` + renderedSpec + `}}}`))
		})
		m.HandleFunc("GET "+policyPath, func(w http.ResponseWriter, r *http.Request) {
			if policy == "" {
				w.WriteHeader(http.StatusNotFound)
				w.Write([]byte(`{"kind":"Status","status":"Failure","reason":"NotFound","code":404}`))
				return
			}
			w.Write([]byte(policy))
		})
		m.HandleFunc("POST /api/v1/namespaces/default/pods", func(w http.ResponseWriter, r *http.Request) {
			posted.Add(1)
			http.Error(w, "no", http.StatusForbidden)
		})
		cfg, _ := clustertest.Serve(t, m)
		_, err := New(t.TempDir(), nil).RunKube(context.Background(), KubeRun{Config: cfg, Template: "py", Argv: []string{"true"}})
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "py-network-policy") || posted.Load() > 0 {
			t.Errorf("policy %s: %v, %d pods posted; want failed precondition naming py-network-policy, no pod", name, err, posted.Load())
		}
	}
}
