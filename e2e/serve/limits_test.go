//go:build e2e

package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/runner"
)

// mcpClient connects the official SDK's streamable HTTP client to the
// server's /mcp over TCP, with the token.
func (s *srv) mcpClient(t *testing.T) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: "http://" + s.addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{token: s.token, rt: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// tool calls an MCP tool and returns its result and its text.
func tool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := ""
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	return res, text
}

// mcpSandbox makes a sandbox with MCP's sandbox_create, destroyed at the
// end of the test; it returns "" and the tool's text when refused.
func mcpSandbox(t *testing.T, cs *mcp.ClientSession, args map[string]any) (string, string) {
	t.Helper()
	res, text := tool(t, cs, "sandbox_create", args)
	if res.IsError {
		return "", text
	}
	id, _ := res.StructuredContent.(map[string]any)["sandbox_id"].(string)
	if id == "" {
		t.Fatalf("sandbox_create: no sandbox_id in %v", res.StructuredContent)
	}
	t.Cleanup(func() { tool(t, cs, "sandbox_destroy", map[string]any{"sandbox_id": id}) })
	return id, text
}

// TestServeMaxSandboxesEveryFace: --max-sandboxes is one count under the
// HTTP API, /run_code and MCP; past it each refuses with over_limit.
func TestServeMaxSandboxesEveryFace(t *testing.T) {
	s := startServer(t, "--max-sandboxes", "2")
	a := s.apis()[1]
	cs := s.mcpClient(t)
	// The ceilings' defaults hold without their flags: no more memory than
	// the host has.
	var e apiError
	a.call(t, "POST", "/v1/runs", map[string]any{"argv": []string{"true"}, "memory": "4096GiB", "engine": engineName, "isolation": isolationName}, http.StatusBadRequest, &e)
	if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, "--max-memory") {
		t.Errorf("a run asking 4096GiB of memory: %+v", e)
	}
	// One sandbox made over HTTP, one over MCP: the limit is reached.
	a.create(t, nil)
	if id, text := mcpSandbox(t, cs, nil); id == "" {
		t.Fatalf("the second sandbox, over MCP: %s", text)
	}

	if id, text := mcpSandbox(t, cs, nil); id != "" || !strings.Contains(text, "over_limit") || !strings.Contains(text, "--max-sandboxes 2") || !strings.Contains(text, "sandbox_destroy") {
		t.Errorf("MCP sandbox_create past --max-sandboxes 2: made %q, %q; want a tool error naming over_limit, the limit and how to free one", id, text)
	}
	res, text := tool(t, cs, "run_code", map[string]any{"language": "python", "code": "print(1)"})
	if !res.IsError || !strings.Contains(text, "over_limit") || !strings.Contains(text, "--max-sandboxes 2") {
		t.Errorf("MCP run_code past --max-sandboxes 2: error %v, %q", res.IsError, text)
	}
	e = apiError{}
	a.call(t, "POST", "/run_code", map[string]any{"code": "print(1)", "language": "python"}, http.StatusTooManyRequests, &e)
	if e.Error.Kind != "over_limit" || !strings.Contains(e.Error.Message, "--max-sandboxes 2") {
		t.Errorf("/run_code past --max-sandboxes 2: %+v", e)
	}
	e = apiError{}
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName}, http.StatusTooManyRequests, &e)
	if e.Error.Kind != "over_limit" {
		t.Errorf("POST /v1/sandboxes past --max-sandboxes 2: %+v", e)
	}
	e = apiError{}
	a.call(t, "POST", "/v1/runs", map[string]any{"argv": []string{"true"}, "engine": engineName, "isolation": isolationName}, http.StatusTooManyRequests, &e)
	if e.Error.Kind != "over_limit" {
		t.Errorf("POST /v1/runs past --max-sandboxes 2: %+v", e)
	}
	var list []runner.SandboxInfo
	a.call(t, "GET", "/v1/sandboxes", nil, http.StatusOK, &list)
	if len(list) != 2 {
		t.Errorf("%d sandboxes live under --max-sandboxes 2", len(list))
	}
}

// TestServeCeilings: --max-memory, --max-timeout, --max-ttl and
// --max-output-limit refuse a request past them on the HTTP API and MCP
// as invalid input naming the field, the ceiling and the flag.
func TestServeCeilings(t *testing.T) {
	s := startServer(t, "--max-memory", "1GiB", "--max-timeout", "1m", "--max-ttl", "2h", "--max-output-limit", "8MiB")
	a := s.apis()[1]
	cs := s.mcpClient(t)
	pair := func(m map[string]any) map[string]any {
		m["engine"], m["isolation"] = engineName, isolationName
		return m
	}
	refused := func(what, method, path string, body map[string]any, words ...string) {
		t.Helper()
		var e apiError
		a.call(t, method, path, body, http.StatusBadRequest, &e)
		for _, w := range words {
			if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, w) {
				t.Errorf("%s: %+v; want invalid_input naming %q", what, e, w)
				return
			}
		}
	}
	refused("a run's memory", "POST", "/v1/runs", pair(map[string]any{"argv": []string{"true"}, "memory": "2GiB"}), "memory 2GiB", "1GiB", "--max-memory")
	refused("a run's timeout", "POST", "/v1/runs", pair(map[string]any{"argv": []string{"true"}, "timeout": "2m"}), "timeout 2m", "1m0s", "--max-timeout")
	refused("a run's output limit", "POST", "/v1/runs", pair(map[string]any{"argv": []string{"true"}, "output_limit": "16MiB"}), "output limit 16MiB", "8MiB", "--max-output-limit")
	refused("a sandbox's TTL", "POST", "/v1/sandboxes", pair(map[string]any{"ttl": "3h"}), "ttl 3h", "2h0m0s", "--max-ttl")
	refused("a sandbox's memory", "POST", "/v1/sandboxes", pair(map[string]any{"memory": "2GiB"}), "--max-memory")
	// /tmp is memory; the workspace is reserved on the root's disk (16GiB
	// by default).
	refused("a sandbox's /tmp", "POST", "/v1/sandboxes", pair(map[string]any{"tmp_size": "2GiB"}), "tmp size 2GiB", "1GiB", "--max-memory")
	refused("a sandbox's workspace", "POST", "/v1/sandboxes", pair(map[string]any{"workspace_size": "32GiB"}), "workspace size 32GiB", "16GiB", "--max-workspace-size")

	si := a.create(t, map[string]any{"timeout": "1m", "output_limit": "8MiB"})
	refused("an exec's timeout", "POST", "/v1/sandboxes/"+si.ID+"/exec", map[string]any{"argv": []string{"true"}, "timeout": "2m"}, "timeout 2m", "1m0s", "--max-timeout")
	refused("an exec's output limit", "POST", "/v1/sandboxes/"+si.ID+"/exec", map[string]any{"argv": []string{"true"}, "output_limit": "9MiB"}, "output limit 9MiB", "--max-output-limit")
	// Asked as a stream, the same refusal, before the stream's 200.
	var e apiError
	a.call(t, "POST", "/v1/sandboxes/"+si.ID+"/exec", map[string]any{"argv": []string{"true"}, "timeout": "2m"}, http.StatusBadRequest, &e, "Accept", "application/x-ndjson")
	if e.Error.Kind != "invalid_input" || !strings.Contains(e.Error.Message, "--max-timeout") {
		t.Errorf("a streamed exec's timeout: %+v; want invalid_input naming --max-timeout", e)
	}
	if res := a.exec(t, si.ID, map[string]any{"argv": []string{"echo", "ok"}, "timeout": "1m"}); res.ExitCode != 0 || string(res.Stdout.Head) != "ok\n" {
		t.Errorf("an exec at the ceiling: %+v", res)
	}

	for _, c := range []struct {
		name  string
		args  map[string]any
		words []string
	}{
		{"run_code", map[string]any{"language": "python", "code": "print(1)", "timeout_s": 120}, []string{"timeout 2m", "--max-timeout"}},
		{"sandbox_create", map[string]any{"memory": "2GiB"}, []string{"memory 2GiB", "--max-memory"}},
		{"sandbox_create", map[string]any{"ttl_s": 3 * 3600}, []string{"ttl 3h", "--max-ttl"}},
		{"sandbox_exec", map[string]any{"sandbox_id": si.ID, "command": "true", "timeout_s": 120}, []string{"timeout 2m", "--max-timeout"}},
	} {
		res, text := tool(t, cs, c.name, c.args)
		if !res.IsError {
			if id, _ := res.StructuredContent.(map[string]any)["sandbox_id"].(string); id != "" && c.name == "sandbox_create" {
				tool(t, cs, "sandbox_destroy", map[string]any{"sandbox_id": id})
			}
		}
		for _, w := range c.words {
			if !res.IsError || !strings.Contains(text, w) {
				t.Errorf("MCP %s %v: error %v, %q; want a tool error naming %q", c.name, c.args, res.IsError, text, w)
				break
			}
		}
	}
	if res, text := tool(t, cs, "run_code", map[string]any{"language": "python", "code": "print(6*7)", "timeout_s": 60}); res.IsError || !strings.Contains(text, "42") {
		t.Errorf("MCP run_code at the ceiling: %v %q", res.IsError, text)
	}
}

// A download is spooled whole on airlock's root before it is sent; a
// client that stops reading holds its spool. --max-spool bounds them all
// together: past it a download is refused as unavailable, naming the
// flag, and a spool is given back when its client goes.
func TestServeMaxSpool(t *testing.T) {
	s := startServer(t, "--max-spool", "16MiB")
	a := s.apis()[1]
	si := a.create(t, nil)
	if res := a.exec(t, si.ID, map[string]any{"argv": []string{"sh", "-c", "yes abcdefghijklmnop | head -c 12582912 > /home/user/big"}}); res.ExitCode != 0 {
		t.Fatalf("writing the file: %+v", res)
	}
	path := "/v1/sandboxes/" + si.ID + "/files?path=/home/user/big"

	// The stalled client reads the headers and nothing more: 12MiB is more
	// than loopback's buffers take, so its handler holds the spool.
	req, _ := http.NewRequest("GET", a.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	stalled, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if stalled.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(stalled.Body)
		t.Fatalf("the first download: %d %.300s", stalled.StatusCode, b)
	}

	var e apiError
	st, _, body := a.do(t, "GET", path, nil)
	if err := json.Unmarshal(body, &e); err != nil || st != http.StatusServiceUnavailable || e.Error.Kind != "unavailable" || !strings.Contains(e.Error.Message, "--max-spool 16MiB") {
		t.Fatalf("a second download with the spool held: %d %.300s", st, body)
	}

	stalled.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, body = a.do(t, "GET", path, nil)
		if st == http.StatusOK && len(body) == 12<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("once the stalled client went: %d, %d bytes", st, len(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
