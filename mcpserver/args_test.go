package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/wire"
)

// A tool argument given twice is refused before any engine, as the API
// refuses a body's key given twice (the SDK would take the last).
func TestToolArgumentKeyGivenTwiceRefused(t *testing.T) {
	for _, c := range []struct {
		tool string
		raw  string
		// v is the API's nearest body type, to show the shared check
		// refuses the same key.
		v any
	}{
		{"sandbox_create", `{"template":"py","memory":"128MiB","memory":"200MiB"}`, &wire.Policy{}},
		{"run_code", `{"language":"python","code":"1","template":"py","timeout_s":2,"timeout_s":9}`, &RunCodeArgs{}},
	} {
		// The shared check (what POST /v1/sandboxes applies) refuses it.
		if err := wire.CheckKeys([]byte(c.raw), c.v); err == nil || !strings.Contains(err.Error(), "given twice") {
			t.Fatalf("wire.CheckKeys(%s) = %v, want a refusal of the repeated key", c.raw, err)
		}
		rs := &fuzztest.NoEngines{}
		cs := connect(t, testRoot(t), rs)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: json.RawMessage(c.raw)})
		if err != nil {
			t.Fatalf("%s: protocol error %v", c.tool, err)
		}
		var msg string
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				msg += tc.Text
			}
		}
		if asked := rs.Asked(); len(asked) != 0 || !strings.Contains(msg, "given twice") {
			t.Errorf("%s %s: reached the engines %v with message %q; want it refused before any engine, naming the key given twice (as the HTTP API does)", c.tool, c.raw, asked, msg)
		}
	}
}

// Every tool's refusal names the error's kind (docs/mcp.md).
func TestToolRefusalsNameTheirKind(t *testing.T) {
	const id = "sb-0123456789abcdef0123"
	cs := connect(t, testRoot(t), &fuzztest.NoEngines{})
	kinds := []string{"invalid_input", "not_found", "over_limit", "unavailable", "conflict", "internal"}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"sandbox_exec", map[string]any{"sandbox_id": "sb-bad", "command": "ls"}}, // holds: the reference
		{"sandbox_write_file", map[string]any{"sandbox_id": "sb-bad", "path": "/tmp/a", "content": "x"}},
		{"sandbox_write_file", map[string]any{"sandbox_id": id, "path": "/tmp/a", "content": "x", "content_base64": "eA=="}},
		{"sandbox_write_file", map[string]any{"sandbox_id": id, "path": "/tmp/a", "content_base64": "!!"}},
		{"sandbox_read_file", map[string]any{"sandbox_id": "sb-bad", "path": "/tmp/a"}},
		{"sandbox_destroy", map[string]any{"sandbox_id": "sb-bad"}},
		{"sandbox_pause", map[string]any{"sandbox_id": "sb-bad"}},
		{"sandbox_resume", map[string]any{"sandbox_id": "sb-bad"}},
	} {
		msg := callError(t, cs, c.tool, c.args)
		named := false
		for _, k := range kinds {
			named = named || strings.Contains(msg, k)
		}
		if !named {
			t.Errorf("%s %v: tool error %q names no error kind (invalid_input for this mistake, as the API's 400)", c.tool, c.args, msg)
		}
	}
}
