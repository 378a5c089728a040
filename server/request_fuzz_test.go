package server

// Fuzzing of the request bodies, from raw bytes through the real handler
// and the real runner to the spec an engine would be handed. The engine is
// enginetest.Refusing: its Check records the spec and refuses it, so
// nothing is ever created, yet everything the API and the runner decide
// runs. Requests go straight to the handler (do), so that a panic fails
// the target where net/http would have recovered it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/units"
)

// fuzzTemplateName is the template newFuzzServer stores.
const fuzzTemplateName = "fz"

// newFuzzServer is a server on a fresh root holding a default image and
// template fz, whose runner's engine refuses every spec.
func newFuzzServer(tb testing.TB) (*Server, *enginetest.Refusing, *templates.Template) {
	tb.Helper()
	lim := isolation.Limits{Timeout: 10 * time.Second, Memory: 256 << 20, CPUs: 500, Pids: 64, Output: 64 << 10}
	root, rn, eng, tp := fuzztest.Runner(tb, fuzzTemplateName, runner.Spec{Env: []string{"A=1"}, Policy: isolation.Policy{Limits: lim}})
	s, err := New(Options{Service: service.New(root, fuzzEngines{rn})})
	if err != nil {
		tb.Fatal(err)
	}
	return s, eng, tp
}

// fuzzEngines gives rn for auto and oci; docker is unavailable.
type fuzzEngines struct{ rn *runner.Runner }

func (e fuzzEngines) Runner(_ context.Context, name string) (*runner.Runner, func(), error) {
	switch name {
	case "auto", "oci":
		return e.rn, func() {}, nil
	case "docker":
		return nil, nil, fmt.Errorf("%w: fuzzing: no docker engine", errdefs.ErrUnavailable)
	}
	panic(fmt.Sprintf("the server asked for engine %q", name))
}

func (fuzzEngines) Reapers(context.Context) ([]engine.Reaper, func()) { return nil, func() {} }

// errorShape checks that rec is the API's error shape and returns its kind.
func errorShape(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("status %d: the body is not JSON: %v: %q", rec.Code, err, rec.Body)
	}
	if row, ok := errkind.Lookup(errkind.Kind(e.Error.Kind)); !ok || row.Status != rec.Code || e.Error.Message == "" {
		t.Fatalf("status %d: not the error shape: %q", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	return e.Error.Kind
}

// checkedJob checks the answer to body, which is an error since nothing
// runs, and returns the one spec the engine was asked to check, nil when
// it was not asked. A body that reached the engine decodes into q, and its
// spec holds what every spec must (checkJob).
func checkedJob(t *testing.T, eng *enginetest.Refusing, rec *httptest.ResponseRecorder, body []byte, q any) *engine.SandboxSpec {
	t.Helper()
	kind := errorShape(t, rec)
	jobs := eng.Checked()
	if len(jobs) == 0 {
		if kind == KindUnavailable && strings.Contains(rec.Body.String(), enginetest.ErrRefused.Error()) {
			t.Fatal("the engine's refusal came back, yet it was never asked")
		}
		return nil
	}
	if err := decodeJSON(bytes.NewReader(body), q); err != nil {
		t.Fatalf("the engine was asked for a body that does not decode: %v", err)
	}
	if len(jobs) != 1 || kind != KindUnavailable {
		t.Fatalf("%d specs checked, answer %s", len(jobs), kind)
	}
	checkJob(t, jobs[0])
	return jobs[0]
}

// checkJob checks what holds of every spec an engine is handed, whatever
// the request: a policy that validates, a pinned image, clean paths.
func checkJob(t *testing.T, job *engine.SandboxSpec) {
	t.Helper()
	p := job.Policy
	if err := p.Validate(); err != nil {
		t.Fatalf("the engine was handed a policy that does not validate: %v", err)
	}
	if p.UID == 0 || p.GID == 0 || p.Seccomp == nil || len(p.Seccomp.JSON) == 0 || p.Seccomp.Spec == nil {
		t.Fatalf("identity or seccomp missing: uid %d gid %d seccomp %v", p.UID, p.GID, p.Seccomp != nil)
	}
	if sum := sha256.Sum256(p.Seccomp.JSON); hex.EncodeToString(sum[:]) != p.Seccomp.SHA256 {
		t.Fatalf("seccomp profile sha256 %s does not match its bytes", p.Seccomp.SHA256)
	}
	if job.Image.Validate() != nil || job.Image.Algorithm() != digest.SHA256 {
		t.Fatalf("image %q is not a sha256 digest", job.Image)
	}
	if job.Workdir != "" && (!path.IsAbs(job.Workdir) || path.Clean(job.Workdir) != job.Workdir) {
		t.Fatalf("workdir %q is not absolute and clean", job.Workdir)
	}
	for _, kv := range job.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			t.Fatalf("env entry %q", kv)
		}
	}
	if job.Init != nil {
		if len(job.Init.Argv) == 0 || job.Init.Argv[0] == "" {
			t.Fatalf("argv %q", job.Init.Argv)
		}
		for _, a := range job.Init.Argv {
			if strings.ContainsRune(a, 0) {
				t.Fatalf("argument %q has a NUL", a)
			}
		}
	}
}

// checkLimits checks that each limit the request gave reaches the engine
// as given, and each it left out is the template's (on a template) or
// airlock's default: nothing is silently widened or replaced.
func checkLimits(t *testing.T, q *PolicyRequest, got isolation.Policy, tp *templates.Template) {
	t.Helper()
	base := isolation.Default()
	if q.Template != "" {
		base.Isolation, base.Limits = tp.Isolation, tp.Limits
	}
	want := base.Limits
	mustBytes := func(s string, dst *units.Bytes) {
		if s != "" {
			*dst = must(units.ParseBytes(s))
		}
	}
	if q.Timeout != "" {
		want.Timeout = must(units.ParseDuration(q.Timeout))
	}
	mustBytes(q.Memory, &want.Memory)
	mustBytes(q.OutputLimit, &want.Output)
	mustBytes(q.TmpSize, &want.Tmp)
	mustBytes(q.FileSize, &want.FileSize)
	if q.CPUs != "" {
		want.CPUs = must(units.ParseCPUs(string(q.CPUs)))
	}
	if q.Pids != nil {
		want.Pids = *q.Pids
	}
	if got.Limits != want {
		t.Fatalf("limits %+v reached the engine; the request asked for %+v", got.Limits, want)
	}
	if m := cmpOr(isolation.Mode(q.Isolation), base.Isolation); got.Isolation != m {
		t.Fatalf("isolation %q reached the engine; the request asked for %q", got.Isolation, m)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// policySeeds are policy fields, valid and hostile, that the body seeds
// combine.
var policySeeds = []string{
	``,
	`"template":"fz"`,
	`"template":"fz","memory":"128MiB","timeout":"5s","cpus":0.25,"pids":16`,
	`"template":"fz","memory":"1GiB"`,
	`"template":"../../etc/passwd"`,
	`"memory":"512MiB","cpus":"1.5","pids":100,"timeout":"30s","output_limit":"1MiB","tmp_size":"64MiB","file_size":"1GiB"`,
	`"memory":"0"`, `"memory":"-1"`, `"memory":"9999999999999TiB"`, `"cpus":0`, `"cpus":1e309`, `"pids":0`, `"pids":-5`, `"pids":99999999999`,
	`"timeout":"1ns"`, `"timeout":"-1s"`, `"timeout":"1"`,
	`"isolation":"seccomp"`, `"isolation":"none"`, `"engine":"docker"`, `"engine":"lxc"`,
	`"image":"sha256:` + strings.Repeat("2", 64) + `"`, `"image":"ubuntu:latest"`,
	`"out_dir":"none","out_limit":"1MiB"`, `"out_dir":"/proc"`, `"out_dir":"out"`, `"out_files":0`, `"artifact_types":["text/plain"]`, `"artifact_types":["x/y"]`,
	`"env":["A=1","B"]`, `"env":["=x"]`, `"input":"/etc"`, `"seccomp_profile":"/dev/null"`,
}

func FuzzRunRequest(f *testing.F) {
	for _, p := range policySeeds {
		sep := map[bool]string{true: "", false: ","}[p == ""]
		f.Add([]byte(`{"argv":["python3","-c","print(1)"]` + sep + p + `}`))
	}
	for _, b := range []string{
		``, `{}`, `[]`, `null`, `{"argv":[]}`, `{"argv":[""]}`, `{"argv":["a\u0000b"]}`, `{"argv":"ls"}`,
		`{"argv":["ls"],"workdir":"/tmp/../etc"}`, `{"argv":["ls"],"workdir":"rel"}`, `{"argv":["ls"],"stdin_b64":"aGk="}`,
		`{"argv":["ls"],"stdin_b64":"!!"}`, `{"argv":["ls"]} {}`, `{"argv":["ls"],"argv":["id"]}`, `{"argv":["ls"],"unknown":1}`,
	} {
		f.Add([]byte(b))
	}
	s, eng, tp := newFuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		var q RunRequest
		job := checkedJob(t, eng, do(t, h, false, "POST", "/v1/runs", string(body)), body, &q)
		if job == nil {
			return
		}
		checkLimits(t, &q.PolicyRequest, job.Policy, tp)
		if !slices.Equal(job.Init.Argv, q.Argv) || job.Workdir != q.Workdir {
			t.Fatalf("argv %q workdir %q reached the engine; the request gave %q %q", job.Init.Argv, job.Workdir, q.Argv, q.Workdir)
		}
		if q.Template == "" && !slices.Equal(job.Env, q.Env) {
			t.Fatalf("env %q reached the engine; the request gave %q", job.Env, q.Env)
		}
		if q.Template == "" && q.Image == "" && !strings.HasSuffix(string(job.Image), strings.Repeat("1", 64)) {
			t.Fatalf("image %s, not the default", job.Image)
		}
		if q.Template != "" && job.Image.String() != must(images.ParseRef(tp.Image)).ID.String() {
			t.Fatalf("image %s, not the template's %s", job.Image, tp.Image)
		}
	})
}

func FuzzSandboxRequest(f *testing.F) {
	for _, p := range policySeeds {
		f.Add([]byte(`{` + p + `}`))
	}
	for _, b := range []string{
		`{"ttl":"1h","idle_timeout":"5m","workspace_size":"1GiB","labels":{"a":"b"},"download_types":["text/plain"]}`,
		`{"ttl":"-1s"}`, `{"ttl":"0s"}`, `{"workspace_size":"0"}`, `{"labels":{"":"x"}}`, `{"labels":{"a":"` + strings.Repeat("x", 300) + `"}}`,
		`{"download_types":[]}`, `{"download_types":["  "]}`, `{"argv":["ls"]}`,
	} {
		f.Add([]byte(b))
	}
	s, eng, tp := newFuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		var q SandboxRequest
		job := checkedJob(t, eng, do(t, h, false, "POST", "/v1/sandboxes", string(body)), body, &q)
		if job == nil {
			return
		}
		checkLimits(t, &q.PolicyRequest, job.Policy, tp)
		if job.Init != nil || job.Workdir != runner.WorkspaceDir || !strings.HasPrefix(job.ID, "sb-") {
			t.Fatalf("a sandbox's spec: init %v, workdir %q, id %q", job.Init, job.Workdir, job.ID)
		}
		if !job.Deadline.After(time.Now()) {
			t.Fatalf("deadline %v is not in the future", job.Deadline)
		}
	})
}

func FuzzExecRequest(f *testing.F) {
	const id = "sb-0123456789abcdef0123"
	for _, b := range []string{
		`{"argv":["ls","-l"]}`, `{"argv":["cat"],"stdin_b64":"aGVsbG8="}`, `{"argv":["sleep","9"],"timeout":"1s","output_limit":"1KiB"}`,
		`{"argv":["x"],"detach":true,"env":["A=1"],"workdir":"/home/user"}`, `{"argv":["x"],"type":"execute","stdin":true}`,
		`{"argv":["x"],"stdin":true,"stdin_b64":"aA=="}`, `{"argv":[]}`, `{"argv":["x"],"timeout":"0s"}`, `{"argv":["x"],"output_limit":"-1"}`,
		`{"argv":["x"],"stdin_b64":"a"}`, `{}`, `x`,
	} {
		f.Add(id, []byte(b))
	}
	f.Add("../../etc", []byte(`{"argv":["ls"]}`))
	f.Add("sb-0123456789abcdef012/", []byte(`{"argv":["ls"]}`))
	s, eng, _ := newFuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, sid string, body []byte) {
		// No sandbox is live: the handler must answer with an error, and
		// ask no engine for anything.
		rec := do(t, h, false, "POST", "/v1/sandboxes/"+url.PathEscape(sid)+"/exec", string(body))
		errorShape(t, rec)
		if jobs := eng.Checked(); len(jobs) > 0 {
			t.Fatalf("an exec request reached the engine's Check")
		}
		var q ExecRequest
		if decodeJSON(bytes.NewReader(body), &q) != nil {
			return
		}
		spec, err := q.spec()
		if err != nil {
			if kindOf(err) != KindInvalidInput {
				t.Fatalf("a refused exec is %s, not invalid_input: %v", kindOf(err), err)
			}
			return
		}
		if len(spec.Argv) == 0 || !slices.Equal(spec.Argv, q.Argv) || !slices.Equal(spec.Env, q.Env) || spec.Workdir != q.Workdir || spec.Detach != q.Detach {
			t.Fatalf("spec %+v from %+v", spec, q)
		}
		if (q.Timeout != "") != (spec.Timeout > 0) || spec.Timeout < 0 || (q.OutputLimit != "") != (spec.OutputLimit > 0) || spec.OutputLimit < 0 {
			t.Fatalf("timeout %v, output limit %v from %q, %q", spec.Timeout, spec.OutputLimit, q.Timeout, q.OutputLimit)
		}
		if q.StdinB64 == "" {
			if spec.Stdin != nil {
				t.Fatal("stdin open without stdin_b64")
			}
			return
		}
		var got bytes.Buffer
		got.ReadFrom(spec.Stdin)
		if want := must(base64.StdEncoding.DecodeString(q.StdinB64)); !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("stdin %q, want %q", got.Bytes(), want)
		}
	})
}

func FuzzRunCode(f *testing.F) {
	for _, b := range []string{
		`{"code":"print(1)","language":"python"}`,
		`{"code":"echo hi","language":"bash","run_timeout":2.5,"compile_timeout":1,"memory_limit_MB":128,"stdin":"x","files":{"a.txt":"aGk="},"fetch_files":["out.txt"]}`,
		`{"code":"1","language":"Python","run_timeout":0}`, `{"code":"1","language":"python","run_timeout":-1}`,
		`{"code":"1","language":"python","run_timeout":86401}`,
		`{"code":"1","language":"python","memory_limit_MB":-1}`,
		`{"code":"1","language":"python","memory_limit_MB":1e300}`, `{"code":"1","language":"python","memory_limit_MB":3}`,
		`{"code":"1","language":"ruby"}`, `{"code":"1","language":"python","files":{"../../etc/x":"!!"}}`,
		`{"code":"1","language":"python","files":{"/etc/passwd":""}}`, `{"code":"1"}`, `{}`, `[]`, ``,
	} {
		f.Add([]byte(b))
	}
	s, eng, _ := newFuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := do(t, h, false, "POST", "/run_code", string(body))
		jobs := eng.Checked()
		if rec.Code != http.StatusOK {
			errorShape(t, rec)
			if len(jobs) > 0 {
				t.Fatal("a refused body reached the engine")
			}
			return
		}
		var resp struct {
			FusionResponse
			Files map[string]string `json:"files"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("the answer is not a RunCodeResponse: %v", err)
		}
		// Nothing ran: the answer is SandboxError, with a reason.
		if resp.Status != fusionSandboxError || resp.Message == "" || resp.RunResult != nil || resp.Files == nil {
			t.Fatalf("answer %+v, though nothing ran", resp)
		}
		if len(jobs) == 0 {
			return
		}
		var q FusionRequest
		if err := decodeJSON(bytes.NewReader(body), &q); err != nil {
			t.Fatalf("the engine was asked for a body that does not decode: %v", err)
		}
		job := jobs[0]
		checkJob(t, job)
		if _, ok := service.CodeLanguage(strings.ToLower(q.Language)); !ok || len(jobs) != 1 {
			t.Fatalf("language %q reached the engine (%d specs)", q.Language, len(jobs))
		}
		// The sandbox is never wider than asked: a timeout or a memory
		// limit given is at most that, never airlock's default instead.
		l := job.Policy.Limits
		if v := q.RunTimeout; v != nil && float64(l.Timeout) > *v*float64(time.Second)+1 {
			t.Fatalf("run_timeout %v s asked, a timeout of %v reached the engine", *v, l.Timeout)
		}
		if v := q.RunTimeout; v == nil && l.Timeout != service.CodeTimeout {
			t.Fatalf("no run_timeout, a timeout of %v reached the engine", l.Timeout)
		}
		if v := q.MemoryLimitMB; v != nil && *v != -1 && (*v <= 0 || float64(l.Memory) > *v*(1<<20)+1) {
			t.Fatalf("memory_limit_MB %v asked, %v reached the engine", *v, l.Memory)
		}
	})
}
