package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// FuzzToolArgs calls a tool with the bytes as its arguments, through the
// SDK's client and server over an in-memory transport, so the SDK's
// schema checks and decoding run before the tool's conversions. The
// runner is real up to its engine's Check. No call that would make or
// touch a sandbox succeeds; a run or sandbox that reaches the engine has
// the argv, timeout and memory the arguments gave, or the template's or
// the defaults, and a policy that validates.
func FuzzToolArgs(f *testing.F) {
	const id = "sb-0123456789abcdef0123"
	for _, c := range [][2]string{
		{"run_code", `{"language":"python","code":"print(1)"}`},
		{"run_code", `{"language":"bash","code":"echo hi","stdin":"x","timeout_s":1.5}`},
		{"run_code", `{"language":"sh","code":"true","template":"fz","timeout_s":2}`},
		{"run_code", `{"language":"sh","code":"true","template":"fz","timeout_s":3600}`},
		{"run_code", `{"language":"python","code":"1","timeout_s":0}`},
		{"run_code", `{"language":"python","code":"1","timeout_s":1e-7}`},
		{"run_code", `{"language":"python","code":"1","timeout_s":1e300}`},
		{"run_code", `{"language":"ruby","code":"1"}`},
		{"run_code", `{"language":"python","code":"a\u0000b"}`},
		{"run_code", `{"language":"python","code":"1","template":"../x"}`},
		{"run_code", `{"language":"python"}`},
		{"sandbox_create", `{}`},
		{"sandbox_create", `{"memory":"1GiB","ttl_s":120,"idle_timeout_s":60}`},
		{"sandbox_create", `{"template":"fz","memory":"128MiB"}`},
		{"sandbox_create", `{"template":"fz","memory":"1GiB"}`},
		{"sandbox_create", `{"memory":"0"}`},
		{"sandbox_create", `{"image":"sha256:` + strings.Repeat("2", 64) + `"}`},
		{"sandbox_create", `{"image":"ubuntu:latest"}`},
		{"sandbox_exec", `{"sandbox_id":"` + id + `","command":"ls","timeout_s":2}`},
		{"sandbox_exec", `{"sandbox_id":"../../etc","command":"ls"}`},
		{"sandbox_write_file", `{"sandbox_id":"` + id + `","path":"a.txt","content":"hi"}`},
		{"sandbox_write_file", `{"sandbox_id":"` + id + `","path":"/etc/x","content_base64":"!!"}`},
		{"sandbox_write_file", `{"sandbox_id":"` + id + `","path":"a","content":"x","content_base64":"eA=="}`},
		{"sandbox_read_file", `{"sandbox_id":"` + id + `","path":"../../etc/shadow"}`},
		{"sandbox_destroy", `{"sandbox_id":"` + id + `"}`},
		{"sandbox_destroy", `{"sandbox_id":"x"}`},
		{"sandbox_list", `{}`},
		{"no_such_tool", `{}`},
		{"run_code", `[]`},
		{"run_code", `null`},
	} {
		f.Add(c[0], []byte(c[1]))
	}
	lim := isolation.Limits{Timeout: 10 * time.Second, Memory: 256 << 20}
	root, rn, eng, tp := fuzztest.Runner(f, "fz", runner.Spec{Policy: isolation.Policy{Limits: lim}})
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := New(fuzztest.Service(root, rn)).MCP().Connect(ctx, st, nil); err != nil {
		f.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cs.Close() })

	f.Fuzz(func(t *testing.T, tool string, args []byte) {
		if !json.Valid(args) {
			return // the client cannot send it
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		jobs := eng.Checked()
		ok := err == nil && !res.IsError
		switch tool {
		case "run_code", "sandbox_create", "sandbox_exec", "sandbox_write_file", "sandbox_read_file":
			if ok {
				t.Fatalf("%s succeeded, though no sandbox can be made or is live: %+v", tool, res.StructuredContent)
			}
		}
		if len(jobs) == 0 {
			return
		}
		if len(jobs) != 1 || (tool != "run_code" && tool != "sandbox_create") {
			t.Fatalf("%s reached the engine's Check %d times", tool, len(jobs))
		}
		job := jobs[0]
		if err := job.Policy.Validate(); err != nil {
			t.Fatalf("%s handed the engine a policy that does not validate: %v", tool, err)
		}
		want := isolation.Default().Limits
		var tmpl string
		switch tool {
		case "run_code":
			var in RunCodeArgs
			if err := json.Unmarshal(args, &in); err != nil {
				t.Fatalf("arguments that reached the engine do not decode: %v", err)
			}
			if !slices.Equal(job.Init.Argv, languages[in.Language](in.Code)) {
				t.Fatalf("argv %q for %s code %q", job.Init.Argv, in.Language, in.Code)
			}
			tmpl = in.Template
			if tmpl != "" {
				want = tp.Limits
			}
			if in.TimeoutS != nil {
				want.Timeout = time.Duration(*in.TimeoutS * float64(time.Second))
			}
		case "sandbox_create":
			var in SandboxCreateArgs
			if err := json.Unmarshal(args, &in); err != nil {
				t.Fatalf("arguments that reached the engine do not decode: %v", err)
			}
			tmpl = in.Template
			if tmpl != "" {
				want = tp.Limits
			}
			if in.Memory != "" {
				want.Memory, _ = units.ParseBytes(in.Memory)
			}
		}
		if tmpl != "" && tmpl != "fz" {
			t.Fatalf("template %q reached the engine", tmpl)
		}
		if job.Policy.Limits != want {
			t.Fatalf("%s: limits %+v reached the engine; the arguments asked for %+v", tool, job.Policy.Limits, want)
		}
	})
}
