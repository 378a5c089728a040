//go:build e2e

package mcpserver

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// liveEngines give runners on the real engine AIRLOCK_E2E_ENGINE names
// (default oci), under the real root, whatever engine is asked for.
type liveEngines struct{ root string }

func (l liveEngines) Runner(context.Context, string) (*runner.Runner, func(), error) {
	var (
		e   engine.Engine
		err error
	)
	done := func() {}
	if os.Getenv("AIRLOCK_E2E_ENGINE") == "docker" {
		d, derr := docker.New()
		e, err, done = d, derr, func() { d.Close() }
	} else {
		e, err = oci.New(l.root)
	}
	if err != nil {
		return nil, nil, err
	}
	r, err := runner.New(runner.WithRoot(l.root), runner.WithEngine(e))
	return r, done, err
}

func (liveEngines) Reapers(context.Context) ([]engine.Reaper, func()) { return nil, func() {} }

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

// TestHTTPTransport serves HTTPHandler and drives it with the SDK's own
// streamable HTTP client against the real engine.
func TestHTTPTransport(t *testing.T) {
	root := os.Getenv("AIRLOCK_ROOT")
	if root == "" {
		root = runner.DefaultRoot
	}
	srv := httptest.NewServer(New(service.New(root, liveEngines{root: root})).HTTPHandler())
	defer srv.Close()
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lt.Tools) != len(toolNames) {
		t.Fatalf("%d tools listed over HTTP, want %d", len(lt.Tools), len(toolNames))
	}
	var run ExecResult
	if res := call(t, cs, "run_code", map[string]any{"language": "python", "code": "print(6*7)"}, &run); res.IsError {
		t.Fatalf("run_code: %+v", res.Content[0])
	}
	if run.Reason != "exited" || run.ExitCode != 0 || run.Stdout != "42\n" || run.Truncated {
		t.Errorf("run_code result %+v", run)
	}
	if res := call(t, cs, "run_code", map[string]any{"language": "bash", "code": "read x; echo \"$x\" >&2; exit 3", "stdin": "in\n"}, &run); res.IsError {
		t.Fatalf("run_code bash: %+v", res.Content[0])
	}
	if run.ExitCode != 3 || run.Stderr != "in\n" {
		t.Errorf("run_code bash result %+v", run)
	}

	// A sandbox's whole life over HTTP.
	var sb SandboxResult
	if res := call(t, cs, "sandbox_create", map[string]any{"memory": "256MiB", "ttl_s": 300}, &sb); res.IsError {
		t.Fatalf("sandbox_create: %+v", res.Content[0])
	}
	id := sb.SandboxID
	defer call(t, cs, "sandbox_destroy", map[string]any{"sandbox_id": id}, nil)
	if sb.Limits.MemoryBytes != 256<<20 || !sb.ExpiresAt.After(sb.CreatedAt) {
		t.Errorf("sandbox %+v", sb)
	}
	var fr FileResult
	if res := call(t, cs, "sandbox_write_file", map[string]any{"sandbox_id": id, "path": "/home/user/m.py", "content": "X = 6 * 7\n"}, &fr); res.IsError {
		t.Fatalf("sandbox_write_file: %+v", res.Content[0])
	}
	var ex ExecResult
	if res := call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "python3 -c 'import m; print(m.X)' > out.txt && cat out.txt"}, &ex); res.IsError {
		t.Fatalf("sandbox_exec: %+v", res.Content[0])
	}
	if ex.Stdout != "42\n" || ex.SandboxID != id {
		t.Errorf("sandbox_exec %+v", ex)
	}
	if res := call(t, cs, "sandbox_read_file", map[string]any{"sandbox_id": id, "path": "/home/user/out.txt"}, &fr); res.IsError {
		t.Fatalf("sandbox_read_file: %+v", res.Content[0])
	}
	if fr.Content != "42\n" || fr.Size != 3 || len(fr.SHA256) != 64 {
		t.Errorf("sandbox_read_file %+v", fr)
	}
	// Refusals are tool errors naming the scanner's reason word.
	call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": id, "command": "ln -s /etc/passwd link"}, nil)
	for path, word := range map[string]string{"/etc/passwd": "(invalid_path)", "/home/user/../../etc/passwd": "(invalid_path)", "link": "(symlink)"} {
		res := call(t, cs, "sandbox_read_file", map[string]any{"sandbox_id": id, "path": path}, nil)
		if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, word) {
			t.Errorf("reading %s: tool error %v, %q; want %s", path, res.IsError, text, word)
		}
	}
	res := call(t, cs, "sandbox_write_file", map[string]any{"sandbox_id": id, "path": "/usr/bin/x", "content": "x"}, nil)
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, "(invalid_path)") {
		t.Errorf("writing /usr/bin/x: tool error %v, %q", res.IsError, text)
	}
	res = call(t, cs, "sandbox_exec", map[string]any{"sandbox_id": "sb-nope", "command": "true"}, nil)
	if !res.IsError {
		t.Error("a bad sandbox_id is not a tool error")
	}
}
