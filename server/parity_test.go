package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/mcpserver"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
)

// ?path= given twice is refused, as a body's key given twice is.
func TestFilesQueryGivenOnce(t *testing.T) {
	req := httptest.NewRequest("PUT", "/v1/sandboxes/sb-0123456789abcdef0123/files?path=/home/user/a&path=/tmp/b", nil)
	if p, err := targetPath(req); err == nil {
		t.Errorf("?path= given twice: taken as %q; want it refused as invalid_input (path given twice)", p)
	}
	s, _ := newTestServer(t, nil)
	for _, m := range []string{"PUT", "GET"} {
		rec := do(t, s.Handler(), false, m, "/v1/sandboxes/sb-0123456789abcdef0123/files?path=/home/user/a&path=/tmp/b", "x")
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "path") {
			t.Errorf("%s with ?path= twice: %d %s; want 400 invalid_input naming path", m, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
	}
}

// emptyPoolEngine checks every spec and makes nothing: a warm pool on it
// starts, and stays empty.
type emptyPoolEngine struct{ *enginetest.Refusing }

func (emptyPoolEngine) Check(context.Context, *engine.SandboxSpec) error { return nil }
func (emptyPoolEngine) Create(context.Context, *engine.SandboxSpec) (engine.Sandbox, error) {
	return nil, enginetest.ErrRefused
}

// An empty run-code pool under --pool-exhausted fail is 429 over_limit on
// /run_code, as on MCP: a harness retries it, not scores it.
func TestRunCodeEmptyPoolIsOverLimit(t *testing.T) {
	argv, err := forkserver.Argv("python", nil)
	if err != nil {
		t.Fatal(err)
	}
	var spec runner.Spec
	spec.Policy.Limits.Timeout = 10 * time.Second
	root, _, _, _ := fuzztest.Runner(t, "unused", runner.Spec{})
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(emptyPoolEngine{&enginetest.Refusing{}}))
	if err != nil {
		t.Fatal(err)
	}
	tp := fuzztest.PutTemplate(t, root, "rc", spec, "oci")
	tp.Warm, tp.Snapshot = argv, strings.Repeat("ab", 32)
	if err := templates.Open(root).Replace(tp); err != nil {
		t.Fatal(err)
	}
	svc := service.New(root, fuzztest.Engines(rn), service.WithRunCodeTemplates(map[string]string{"python": "rc"}),
		service.WithPools(nil, service.PoolOptions{FailWhenEmpty: true}))
	s, err := New(Options{Service: svc, Token: testToken})
	if err != nil {
		t.Fatalf("server with a run-code pool: %v", err)
	}
	t.Cleanup(func() { svc.ClosePools() })

	// MCP's run_code, the same service: over_limit.
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(svc).MCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "print(1)"}})
	if err != nil {
		t.Fatal(err)
	}
	var mcpMsg string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			mcpMsg += tc.Text
		}
	}
	if !strings.Contains(mcpMsg, "over_limit") || !strings.Contains(mcpMsg, "is empty") {
		t.Fatalf("premise: MCP run_code on the empty pool: %q, want over_limit naming the empty pool", mcpMsg)
	}

	rec := do(t, s.Handler(), false, "POST", "/run_code", `{"code":"print(1)","language":"python"}`)
	if rec.Code != 429 {
		t.Errorf("/run_code on the empty pool: %d %s; want 429 over_limit as MCP's run_code gives (%q)", rec.Code, strings.TrimSpace(rec.Body.String()), mcpMsg)
	}
}
