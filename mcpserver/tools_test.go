package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
)

func ptr[T any](v T) *T { return &v }

func TestRunSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   RunCodeArgs
		argv []string
		want string // error substring; "" means valid
	}{
		{"python", RunCodeArgs{Language: "python", Code: "print(42)"}, []string{"python3", "-c", "print(42)"}, ""},
		{"bash", RunCodeArgs{Language: "bash", Code: "echo 42"}, []string{"bash", "-c", "echo 42"}, ""},
		{"sh with timeout", RunCodeArgs{Language: "sh", Code: "echo 42", TimeoutS: ptr(1.5)}, []string{"sh", "-c", "echo 42"}, ""},
		{"other language", RunCodeArgs{Language: "ruby", Code: "puts 1"}, nil, `language "ruby" is not supported: use one of bash, python, sh`},
		{"no language", RunCodeArgs{Code: "print(1)"}, nil, `language "" is not supported`},
		{"template", RunCodeArgs{Language: "python", Code: "1", Template: "data"}, []string{"python3", "-c", "1"}, ""},
		{"empty code", RunCodeArgs{Language: "python"}, nil, "code is empty"},
		{"huge code", RunCodeArgs{Language: "python", Code: strings.Repeat("#", maxCode+1)}, nil, "write it to a file with sandbox_write_file"},
		{"NUL", RunCodeArgs{Language: "python", Code: "a\x00b"}, nil, "NUL byte"},
		{"zero timeout", RunCodeArgs{Language: "python", Code: "1", TimeoutS: ptr(0.0)}, nil, "timeout_s 0: a limit of zero"},
		{"negative timeout", RunCodeArgs{Language: "python", Code: "1", TimeoutS: ptr(-3.0)}, nil, "timeout_s -3"},
		{"overflowing timeout", RunCodeArgs{Language: "python", Code: "1", TimeoutS: ptr(1e300)}, nil, "give a positive number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := runSpec(tc.in)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(spec.Argv, tc.argv) {
				t.Errorf("argv %q, want %q", spec.Argv, tc.argv)
			}
			if tc.in.TimeoutS != nil && spec.Policy.Limits.Timeout != 1500*time.Millisecond {
				t.Errorf("timeout %v, want 1.5s", spec.Policy.Limits.Timeout)
			}
			if tc.in.TimeoutS == nil && spec.Policy.Limits.Timeout != 0 {
				t.Errorf("timeout %v, want 0 (the runner's default)", spec.Policy.Limits.Timeout)
			}
			if spec.Stdin != nil {
				t.Error("stdin is open without stdin given")
			}
		})
	}
}

func TestSandboxSpec(t *testing.T) {
	s, err := sandboxSpec(SandboxCreateArgs{Memory: "1GiB", TimeoutS: ptr(90.0), TTLS: ptr(120.0), IdleTimeoutS: ptr(60.0)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Policy.Limits.Memory != 1<<30 || s.Policy.Limits.Timeout != 90*time.Second || s.TTL != 2*time.Minute || s.IdleTimeout != time.Minute {
		t.Errorf("spec %+v", s)
	}
	// Nothing given: zero fields, which the runner makes its defaults
	// (15m idle, 1h TTL), the same as for any other sandbox.
	s, err = sandboxSpec(SandboxCreateArgs{})
	if err != nil || s.TTL != 0 || s.IdleTimeout != 0 || s.Policy.Limits.Memory != 0 || s.Image != "" {
		t.Errorf("spec %+v, %v", s, err)
	}
	for _, tc := range []struct {
		in   SandboxCreateArgs
		want string
	}{
		{SandboxCreateArgs{Memory: "lots"}, `memory "lots": give a positive size`},
		{SandboxCreateArgs{Memory: "0"}, `memory "0"`},
		{SandboxCreateArgs{TTLS: ptr(0.0)}, "ttl_s 0"},
		{SandboxCreateArgs{TimeoutS: ptr(-2.0)}, "timeout_s -2"},
		{SandboxCreateArgs{IdleTimeoutS: ptr(-1.0)}, "idle_timeout_s -1"},
		{SandboxCreateArgs{TTLS: ptr(0.0000001)}, "at least 0.001 seconds"},
		{SandboxCreateArgs{Engine: "vm"}, `engine "vm"`},
	} {
		if _, err := sandboxSpec(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestExecSpec(t *testing.T) {
	const id = "sb-0123456789abcdef0123"
	p, err := execSpec(SandboxExecArgs{SandboxID: id, Command: "ls -la | wc -l", TimeoutS: ptr(2.0)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Argv, []string{"sh", "-c", "ls -la | wc -l"}) || p.Timeout != 2*time.Second {
		t.Errorf("exec spec %+v", p)
	}
	for _, tc := range []struct {
		in   SandboxExecArgs
		want string
	}{
		{SandboxExecArgs{SandboxID: "sb-1", Command: "ls"}, `sandbox_id "sb-1" is not a sandbox id`},
		{SandboxExecArgs{SandboxID: "../../etc", Command: "ls"}, "sandbox_list lists the live ones"},
		{SandboxExecArgs{SandboxID: id, Command: "  "}, "command is empty"},
		{SandboxExecArgs{SandboxID: id, Command: "a\x00"}, "NUL byte"},
		{SandboxExecArgs{SandboxID: id, Command: "ls", TimeoutS: ptr(0.0)}, "timeout_s 0"},
	} {
		if _, err := execSpec(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestFileContent(t *testing.T) {
	const id = "sb-0123456789abcdef0123"
	b, err := fileContent(SandboxWriteFileArgs{SandboxID: id, Path: "/home/user/a", Content: ptr("héllo")})
	if err != nil || string(b) != "héllo" {
		t.Errorf("content: %q, %v", b, err)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	b, err = fileContent(SandboxWriteFileArgs{SandboxID: id, ContentBase64: ptr(base64.StdEncoding.EncodeToString(all))})
	if err != nil || string(b) != string(all) {
		t.Errorf("content_base64: %v", err)
	}
	b, err = fileContent(SandboxWriteFileArgs{SandboxID: id, Content: ptr("")})
	if err != nil || len(b) != 0 {
		t.Errorf("an empty file: %q, %v", b, err)
	}
	for _, tc := range []struct {
		in   SandboxWriteFileArgs
		want string
	}{
		{SandboxWriteFileArgs{SandboxID: id}, "give the file's content: content (text) or content_base64"},
		{SandboxWriteFileArgs{SandboxID: id, Content: ptr("a"), ContentBase64: ptr("YQ==")}, "not both"},
		{SandboxWriteFileArgs{SandboxID: id, ContentBase64: ptr("not base64!")}, "content_base64 is not standard base64"},
		{SandboxWriteFileArgs{SandboxID: id, Content: ptr(strings.Repeat("x", MaxFileBytes+1))}, "over the 8MiB an MCP call carries"},
		{SandboxWriteFileArgs{SandboxID: "nope", Content: ptr("a")}, `sandbox_id "nope" is not a sandbox id`},
	} {
		if _, err := fileContent(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

func TestExecResult(t *testing.T) {
	r := execResult(runner.Result{ID: "r1", Reason: runner.ReasonExited, ExitCode: 3,
		Stdout: runner.Stream{Head: []byte("42\n"), Bytes: 3}, Stderr: runner.Stream{Head: []byte{0xff, 'a'}, Bytes: 2}})
	if r.Reason != "exited" || r.ExitCode != 3 || r.Stdout != "42\n" || r.StdoutBase64 != "" || r.Truncated {
		t.Errorf("result %+v", r)
	}
	if r.Stderr != "\uFFFDa" || r.StderrBase64 != base64.StdEncoding.EncodeToString([]byte{0xff, 'a'}) {
		t.Errorf("non-UTF-8 stderr: %q, base64 %q", r.Stderr, r.StderrBase64)
	}
	r = execResult(runner.Result{Reason: runner.ReasonOutputLimit, ExitCode: 137,
		Stdout: runner.Stream{Head: []byte("head"), Tail: []byte("tail"), Bytes: 1000, Truncated: true}})
	if !r.Truncated || r.Stdout != "head\n[airlock: 992 bytes left out]\ntail" || r.Reason != "output_limit" {
		t.Errorf("truncated result %+v", r)
	}
}

func TestFileResult(t *testing.T) {
	fr := fileResult("sb-x", runner.Transfer{Path: "/tmp/b", Size: 2}, []byte{0, 0xff}, true)
	if fr.Content != "" || fr.ContentBase64 != "AP8=" || fr.SHA256 == "" {
		t.Errorf("binary file %+v", fr)
	}
	fr = fileResult("sb-x", runner.Transfer{Path: "/tmp/t", Size: 2, SHA256: "abc"}, []byte("hi"), true)
	if fr.Content != "hi" || fr.ContentBase64 != "" || fr.SHA256 != "abc" {
		t.Errorf("text file %+v", fr)
	}
}

func TestTransferError(t *testing.T) {
	te := &runner.TransferError{Direction: runner.DirectionUpload, Path: "/etc/passwd", Reason: runner.ReasonInvalidPath, Detail: "outside the areas", Err: errdefs.ErrInvalidArgument}
	err := transferError("sb-x", fmt.Errorf("uploading: %w", te))
	if !strings.Contains(err.Error(), "(invalid_path)") || !strings.Contains(err.Error(), "files move in and out of the workspace /home/user") {
		t.Errorf("refusal %q: want the reason word and what to do", err)
	}
	err = transferError("sb-x", fmt.Errorf("%w: sandbox gone", errdefs.ErrNotFound))
	if !strings.Contains(err.Error(), "is gone") || !strings.Contains(err.Error(), "sandbox_create makes a new one") {
		t.Errorf("gone sandbox %q", err)
	}
}

// testRoot is a root holding template "py": oci, 256MiB, 10s.
func testRoot(t *testing.T) string {
	root := t.TempDir()
	var spec runner.Spec
	spec.Policy.Limits.Memory, spec.Policy.Limits.Timeout = 256<<20, 10*time.Second
	fuzztest.PutTemplate(t, root, "py", spec, "oci")
	return root
}

func connect(t *testing.T, root string, rs service.Engines) *mcp.ClientSession {
	t.Helper()
	return connectService(t, service.New(root, rs))
}

func connectService(t *testing.T, svc *service.Service) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(svc).MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callError calls a tool and returns its error text; it fails the test
// unless the call is a tool error (not a protocol error).
func callError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v, want a tool error", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s: no tool error", name)
	}
	var texts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// toolNames is every tool the server lists, sorted.
var toolNames = []string{"run_code", "sandbox_create", "sandbox_destroy", "sandbox_exec", "sandbox_list", "sandbox_pause", "sandbox_read_file", "sandbox_resume", "sandbox_write_file"}

func TestToolsOverMCP(t *testing.T) {
	rs := &fuzztest.NoEngines{}
	cs := connect(t, testRoot(t), rs)
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		if tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s has no output schema or description", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, toolNames) {
		t.Errorf("tools %v, want %v", names, toolNames)
	}

	// Refused before any runner is asked.
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_code", map[string]any{"language": "ruby", "code": "puts 1"}, `language "ruby" is not supported`},
		{"run_code", map[string]any{"language": "python", "code": "1", "template": "data-science"}, `no template "data-science"`},
		{"run_code", map[string]any{"language": "python", "code": "1", "template": "py", "timeout_s": 60}, `timeout 1m0s is above template "py"'s 10s`},
		{"run_code", map[string]any{"language": "python", "code": "1", "template": "Bad/Name"}, "template name"},
		{"run_code", map[string]any{"language": "python"}, "code"},
		{"run_code", map[string]any{"language": "python", "code": "1", "memory": "1GiB"}, "additional properties"},
		{"sandbox_create", map[string]any{"template": "x"}, `no template "x"`},
		{"sandbox_create", map[string]any{"template": "py", "memory": "1GiB"}, `memory 1GiB is above template "py"'s 256MiB`},
		{"sandbox_create", map[string]any{"template": "py", "image": "sha256:" + strings.Repeat("2", 64)}, `not template "py"'s image`},
		{"sandbox_create", map[string]any{"memory": "much"}, `memory "much"`},
		{"sandbox_exec", map[string]any{"sandbox_id": "sb-bad", "command": "ls"}, `sandbox_id "sb-bad" is not a sandbox id`},
		{"sandbox_exec", map[string]any{"sandbox_id": "sb-0123456789abcdef0123", "command": ""}, "command is empty"},
		{"sandbox_write_file", map[string]any{"sandbox_id": "sb-0123456789abcdef0123", "path": "/home/user/a", "content": "a", "content_base64": "YQ=="}, "not both"},
		{"sandbox_read_file", map[string]any{"sandbox_id": "x", "path": "/tmp/a"}, `sandbox_id "x" is not a sandbox id`},
		{"sandbox_destroy", map[string]any{"sandbox_id": "sb-../../x"}, "is not a sandbox id"},
	} {
		if msg := callError(t, cs, tc.tool, tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("%s %v: %q, want it to contain %q", tc.tool, tc.args, msg, tc.want)
		}
	}
	if asked := rs.Asked(); len(asked) != 0 {
		t.Errorf("bad arguments reached the runners %d times", len(asked))
	}

	// A well-formed id of no sandbox: gone, and what to do.
	for _, tool := range []string{"sandbox_exec", "sandbox_read_file", "sandbox_write_file"} {
		args := map[string]any{"sandbox_id": "sb-0123456789abcdef0123", "command": "ls", "path": "/tmp/a", "content": "x"}
		switch tool {
		case "sandbox_read_file":
			delete(args, "content")
			delete(args, "command")
		case "sandbox_write_file":
			delete(args, "command")
		case "sandbox_exec":
			delete(args, "path")
			delete(args, "content")
		}
		msg := callError(t, cs, tool, args)
		if !strings.Contains(msg, `sandbox "sb-0123456789abcdef0123" is gone`) || !strings.Contains(msg, "sandbox_create makes a new one") {
			t.Errorf("%s on a gone sandbox: %q", tool, msg)
		}
	}
	// Destroying a sandbox that is gone succeeds, like airlock sandbox rm.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_destroy", Arguments: map[string]any{"sandbox_id": "sb-0123456789abcdef0123"}})
	if err != nil || res.IsError {
		t.Errorf("destroying a gone sandbox: %v, %+v", err, res)
	}
	// An engine failure is a tool error that says what to do.
	if msg := callError(t, cs, "run_code", map[string]any{"language": "python", "code": "print(42)"}); !strings.Contains(msg, "no engine in unit tests") || !strings.Contains(msg, "airlock doctor") {
		t.Errorf("engine failure: %q", msg)
	}
	// A template narrowed within its bounds reaches the runner of its engine.
	rs.Asked()
	for tool, args := range map[string]map[string]any{
		"run_code":       {"language": "python", "code": "1", "template": "py", "timeout_s": 2},
		"sandbox_create": {"template": "py", "memory": "128MiB"},
	} {
		if msg := callError(t, cs, tool, args); !strings.Contains(msg, "no engine in unit tests") {
			t.Errorf("%s on a template: %q", tool, msg)
		}
	}
	if asked := rs.Asked(); !slices.Equal(asked, []string{"oci", "oci"}) {
		t.Errorf("templated calls reached the runners of %v, want twice oci", asked)
	}
	// Listing reads the records: it needs no engine.
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_list"})
	if err != nil || res.IsError {
		t.Fatalf("sandbox_list without an engine: %v, %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"sandboxes":[]}` {
		t.Errorf("sandbox_list of an empty root: %s", b)
	}
	if asked := rs.Asked(); len(asked) > 0 {
		t.Errorf("sandbox_list asked engines %v", asked)
	}
}

// TestRunCodeRunCodeTemplate: under --run-code-template python=rc,
// run_code's python without a template of its own goes to rc's engine
// through service.RunCode's pooled path (whose first step is creating
// the sandbox), rc's timeout its own when it gives none, or cold to the
// service's engine when it asks for more than rc gives; bash, and python on a template, are one-shot runs;
// refusals come before any engine is asked.
func TestRunCodeRunCodeTemplate(t *testing.T) {
	root := testRoot(t)
	argv, err := forkserver.Argv("python", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A timeout under run_code's default (30s): without timeout_s, the
	// template's is the run's, so the pool serves it.
	var spec runner.Spec
	spec.Policy.Limits.Timeout = 10 * time.Second
	tp := fuzztest.PutTemplate(t, root, "rc", spec, "oci")
	tp.Warm, tp.Snapshot = argv, strings.Repeat("ab", 32)
	if err := templates.Open(root).Replace(tp); err != nil {
		t.Fatal(err)
	}
	rs := &fuzztest.NoEngines{}
	cs := connectService(t, service.New(root, rs, service.WithEngine("docker"), service.WithRunCodeTemplates(map[string]string{"python": "rc"})))
	over := tp.Limits.Timeout.Seconds() + 1
	for _, c := range []struct {
		args   map[string]any
		engine string
		pooled bool
	}{
		{map[string]any{"language": "python", "code": "print(1)"}, "oci", true},
		{map[string]any{"language": "python", "code": "print(1)", "stdin": "x", "timeout_s": 2}, "oci", true},
		{map[string]any{"language": "python", "code": "print(1)", "timeout_s": over}, "docker", false},
		{map[string]any{"language": "bash", "code": "echo 1"}, "docker", false},
		{map[string]any{"language": "python", "code": "print(1)", "template": "py"}, "oci", false},
	} {
		msg := callError(t, cs, "run_code", c.args)
		if asked := rs.Asked(); !slices.Equal(asked, []string{c.engine}) || !strings.Contains(msg, "no engine in unit tests") {
			t.Errorf("run_code %v: asked %v (%q), want %s", c.args, asked, msg, c.engine)
		}
		if got := strings.HasPrefix(msg, "running the code: unavailable: creating the sandbox:"); got != c.pooled {
			t.Errorf("run_code %v: %q; from the pool: %v, want %v", c.args, msg, got, c.pooled)
		}
	}
	for _, args := range []map[string]any{
		{"language": "python", "code": ""},
		{"language": "python", "code": "a\x00b"},
		{"language": "python", "code": "1", "timeout_s": 0},
	} {
		callError(t, cs, "run_code", args)
	}
	if asked := rs.Asked(); len(asked) != 0 {
		t.Errorf("refused run_code calls reached the engines %v", asked)
	}
}

// docs/mcp.md names every tool with its arguments, as the server lists
// them: `tool{arg, optional?, one | other}`.
func TestMCPDocTools(t *testing.T) {
	b, err := os.ReadFile("../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]map[string]bool{} // tool → argument → required
	for _, m := range regexp.MustCompile("`([a-z_]+)(?:\\{([^}]*)\\})?`").FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(toolNames, m[1]) || doc[m[1]] != nil {
			continue
		}
		args := map[string]bool{}
		for _, a := range strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == '\n' }) {
			alts := strings.Split(a, "|")
			for _, alt := range alts {
				name := strings.TrimSpace(alt)
				args[strings.TrimSuffix(name, "?")] = len(alts) == 1 && !strings.HasSuffix(name, "?")
			}
		}
		doc[m[1]] = args
	}
	cs := connect(t, testRoot(t), &fuzztest.NoEngines{})
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range lt.Tools {
		var schema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		raw, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatalf("%s: input schema %s: %v", tool.Name, raw, err)
		}
		args, ok := doc[tool.Name]
		if !ok {
			t.Errorf("docs/mcp.md does not name tool %s", tool.Name)
			continue
		}
		for name := range schema.Properties {
			required, ok := args[name]
			switch {
			case !ok:
				t.Errorf("docs/mcp.md: %s's argument %s is missing", tool.Name, name)
			case required != slices.Contains(schema.Required, name):
				t.Errorf("docs/mcp.md: %s's argument %s is shown required=%v; the schema says %v", tool.Name, name, required, !required)
			}
		}
		for name := range args {
			if _, ok := schema.Properties[name]; !ok {
				t.Errorf("docs/mcp.md: %s shows argument %s, which the tool does not take", tool.Name, name)
			}
		}
	}
}
