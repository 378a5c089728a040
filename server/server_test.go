package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

const testToken = "0123456789abcdef0123456789abcdef"

// newTestServer is a server on an empty root whose engines are
// unavailable: enough for everything decided before a sandbox is made.
func newTestServer(t *testing.T, extra map[string]http.Handler) (*Server, string) {
	t.Helper()
	root := t.TempDir()
	s, err := New(Options{Service: service.New(root, &fuzztest.NoEngines{}), Token: testToken, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	return s, root
}

// do sends one request to h, over "TCP" when tcp is set.
func do(t *testing.T, h http.Handler, tcp bool, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if tcp {
		req = req.WithContext(WithTCP(req.Context()))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) ErrorDetail {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Kind == "" {
		t.Fatalf("status %d: not the error shape: %q", rec.Code, rec.Body.String())
	}
	if statusOf(e.Error.Kind) != rec.Code {
		t.Errorf("kind %s came with status %d, want %d", e.Error.Kind, rec.Code, statusOf(e.Error.Kind))
	}
	if e.Error.Message == "" {
		t.Error("an error without a message")
	}
	return e.Error
}

func TestAuth(t *testing.T) {
	s, _ := newTestServer(t, nil)
	h := s.Handler()
	for _, c := range []struct {
		name string
		tcp  bool
		hdr  []string
		want int
	}{
		{"socket without token", false, nil, 200},
		{"tcp without token", true, nil, 401},
		{"tcp wrong token", true, []string{"Authorization", "Bearer " + strings.Repeat("x", len(testToken))}, 401},
		{"tcp token prefix", true, []string{"Authorization", "Bearer " + testToken[:10]}, 401},
		{"tcp not bearer", true, []string{"Authorization", "Basic " + testToken}, 401},
		{"tcp right token", true, []string{"Authorization", "Bearer " + testToken}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := do(t, h, c.tcp, "GET", "/v1/healthz", "", c.hdr...)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.want, rec.Body)
			}
			if c.want == 401 {
				if k := errorOf(t, rec).Kind; k != KindUnauthorized {
					t.Errorf("kind %s", k)
				}
			}
		})
	}
	// No token configured: TCP is always refused.
	s.opt.Token = ""
	if rec := do(t, s.Handler(), true, "GET", "/v1/healthz", "", "Authorization", "Bearer "); rec.Code != 401 {
		t.Fatalf("empty token accepted: %d", rec.Code)
	}
}

func TestErrors(t *testing.T) {
	s, _ := newTestServer(t, nil)
	h := s.Handler()
	big := `{"argv":["x"],"stdin_b64":"` + strings.Repeat("A", DefaultMaxBody) + `"}`
	for _, c := range []struct {
		name, method, target, body, kind, says string
	}{
		{"unknown field", "POST", "/v1/runs", `{"argv":["true"],"memroy":"1GiB"}`, KindInvalidInput, `"memroy"`},
		{"no argv", "POST", "/v1/runs", `{}`, KindInvalidInput, "argv"},
		{"argv a string", "POST", "/v1/runs", `{"argv":"echo hi"}`, KindInvalidInput, "argv"},
		{"bad size", "POST", "/v1/runs", `{"argv":["true"],"memory":"lots"}`, KindInvalidInput, "memory"},
		{"zero duration", "POST", "/v1/runs", `{"argv":["true"],"timeout":"0s"}`, KindInvalidInput, "timeout"},
		{"bad engine", "POST", "/v1/runs", `{"argv":["true"],"engine":"qemu"}`, KindInvalidInput, "engine"},
		{"host path", "POST", "/v1/runs", `{"argv":["true"],"input":["/etc"]}`, KindInvalidInput, "host path"},
		{"bad stdin", "POST", "/v1/runs", `{"argv":["true"],"stdin_b64":"%%%"}`, KindInvalidInput, "stdin_b64"},
		{"not json", "POST", "/v1/runs", `argv=true`, KindInvalidInput, "JSON"},
		{"two objects", "POST", "/v1/runs", `{"argv":["true"]}{}`, KindInvalidInput, "more than one"},
		{"empty", "POST", "/v1/sandboxes", ``, KindInvalidInput, "empty"},
		{"bad ttl", "POST", "/v1/sandboxes", `{"ttl":"forever"}`, KindInvalidInput, "ttl"},
		{"bad download type", "POST", "/v1/sandboxes", `{"download_types":["x/nope"]}`, KindInvalidInput, "x/nope"},
		{"body too big", "POST", "/v1/runs", big, KindOverLimit, "--max-body"},
		{"bad sandbox id", "GET", "/v1/sandboxes/nope", ``, KindInvalidInput, "sandbox id"},
		{"gone sandbox", "GET", "/v1/sandboxes/sb-0123456789abcdef0123", ``, KindNotFound, "gone"},
		{"exec in gone sandbox", "POST", "/v1/sandboxes/sb-0123456789abcdef0123/exec", `{"argv":["true"]}`, KindNotFound, "gone"},
		{"exec with type", "POST", "/v1/sandboxes/sb-0123456789abcdef0123/exec", `{"type":"execute","argv":["true"]}`, KindInvalidInput, "WebSocket"},
		{"file without path", "GET", "/v1/sandboxes/sb-0123456789abcdef0123/files", ``, KindInvalidInput, "?path="},
		{"read files of a gone sandbox", "POST", "/v1/sandboxes/sb-0123456789abcdef0123/files/read", `{"paths":["a.txt"]}`, KindNotFound, "gone"},
		{"read files, paths a string", "POST", "/v1/sandboxes/sb-0123456789abcdef0123/files/read", `{"paths":"a.txt"}`, KindInvalidInput, "paths"},
		{"read files, unknown field", "POST", "/v1/sandboxes/sb-0123456789abcdef0123/files/read", `{"path":["a.txt"]}`, KindInvalidInput, "path"},
		{"unknown route", "GET", "/v2/whatever", ``, KindNotFound, "no route"},
		{"wrong method", "PATCH", "/v1/sandboxes/sb-0123456789abcdef0123", ``, KindInvalidInput, "takes GET, DELETE"},
		{"engine unavailable", "POST", "/v1/runs", `{"argv":["true"]}`, KindUnavailable, "no engine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := do(t, h, false, c.method, c.target, c.body)
			e := errorOf(t, rec)
			if e.Kind != c.kind || !strings.Contains(e.Message, c.says) {
				t.Fatalf("got %s %q; want %s saying %q", e.Kind, e.Message, c.kind, c.says)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind string
	}{
		{errdefs.ErrInvalidArgument, KindInvalidInput},
		{errdefs.ErrNotFound, KindNotFound},
		{errdefs.ErrUnavailable, KindUnavailable},
		{errdefs.ErrConflict, string(errkind.Conflict)},
		{errdefs.ErrAlreadyExists, string(errkind.AlreadyExists)},
		{fmt.Errorf("%w: %w", engine.ErrSandboxLost, errdefs.ErrUnavailable), string(errkind.SandboxLost)},
		{&http.MaxBytesError{Limit: 1}, KindOverLimit},
		{errdefs.ErrResourceExhausted, KindOverLimit},
		{context.DeadlineExceeded, KindTimeout},
		{&runner.TransferError{Reason: runner.ReasonSymlink, Err: errdefs.ErrInvalidArgument}, KindInvalidInput},
		{&runner.TransferError{Reason: runner.ReasonNotFound, Err: errdefs.ErrNotFound}, KindNotFound},
		{errors.New("boom"), KindInternal},
	} {
		if k := kindOf(c.err); k != c.kind {
			t.Errorf("kindOf(%v) = %s, want %s", c.err, k, c.kind)
		}
	}
	d := errorDetail(&runner.TransferError{Direction: runner.DirectionDownload, Path: "/x", Reason: runner.ReasonSymlink, Err: errdefs.ErrInvalidArgument})
	if d.Reason != "symlink" {
		t.Errorf("a refused transfer's reason word is missing: %+v", d)
	}
}

func TestDeleteGoneIsIdempotent(t *testing.T) {
	s, _ := newTestServer(t, nil)
	for range 2 {
		if rec := do(t, s.Handler(), false, "DELETE", "/v1/sandboxes/sb-0123456789abcdef0123", ""); rec.Code != http.StatusNoContent {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

func TestExtraHandlersBehindAuth(t *testing.T) {
	var hits atomic.Int32
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); io.WriteString(w, "mcp "+r.URL.Path) })
	s, _ := newTestServer(t, map[string]http.Handler{"/mcp": mcp})
	h := s.Handler()
	if rec := do(t, h, true, "POST", "/mcp", "{}"); rec.Code != 401 || hits.Load() != 0 {
		t.Fatalf("an extra handler was reached without the token: %d", rec.Code)
	}
	for _, p := range []string{"/mcp", "/mcp/sse"} {
		rec := do(t, h, true, "POST", p, "{}", "Authorization", "Bearer "+testToken)
		if rec.Code != 200 || rec.Body.String() != "mcp "+p {
			t.Fatalf("%s: %d %q", p, rec.Code, rec.Body)
		}
	}
}

func TestOpenAPIListsEveryRoute(t *testing.T) {
	s, _ := newTestServer(t, nil)
	rec := do(t, s.Handler(), false, "GET", "/v1/openapi.json", "")
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	api, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rt := range s.routes() {
		if _, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]; !ok {
			t.Errorf("%s %s is served but not in openapi.json", rt.method, rt.path)
		}
		if !strings.Contains(string(api), rt.method+" "+rt.path) && !strings.Contains(string(api), rt.path) {
			t.Errorf("%s %s is served but not in docs/api.md", rt.method, rt.path)
		}
		n++
	}
	ops := 0
	for _, p := range doc.Paths {
		for m := range p {
			if m != "parameters" {
				ops++
			}
		}
	}
	if ops != n {
		t.Errorf("openapi.json has %d operations, the server %d routes", ops, n)
	}
}

func TestMetricsParse(t *testing.T) {
	s, _ := newTestServer(t, nil)
	rec := do(t, s.Handler(), false, "GET", "/metrics", "")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"airlock_sandboxes_active", "airlock_sandbox_age_seconds", "airlock_orphans_reaped_total",
		"airlock_sandbox_create_duration_seconds", "airlock_exec_duration_seconds", "airlock_termination_failures_total",
		"airlock_rejected_files_total", "airlock_runs_total"} {
		if fams[name] == nil {
			t.Errorf("series %s missing", name)
		}
	}
}

func TestIdempotency(t *testing.T) {
	i := newIdempotency(t.TempDir())
	var calls atomic.Int32
	mk := func() (int, []byte) { calls.Add(1); return 201, []byte(`{"id":"sb-1"}`) }
	var wg sync.WaitGroup
	outs := make([]string, 8)
	for n := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, b, _, err := i.do("POST /v1/sandboxes", "k1", []byte("{}"), true, mk)
			if err != nil || st != 201 {
				t.Errorf("%d %v", st, err)
			}
			outs[n] = string(b)
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("%d creates for one key", calls.Load())
	}
	// A new server on the same root replays it from disk.
	j := newIdempotency(filepath.Dir(filepath.Dir(i.dir)))
	if _, b, replayed, _ := j.do("POST /v1/sandboxes", "k1", []byte("{}"), true, mk); !replayed || string(b) != outs[0] || calls.Load() != 1 {
		t.Fatalf("not replayed after a restart: %v %s", replayed, b)
	}
	if _, _, _, err := j.do("POST /v1/sandboxes", "k1", []byte(`{"ttl":"1m"}`), true, mk); kindOf(err) != KindInvalidInput {
		t.Fatalf("a key reused with another body: %v", err)
	}
	// A failure is not remembered: the retry runs again.
	fails := 0
	fail := func() (int, []byte) { fails++; return 503, nil }
	i.do("POST /v1/runs", "k2", nil, false, fail)
	i.do("POST /v1/runs", "k2", nil, false, fail)
	if fails != 2 {
		t.Fatalf("a failed attempt was replayed")
	}
	for _, bad := range []string{"", "has space", strings.Repeat("k", 201), "é"} {
		if checkKey(bad) == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
}

func TestListenTCPRefusesNonLoopbackWithoutTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if l, err := ListenTCP(addr, nil); err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--tls-cert") {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: %v", addr, err)
		}
	}
	l, err := ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestListenUnixMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.sock")
	l, err := ListenUnix(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v (%v), want 0660", fi.Mode().Perm(), err)
	}
	if _, err := ListenUnix(p); !errdefs.IsConflict(err) {
		t.Fatalf("a second server on a live socket: %v", err)
	}
	l.Close()
	// A file that is not a socket is never removed.
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, []byte("x"), 0o600)
	if _, err := ListenUnix(f); err == nil {
		t.Fatal("listened over a regular file")
	}
}

func TestServeDistinguishesSocketAndTCP(t *testing.T) {
	s, _ := newTestServer(t, nil)
	sock := filepath.Join(t.TempDir(), "s.sock")
	ul, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ul, tl) }()
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if r, err := uc.Get("http://airlock/v1/healthz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("socket: %v %v", r, err)
	}
	if r, err := http.Get("http://" + tl.Addr().String() + "/v1/healthz"); err != nil || r.StatusCode != 401 {
		t.Fatalf("tcp without token: %v %v", r, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFusionFetchNamesBounded: a fetch_files of more names than the bound
// is refused while the body is decoded, before a sandbox is made; each
// name past a response's files would otherwise be an omission of its own,
// held until the answer.
func TestFusionFetchNamesBounded(t *testing.T) {
	s, _ := newTestServer(t, nil)
	names, _ := json.Marshal(slices.Repeat([]string{"a"}, maxFetchNames+1))
	rec := do(t, s.Handler(), false, "POST", "/run_code", `{"code":"x","language":"python","files":{},"fetch_files":`+string(names)+`}`)
	if e := errorOf(t, rec); rec.Code != 400 || e.Kind != KindInvalidInput || !strings.Contains(e.Message, "fetch_files with 1001 entries: give at most 1000 names") {
		t.Fatalf("%d %+v", rec.Code, e)
	}
}

func TestFusionRefusesUnknownLanguage(t *testing.T) {
	s, _ := newTestServer(t, nil)
	rec := do(t, s.Handler(), false, "POST", "/run_code", `{"code":"x","language":"cobol","files":{},"fetch_files":[]}`)
	var r FusionResponse
	json.Unmarshal(rec.Body.Bytes(), &r)
	if rec.Code != 200 || r.Status != "SandboxError" || !strings.Contains(r.Message, "cobol") {
		t.Fatalf("%d %+v", rec.Code, r)
	}
	if rec := do(t, s.Handler(), false, "GET", "/v1/ping", ""); rec.Body.String() != "\"pong\"\n" {
		t.Fatalf("ping: %q", rec.Body)
	}
	// The token as the URL's first segment, for the SandboxFusion routes only.
	if rec := do(t, s.Handler(), true, "GET", "/t/"+testToken+"/v1/ping", ""); rec.Code != 200 || rec.Body.String() != "\"pong\"\n" {
		t.Fatalf("ping with the token in the URL: %d %q", rec.Code, rec.Body)
	}
	for _, p := range []string{"/t/" + testToken + "/v1/sandboxes", "/t/wrong" + testToken + "/v1/ping", "/t//run_code", "/t/" + testToken + "/../v1/sandboxes"} {
		if rec := do(t, s.Handler(), true, "GET", p, ""); rec.Code != 401 {
			t.Errorf("%s over TCP: %d, want 401", p, rec.Code)
		}
	}
	// The exec WebSocket asked without an upgrade: the error shape, not
	// the WebSocket library's plain 426.
	rec = do(t, s.Handler(), false, "GET", "/v1/sandboxes/sb-00112233445566778899/exec/ws", "")
	if e := errorOf(t, rec); e.Kind != "invalid_input" || !strings.Contains(e.Message, "Upgrade: websocket") {
		t.Errorf("GET …/exec/ws without an upgrade: %d %+v", rec.Code, e)
	}
	// A method the route does not take is answered in the error shape,
	// with Allow, as without the token in the URL.
	rec = do(t, s.Handler(), true, "GET", "/t/"+testToken+"/run_code", "")
	if e := errorOf(t, rec); e.Kind != "invalid_input" || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET /t/<token>/run_code: %d %+v, Allow %q", rec.Code, e, rec.Header().Get("Allow"))
	}
}

func TestLoadToken(t *testing.T) {
	root := t.TempDir()
	tok, err := LoadToken(root, "")
	if err != nil || len(tok) != 64 {
		t.Fatalf("generated token %q: %v", tok, err)
	}
	fi, _ := os.Stat(filepath.Join(root, "server", "token"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token mode %v", fi.Mode().Perm())
	}
	if again, _ := LoadToken(root, ""); again != tok {
		t.Fatal("the token changed on the second start")
	}
	f := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(f, []byte("short\n"), 0o600)
	if _, err := LoadToken(root, f); err == nil {
		t.Fatal("a short token accepted")
	}
	os.WriteFile(f, []byte(testToken+"\n"), 0o644)
	os.Chmod(f, 0o644)
	if _, err := LoadToken(root, f); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable token file: %v", err)
	}
	os.Chmod(f, 0o600)
	if got, err := LoadToken(root, f); err != nil || got != testToken {
		t.Fatalf("%q %v", got, err)
	}
}

func TestServeTLSOnAnyAddress(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	conf := &tls.Config{Certificates: ts.TLS.Certificates}
	client := ts.Client()
	ts.Close()

	s, _ := newTestServer(t, nil)
	l, err := ListenTCP("0.0.0.0:0", conf)
	if err != nil {
		t.Fatalf("a non-loopback address with TLS: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	req, _ := http.NewRequest("GET", "https://127.0.0.1:"+port+"/v1/healthz", nil)
	if r, err := client.Do(req); err != nil || r.StatusCode != 401 {
		t.Fatalf("without the token over TLS: %v %v", r, err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if r, err := client.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("with the token over TLS: %v %v", r, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// /run_code's memory_limit_MB: -1 (SandboxFusion's default) takes
// airlock's default; 0 and other negatives are refused like any zero
// limit, before anything reaches the engine.
func TestFusionMemoryLimit(t *testing.T) {
	s, eng, _ := newFuzzServer(t)
	h := s.Handler()
	body := func(mb string) string {
		return `{"code":"print(1)","language":"python","memory_limit_MB":` + mb + `}`
	}
	rec := do(t, h, false, "POST", "/run_code", body("-1"))
	jobs := eng.Checked()
	if rec.Code != 200 || len(jobs) != 1 || jobs[0].Policy.Limits.Memory != isolation.Default().Limits.Memory {
		t.Fatalf("memory_limit_MB -1: %d %s, %d specs; want one with the default memory", rec.Code, rec.Body, len(jobs))
	}
	for _, mb := range []string{"0", "-2", "-0.5", "1e-9"} {
		rec := do(t, h, false, "POST", "/run_code", body(mb))
		var r FusionResponse
		json.Unmarshal(rec.Body.Bytes(), &r)
		if rec.Code != 200 || r.Status != fusionSandboxError || !strings.Contains(r.Message, "memory_limit_MB") || !strings.Contains(r.Message, "-1") {
			t.Errorf("memory_limit_MB %s: %d %+v; want SandboxError naming memory_limit_MB and -1", mb, rec.Code, r)
		}
		if jobs := eng.Checked(); len(jobs) != 0 {
			t.Errorf("memory_limit_MB %s reached the engine: %+v", mb, jobs[0].Policy.Limits)
		}
	}
}

// TestTokenFileModes: a token file readable by every user, or writable by
// anyone but its owner, is refused; one its group may read is taken.
func TestTokenFileModes(t *testing.T) {
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o640: true, 0o604: false, 0o622: false, 0o660: false, 0o602: false} {
		f := filepath.Join(t.TempDir(), "tok")
		os.WriteFile(f, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
		os.Chmod(f, mode)
		if _, err := LoadToken(t.TempDir(), f); (err == nil) != ok {
			t.Errorf("mode %04o: %v, want taken %v", mode, err, ok)
		}
	}
}

// Every listed sandbox is counted in the gauge, paused and terminating
// ones included, and no more than once.
func TestMetricsCountEveryState(t *testing.T) {
	var list []runner.SandboxInfo
	for _, st := range []lifecycle.State{lifecycle.Paused, lifecycle.Paused, lifecycle.Terminating, lifecycle.Ready, "unheard-of"} {
		list = append(list, runner.SandboxInfo{State: st, CreatedAt: time.Now()})
	}
	var e expo
	writeSandboxes(&e, func() ([]runner.SandboxInfo, error) { return list, nil })
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(e.b.String()))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	total := 0.0
	for _, m := range fams["airlock_sandboxes_active"].GetMetric() {
		st := m.GetLabel()[0].GetValue()
		if _, dup := got[st]; dup {
			t.Errorf("state %q written twice", st)
		}
		got[st] = m.GetGauge().GetValue()
		total += got[st]
	}
	if got["paused"] != 2 || got["terminating"] != 1 || got["ready"] != 1 || got["unheard-of"] != 1 || total != float64(len(list)) {
		t.Fatalf("gauge %v for %d sandboxes", got, len(list))
	}
}
