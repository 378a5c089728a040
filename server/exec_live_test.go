package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// liveEng is the refusing engine whose Open gives a fake live sandbox whose
// Exec runs exec: no runtime, no mounts. It lets a test drive the real
// server, service and runner through an exec.
type liveEng struct {
	*enginetest.Refusing
	exec func(ctx context.Context, p *engine.Process) (engine.Exit, error)
}

func (e *liveEng) Open(_ context.Context, id string) (engine.Sandbox, error) {
	return &liveSB{id, e}, nil
}

type liveSB struct {
	id string
	e  *liveEng
}

func (s *liveSB) ID() string { return s.id }
func (s *liveSB) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	return s.e.exec(ctx, p)
}
func (s *liveSB) Destroy(context.Context) error { return nil }

const liveID = "sb-00112233445566778899"

// liveServer is a server over a runner with ceil on the fake engine, and
// a "live" sandbox liveID recorded by hand (ready, output limit outLimit).
func liveServer(t *testing.T, ceil runner.Ceilings, outLimit int64, exec func(ctx context.Context, p *engine.Process) (engine.Exit, error)) (*Server, *liveEng, string) {
	t.Helper()
	return liveServerWith(t, ceil, outLimit, exec, Options{})
}

// liveServerWith is liveServer with opt (its Service made here) and the
// service's options svcOpts.
func liveServerWith(t *testing.T, ceil runner.Ceilings, outLimit int64, exec func(ctx context.Context, p *engine.Process) (engine.Exit, error), opt Options, svcOpts ...service.Option) (*Server, *liveEng, string) {
	t.Helper()
	root := t.TempDir()
	fuzztest.PutTemplate(t, root, "fz", runner.Spec{Policy: isolation.Policy{Limits: isolation.Limits{Timeout: 10 * time.Second, Memory: 256 << 20, CPUs: 500, Pids: 64, Output: 64 << 10}}}, "auto")
	eng := &liveEng{Refusing: &enginetest.Refusing{}, exec: exec}
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(eng), runner.WithCeilings(ceil))
	if err != nil {
		t.Fatal(err)
	}
	si := runner.SandboxInfo{ID: liveID, Engine: "oci", Workspace: runner.WorkspaceDir, WorkspaceBytes: 1 << 30,
		Limits: isolation.LimitsRecord{TimeoutMS: 3600_000, OutputBytes: outLimit}, Labels: map[string]string{},
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), LastActivity: time.Now()}
	b, _ := json.Marshal(si)
	os.MkdirAll(filepath.Join(root, "sandboxes"), 0o711)
	if err := os.WriteFile(filepath.Join(root, "sandboxes", liveID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lc.Begin(context.Background(), liveID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.MoveThrough(liveID, lifecycle.Created, lifecycle.Ready); err != nil {
		t.Fatal(err)
	}
	l.Release()
	opt.Service, opt.Token = service.New(root, fuzztest.Engines(rn), svcOpts...), testToken
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, eng, root
}

// TestNDJSONStalledReader: a client that stops reading a streamed exec
// (its receive window shut) ends the handler at the next line's deadline,
// and with it the exec and the output held for it.
func TestNDJSONStalledReader(t *testing.T) {
	defer func(d time.Duration) { lineTimeout = d }(lineTimeout)
	lineTimeout = 200 * time.Millisecond
	execDone := make(chan struct{})
	s, _, _ := liveServer(t, runner.Ceilings{}, 64<<20, func(ctx context.Context, p *engine.Process) (engine.Exit, error) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 256 { // 16MiB
			p.Stdout.Write(chunk)
		}
		close(execDone)
		return engine.Exit{Code: 0}, nil
	})
	returned := make(chan struct{})
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		s.Handler().ServeHTTP(w, r)
	}))
	// Serve's own settings.
	hs.Config.ReadHeaderTimeout, hs.Config.ReadTimeout, hs.Config.IdleTimeout = 10*time.Second, time.Minute, 2*time.Minute
	hs.Start()
	defer hs.Close()
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"argv":["x"]}`
	fmt.Fprintf(c, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", liveID, len(body), body)
	<-execDone
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec ended 10s ago, and the handler still writes to a client that does not read")
	}
	// The exec's records are written once it ends, into the test's root.
	s.inflight.Wait()
}

// TestExecRefusedBeforeStream: an exec over a ceiling is the same error
// response whether the client asked for JSON or for a stream, never a
// 200 followed by an error line.
func TestExecRefusedBeforeStream(t *testing.T) {
	s, _, _ := liveServer(t, runner.Ceilings{Timeout: time.Hour}, 64<<10, func(context.Context, *engine.Process) (engine.Exit, error) {
		t.Error("the exec ran")
		return engine.Exit{}, nil
	})
	for _, accept := range []string{"application/json", "application/x-ndjson"} {
		rec := do(t, s.Handler(), false, "POST", "/v1/sandboxes/"+liveID+"/exec", `{"argv":["x"],"timeout":"2h"}`, "Accept", accept)
		if e := errorOf(t, rec); rec.Code != 400 || !strings.Contains(e.Message, "--max-timeout") {
			t.Errorf("Accept %s: %d %+v", accept, rec.Code, e)
		}
	}
}
