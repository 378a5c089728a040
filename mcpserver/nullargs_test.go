package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
)

// A tool argument given as null is not given, as the HTTP API reads a
// body's null: the call goes as it would without the key, never refused
// in the SDK's schema words.
func TestToolArgumentNullIsNotGiven(t *testing.T) {
	const id = "sb-0123456789abcdef0123"
	for _, c := range []struct {
		tool        string
		without     string
		nullKeysRaw string
	}{
		{"sandbox_create", `{"template":"py"}`, `{"template":"py","memory":null,"timeout_s":null,"allow_host":null,"image":null}`},
		{"run_code", `{"language":"python","code":"1"}`, `{"language":"python","code":"1","timeout_s":null,"stdin":null,"template":null}`},
		{"sandbox_exec", `{"sandbox_id":"` + id + `","command":"ls"}`, `{"sandbox_id":"` + id + `","command":"ls","timeout_s":null}`},
		{"sandbox_write_file", `{"sandbox_id":"` + id + `","path":"/tmp/a","content":"x"}`, `{"sandbox_id":"` + id + `","path":"/tmp/a","content":"x","content_base64":null}`},
	} {
		want := callRaw(t, c.tool, c.without)
		got := callRaw(t, c.tool, c.nullKeysRaw)
		if got != want {
			t.Errorf("%s %s:\n got %q\nwant %q (the same call without the null keys)", c.tool, c.nullKeysRaw, got, want)
		}
	}
}

// A key given twice is still refused when one of them is null.
func TestToolArgumentNullGivenTwiceRefused(t *testing.T) {
	if msg := callRaw(t, "sandbox_create", `{"template":"py","memory":"128MiB","memory":null}`); !strings.Contains(msg, "given twice") {
		t.Errorf("got %q, want the repeated key refused", msg)
	}
}

// callRaw calls tool with raw arguments on a server with no engines and
// returns what it says: its text, and whether it is an error.
func callRaw(t *testing.T, tool, raw string) string {
	t.Helper()
	cs := connect(t, testRoot(t), &fuzztest.NoEngines{})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(raw)})
	if err != nil {
		t.Fatalf("%s %s: protocol error %v", tool, raw, err)
	}
	var msg string
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			msg += tc.Text
		}
	}
	if res.IsError {
		msg = "error: " + msg
	}
	return msg
}
