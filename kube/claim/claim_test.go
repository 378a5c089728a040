package claim

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/airlock-sandbox/airlock/runner"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/kube/cluster/clustertest"
)

// apiServer is the part of an API server with agent-sandbox that a claim
// meets: warm pool "py", claims that become ready after a few reads (or
// never), and their pods.
type apiServer struct {
	mu      sync.Mutex
	claims  map[string]int // reads since creation; -1 once deleted
	never   bool           // claims never become ready
	failed  int            // the first claims get a sandbox whose pod failed
	deletes int
	message string // the message of a claim not yet ready
	// pod and node name the ready claim's pod and its node ("py-abcde",
	// "airlock-a" when empty); image and runtimeClass are its container's
	// image and its runtime class ("airlock/py@sha256:0123", "gvisor").
	pod, node           string
	image, runtimeClass string
	// deadline, when set, is the pod's activeDeadlineSeconds (600); widen,
	// when set, changes the pod's spec, renderedSpec's.
	deadline uint64
	widen    func(spec map[string]any)
	// stall, when set, is a method and path prefix whose answers send
	// their headers and part of a body, then nothing until the test ends.
	stall string
}

// renderedSpec is a pod spec as `airlock kube render` writes it.
var renderedSpec = clustertest.RenderedSpec(600)

// base is the path of the namespace's agent-sandbox objects.
const base = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/team"

func (a *apiServer) handler(done <-chan struct{}) http.Handler {
	m := http.NewServeMux()
	notFound := func(w http.ResponseWriter, what string) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","status":"Failure","message":%q,"reason":"NotFound","code":404}`, what+" not found")
	}
	m.HandleFunc("GET "+base+"/sandboxwarmpools/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != "py" {
			notFound(w, "sandboxwarmpools "+r.PathValue("name"))
			return
		}
		fmt.Fprint(w, `{"metadata":{"name":"py"},"spec":{"replicas":2}}`)
	})
	m.HandleFunc("POST "+base+"/sandboxclaims", func(w http.ResponseWriter, r *http.Request) {
		var c cluster.SandboxClaim
		json.NewDecoder(r.Body).Decode(&c)
		a.mu.Lock()
		defer a.mu.Unlock()
		if c.Spec.WarmPoolRef.Name != "py" || c.Metadata.Namespace != "team" {
			http.Error(w, "bad claim", http.StatusUnprocessableEntity)
			return
		}
		a.claims[c.Metadata.Name] = 0
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(c)
	})
	m.HandleFunc("GET "+base+"/sandboxclaims/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		n, ok := a.claims[r.PathValue("name")]
		if !ok || n < 0 {
			delete(a.claims, r.PathValue("name"))
			notFound(w, "sandboxclaims "+r.PathValue("name"))
			return
		}
		a.claims[r.PathValue("name")] = n + 1
		msg, _ := json.Marshal(a.message)
		status := `{"conditions":[{"type":"Ready","status":"False","reason":"SandboxNotReady","message":` + string(msg) + `}]}`
		if a.deletes < a.failed {
			status = `{"conditions":[{"type":"Ready","status":"False","reason":"PodFailed","message":"Pod failed"}],"sandbox":{"name":"py-dead"}}`
		} else if n >= 2 && !a.never {
			pod, _ := json.Marshal(cmp.Or(a.pod, "py-abcde"))
			status = `{"conditions":[{"type":"Ready","status":"True"}],"sandbox":{"name":` + string(pod) + `}}`
		}
		fmt.Fprintf(w, `{"metadata":{"name":%q},"spec":{"warmPoolRef":{"name":"py"}},"status":%s}`, r.PathValue("name"), status)
	})
	m.HandleFunc("DELETE "+base+"/sandboxclaims/{name}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.deletes++
		if _, ok := a.claims[r.PathValue("name")]; !ok {
			notFound(w, "sandboxclaims "+r.PathValue("name"))
			return
		}
		a.claims[r.PathValue("name")] = -1
		fmt.Fprint(w, `{"kind":"Status","status":"Success"}`)
	})
	m.HandleFunc("GET /api/v1/namespaces/team/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") != cmp.Or(a.pod, "py-abcde") {
			notFound(w, "pods "+r.PathValue("name"))
			return
		}
		var spec map[string]any
		json.Unmarshal([]byte(renderedSpec), &spec)
		spec["nodeName"], spec["runtimeClassName"] = cmp.Or(a.node, "airlock-a"), cmp.Or(a.runtimeClass, "gvisor")
		spec["containers"].([]any)[0].(map[string]any)["image"] = cmp.Or(a.image, "airlock/py@sha256:0123")
		if a.deadline != 0 {
			spec["activeDeadlineSeconds"] = a.deadline
		}
		if a.widen != nil {
			a.widen(spec)
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": r.PathValue("name")}, "spec": spec,
			"status": map[string]any{"phase": "Running", "startTime": "2026-01-02T03:04:05Z"}})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		stall := a.stall
		a.mu.Unlock()
		if stall == "" || !strings.HasPrefix(r.Method+" "+r.URL.Path, stall) {
			m.ServeHTTP(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"metadata":`)
		w.(http.Flusher).Flush()
		select {
		case <-done:
		case <-r.Context().Done():
		}
	})
}

// setup serves a and writes a kubeconfig for it.
func setup(t *testing.T, a *apiServer) (*cluster.Config, *Store) {
	t.Helper()
	a.claims = map[string]int{}
	done := make(chan struct{})
	srv := httptest.NewTLSServer(a.handler(done))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`current-context: c
contexts: [{name: c, context: {cluster: k, user: u, namespace: team}}]
clusters: [{name: k, cluster: {server: `+srv.URL+`, certificate-authority-data: `+ca+`}}]
users: [{name: u, user: {token: tok}}]
`), 0o600)
	cfg, err := cluster.Load(kc, "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, Open(t.TempDir())
}

func TestCreateAndDestroy(t *testing.T) {
	a := &apiServer{}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	var progress []string
	rec, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py", Labels: map[string]string{"agent": "x"},
		Progress: func(p string) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	want := Record{ID: id, State: Ready, Engine: "kube", Kubeconfig: cfg.Path, Context: "c", Server: cfg.Server, Namespace: "team", Claim: id, WarmPool: "py",
		Pod: "py-abcde", Node: "airlock-a", Image: "airlock/py@sha256:0123", RuntimeClass: "gvisor", Labels: map[string]string{"agent": "x"},
		CreatedAt: rec.CreatedAt, ExpiresAt: time.Date(2026, 1, 2, 3, 14, 5, 0, time.UTC)}
	if b, w := fmt.Sprint(rec), fmt.Sprint(want); b != w {
		t.Errorf("record\n%s\nwant\n%s", b, w)
	}
	if got, err := s.Get(id); err != nil || fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Errorf("the stored record: %+v, %v", got, err)
	}
	if len(progress) < 3 || !strings.HasPrefix(progress[len(progress)-1], "ready in") {
		t.Errorf("progress: %q", progress)
	}
	for range 2 { // idempotent
		if err := s.Destroy(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(id); !errdefs.IsNotFound(err) || len(a.claims) != 0 {
		t.Errorf("after destroy: %v, claims %v", err, a.claims)
	}
}

// A warm sandbox whose pod had failed is given back, and claimed again.
func TestCreateClaimsAgainAfterAFailedPod(t *testing.T) {
	a := &apiServer{failed: 1}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	var progress []string
	rec, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py", Progress: func(p string) { progress = append(progress, p) }})
	if err != nil || rec.Pod != "py-abcde" || a.deletes != 1 {
		t.Fatalf("%+v, %v; %d deletes; progress %q", rec, err, a.deletes, progress)
	}
	a.failed = 10
	id, _ = runner.NewSandboxID()
	if _, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py"}); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "pods had failed") {
		t.Errorf("every sandbox failed: %v", err)
	}
	if _, err := s.Get(id); !errdefs.IsNotFound(err) {
		t.Errorf("the record of a failed create: %v", err)
	}
}

func TestCreateFailuresLeaveNothing(t *testing.T) {
	for _, tc := range []struct {
		name, pool string
		never      bool
		is         func(error) bool
		says       string
	}{
		{"no warm pool", "nope", false, errdefs.IsNotFound, "airlock kube render --template nope"},
		{"never ready", "py", true, errdefs.IsUnavailable, "not ready within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &apiServer{never: tc.never}
			cfg, s := setup(t, a)
			id, _ := runner.NewSandboxID()
			_, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: tc.pool, Timeout: time.Second})
			if !tc.is(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v", err)
			}
			if list, _ := s.List(); len(list) != 0 || len(a.claims) != 0 {
				t.Errorf("left: records %v, claims %v", list, a.claims)
			}
		})
	}
}

// A claim's condition is the cluster's word: its progress line shows it
// cut and escaped.
func TestCreateProgressPrintable(t *testing.T) {
	a := &apiServer{message: "\x1b]0;pwned\x07\x1b[2J" + strings.Repeat("x", 1<<20)}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	var progress []string
	if _, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py", Progress: func(p string) { progress = append(progress, p) }}); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, p := range progress {
		if strings.Contains(p, "\x1b") || len(p) > 2*cluster.MaxPrintable {
			t.Errorf("a progress line of %d bytes: %.200q", len(p), p)
		}
		seen = seen || strings.Contains(p, `\x1b]0;pwned`)
	}
	if !seen {
		t.Errorf("no progress line shows the condition: %q", progress)
	}
}

// A create from the API or MCP runs on a context that is never canceled:
// an API server that stalls inside an answer (its headers sent) ends the
// create once its Timeout has passed, whichever read it stalls, and
// nothing of it is left.
func TestCreateStalledServer(t *testing.T) {
	for _, stall := range []string{"GET " + base + "/sandboxwarmpools/", "POST " + base + "/sandboxclaims", "GET /api/v1/namespaces/team/pods/"} {
		t.Run(stall, func(t *testing.T) {
			a := &apiServer{stall: stall}
			cfg, s := setup(t, a)
			id, _ := runner.NewSandboxID()
			errc := make(chan error, 1)
			go func() {
				_, err := s.Create(context.WithoutCancel(context.Background()), CreateOptions{ID: id, Config: cfg, WarmPool: "py", Timeout: 1500 * time.Millisecond})
				errc <- err
			}()
			select {
			case err := <-errc:
				if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "the create's 1.5s, --ready-timeout, ran out") {
					t.Errorf("err = %v; want unavailable, saying the create's timeout ran out", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Create has not returned after 10s")
			}
			if list, _ := s.List(); len(list) != 0 {
				t.Errorf("left: records %v", list)
			}
		})
	}
}

// A destroy's DELETE is bounded too: an API server that stalls inside
// its answer fails the destroy once the client's request timeout has
// passed, naming the server, and the record stays for rm to try again.
func TestDestroyStalledServer(t *testing.T) {
	a := &apiServer{}
	cfg, s := setup(t, a)
	s.timeout = 200 * time.Millisecond
	id, _ := runner.NewSandboxID()
	if _, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py"}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.stall = "DELETE " + base + "/sandboxclaims/"
	a.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- s.Destroy(context.WithoutCancel(context.Background()), id) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatalf("Destroy has not returned after 10s")
	}
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "deleting SandboxClaim team/"+id) || !strings.Contains(err.Error(), "no whole answer within 200ms") || !strings.Contains(err.Error(), cfg.Server) {
		t.Errorf("err = %v; want unavailable, naming the DELETE, the server and the timeout", err)
	}
	if _, err := s.Get(id); err != nil {
		t.Errorf("the record: %v", err)
	}
}

// The claim's pod, its node, its runtime class and its image are named by
// the cluster: a name that is no DNS-1123 name, or an image that is no
// reference, fails the create before it is recorded or shown raw, and
// nothing of the create is left.
func TestCreateRefusesNamesNotDNS(t *testing.T) {
	evil := "\x1b]0;pwned\x07\x1b[2J" + strings.Repeat("n", 4096)
	for _, a := range []*apiServer{{pod: "py-" + evil}, {node: "node-" + evil}, {runtimeClass: "gvisor-" + evil}, {image: "airlock/py " + evil}} {
		cfg, s := setup(t, a)
		id, _ := runner.NewSandboxID()
		var progress []string
		_, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py", Progress: func(p string) { progress = append(progress, p) }})
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "no DNS-1123 name") && !strings.Contains(err.Error(), "no image reference") {
			t.Errorf("err = %.300v; want unavailable, naming the rule", err)
		}
		for _, p := range append(progress, fmt.Sprint(err)) {
			if strings.Contains(p, "\x1b") || len(p) > 3*cluster.MaxPrintable {
				t.Errorf("a line of %d bytes with the cluster's raw text: %.120q", len(p), p)
			}
		}
		if list, _ := s.List(); len(list) != 0 || len(a.claims) != 0 {
			t.Errorf("left: records %v, claims %v", list, a.claims)
		}
	}
}

// rm of a sandbox whose kubeconfig is gone (rotated, moved) says how to
// be rid of it: the claim to delete with kubectl and the record to
// remove, which otherwise counts against --max-sandboxes for ever.
func TestDestroyKubeconfigGone(t *testing.T) {
	a := &apiServer{}
	cfg, s := setup(t, a)
	id, _ := runner.NewSandboxID()
	if _, err := s.Create(context.Background(), CreateOptions{ID: id, Config: cfg, WarmPool: "py"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cfg.Path); err != nil {
		t.Fatal(err)
	}
	err := s.Destroy(context.Background(), id)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), s.path(id)) || !strings.Contains(err.Error(), "SandboxClaim team/"+id+" on "+cfg.Server+" with kubectl") {
		t.Errorf("rm with the kubeconfig gone: %v\nwant failed precondition naming SandboxClaim team/%s, kubectl and the record %s", err, id, s.path(id))
	}
	if n, _ := s.Count(); n != 1 {
		t.Errorf("count %d", n)
	}
}
