package docker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
)

// fakeDockerd answers the Engine API calls a run makes. Each route maps a
// request ("POST /containers/create") to a handler; anything else is a 500.
// Calls are recorded in order.
type fakeDockerd struct {
	mu     sync.Mutex
	calls  []string
	routes map[string]http.HandlerFunc
	quit   chan struct{} // closed when the test ends: hung handlers return
}

func (f *fakeDockerd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if i := strings.Index(p[1:], "/"); strings.HasPrefix(p, "/v1.") && i > 0 {
		p = p[i+1:]
	}
	key := r.Method + " " + p
	f.mu.Lock()
	f.calls = append(f.calls, key)
	h := f.routes[key]
	f.mu.Unlock()
	switch {
	case p == "/_ping":
		w.Header().Set("API-Version", "1.41")
		w.Write([]byte("OK"))
	case h != nil:
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		go func() {
			select {
			case <-f.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		h(w, r.WithContext(ctx))
	default:
		http.Error(w, `{"message":"not faked"}`, http.StatusInternalServerError)
	}
}

func (f *fakeDockerd) called(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == key {
			return true
		}
	}
	return false
}

func jsonReply(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}

// hang answers only when the client gives up.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// stream answers at once, then sends nothing, as /events does.
func stream(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// goodInfo is a dockerd with airlock's runsc registered as setup does.
var goodInfo = map[string]any{
	"CgroupDriver": "systemd",
	// Every limit applies (limitFacts).
	"MemoryLimit": true, "SwapLimit": true, "PidsLimit": true, "CpuCfsQuota": true,
	"Runtimes": map[string]any{
		"airlock-runsc": map[string]any{"path": "/usr/local/bin/runsc", "runtimeArgs": []string{"--network=none", "--oci-seccomp", "--debug-log=/var/lib/airlock/sandbox-logs/%ID%/", "--debug-command=boot"}},
	},
}

func startFake(t *testing.T, routes map[string]http.HandlerFunc) (*fakeDockerd, *Engine) {
	t.Helper()
	f := &fakeDockerd{routes: routes, quit: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.quit) })
	e, err := New(WithHost("tcp://" + strings.TrimPrefix(srv.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	// Long enough that an answering fake is never taken for a hung one on
	// a loaded host (200 ms once was).
	e.setupTimeout = time.Second
	return f, e
}

func fakeJob(t *testing.T, m isolation.Mode) *engine.SandboxSpec {
	t.Helper()
	p := isolation.Default()
	p.Isolation = m
	prof, err := seccomp.Load("default")
	if err == nil && m == isolation.GVisor {
		prof, err = seccomp.ForGVisor(prof)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.Seccomp = &isolation.SeccompProfile{JSON: prof.Bytes(), Spec: prof.Spec(), SHA256: prof.SHA256()}
	return &engine.SandboxSpec{ID: "00112233445566778899", Image: digest.Digest("sha256:" + strings.Repeat("ab", 32)), Init: &engine.Process{Argv: []string{"true"}}, Policy: p, Deadline: time.Now().Add(time.Hour)}
}

// runWithin runs the job as a task (run, wait, destroy)
// and fails the test if that outlives limit.
func runWithin(t *testing.T, e *Engine, m isolation.Mode, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		sb, err := e.Run(ctx, fakeJob(t, m))
		if err == nil {
			_, err = sb.Wait(ctx)
			sb.Destroy(ctx)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Run still waiting on dockerd after %v", limit)
		return nil
	}
}

// hijackAttach answers an attach as dockerd does, and holds the stream
// until the request ends.
func hijackAttach(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	conn.Write([]byte("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"))
	<-r.Context().Done()
	conn.Close()
}

func TestSetupCallsAreBounded(t *testing.T) {
	const cid = "c0ffee"
	for _, tc := range []struct {
		name, hung, removed string
		routes              map[string]http.HandlerFunc
	}{
		{"create", "POST /containers/create", "DELETE /containers/airlock-00112233445566778899", map[string]http.HandlerFunc{
			"POST /containers/create": hang,
		}},
		{"attach", "POST /containers/" + cid + "/attach", "DELETE /containers/" + cid, map[string]http.HandlerFunc{
			"POST /containers/" + cid + "/attach": hang,
		}},
		{"wait", "POST /containers/" + cid + "/wait", "DELETE /containers/" + cid, map[string]http.HandlerFunc{
			"POST /containers/" + cid + "/attach": hijackAttach,
			"POST /containers/" + cid + "/wait":   hang,
		}},
		{"start", "POST /containers/" + cid + "/start", "DELETE /containers/" + cid, map[string]http.HandlerFunc{
			"POST /containers/" + cid + "/attach": hijackAttach,
			"POST /containers/" + cid + "/wait":   stream,
			"POST /containers/" + cid + "/start":  hang,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			routes := map[string]http.HandlerFunc{
				"GET /info":               jsonReply(goodInfo),
				"POST /containers/create": jsonReply(map[string]any{"Id": cid}),
				"GET /events":             stream,
				"DELETE /containers/" + cid: func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusNoContent)
				},
				"DELETE /containers/airlock-00112233445566778899": func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusNoContent)
				},
			}
			for k, h := range tc.routes {
				routes[k] = h
			}
			f, e := startFake(t, routes)
			err := runWithin(t, e, isolation.GVisor, 10*time.Second)
			if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "did not answer") {
				t.Fatalf("error %v; want unavailable, saying dockerd did not answer", err)
			}
			if !f.called(tc.hung) || !f.called(tc.removed) {
				t.Errorf("calls %v; want %q, then %q", f.calls, tc.hung, tc.removed)
			}
		})
	}
}

// Without dockerd's facts a run cannot nest its cgroup or tell a sandbox
// killed from outside: it must not start, under either runtime.
func TestRunWithoutDaemonFactsCreatesNothing(t *testing.T) {
	f, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"message":"busy"}`, http.StatusInternalServerError)
		},
		"POST /containers/create": hang,
	})
	for _, m := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		if err := runWithin(t, e, m, 10*time.Second); !errdefs.IsUnavailable(err) {
			t.Errorf("%s: error %v; want unavailable", m, err)
		}
	}
	if f.called("POST /containers/create") {
		t.Error("a sandbox was created without dockerd's facts")
	}
}

func TestGVisorWithoutSandboxLogsIsRefused(t *testing.T) {
	info := map[string]any{
		"CgroupDriver": "systemd",
		"MemoryLimit":  true, "SwapLimit": true, "PidsLimit": true, "CpuCfsQuota": true,
		"Runtimes": map[string]any{
			"airlock-runsc": map[string]any{"path": "/usr/local/bin/runsc", "runtimeArgs": []string{"--network=none", "--oci-seccomp"}},
		},
	}
	f, e := startFake(t, map[string]http.HandlerFunc{"GET /info": jsonReply(info), "POST /containers/create": hang})
	if err := e.Check(context.Background(), fakeJob(t, isolation.GVisor)); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "--debug-log") {
		t.Errorf("Check: %v; want unavailable, naming --debug-log", err)
	}
	if err := runWithin(t, e, isolation.GVisor, 10*time.Second); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "--debug-log") {
		t.Errorf("Run: %v; want unavailable, naming --debug-log", err)
	}
	if f.called("POST /containers/create") {
		t.Error("a sandbox was created without loss detection")
	}
}

// A policy with egress is refused before dockerd is asked for anything:
// a docker container is never given a network, and the refusal names the
// engine to use.
func TestEgressRefused(t *testing.T) {
	f, e := startFake(t, map[string]http.HandlerFunc{"GET /info": jsonReply(goodInfo), "POST /containers/create": hang})
	j := fakeJob(t, isolation.GVisor)
	allow, err := egress.ParseAllowlist([]string{"pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	j.Policy.Egress.Allow = allow
	if err := e.Check(context.Background(), j); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--engine oci") {
		t.Errorf("Check: %v; want invalid input naming --engine oci", err)
	}
	if _, err := e.Run(context.Background(), j); err == nil {
		t.Error("Run took a policy with egress")
	}
	if f.called("POST /containers/create") {
		t.Error("a container was created for a policy with egress")
	}
}
