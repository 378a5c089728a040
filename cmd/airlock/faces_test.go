package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/mcpserver"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/templates"
)

// faces reaches one root through each of airlock's five faces, over a
// runner whose engine refuses every sandbox after checking its spec: what
// a face hands the engine is eng.Checked(), and what it refuses is its
// error, as its user sees it.
type faces struct {
	t    *testing.T
	root string
	rn   *runner.Runner
	eng  *enginetest.Refusing
	api  *server.Server
	mcp  *mcp.ClientSession
}

// narrowTemplate is the template faces stores: memory 256MiB, so that
// 1GiB widens it.
const narrowTemplate = "narrow"

// netTemplate is the template with egress faces stores: pypi.org, with
// the default egress limit.
const netTemplate = "net"

func newFaces(t *testing.T) *faces {
	lim := isolation.Default().Limits
	lim.Memory = 256 << 20
	root, rn, eng, _ := fuzztest.Runner(t, narrowTemplate, runner.Spec{Policy: isolation.Policy{Limits: lim}})
	allow, err := egress.ParseAllowlist([]string{"pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	fuzztest.PutTemplate(t, root, netTemplate, runner.Spec{Policy: isolation.Policy{Egress: isolation.Egress{Allow: allow}}}, "auto")
	api, err := server.New(server.Options{Service: fuzztest.Service(root, rn)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	if _, err := mcpserver.New(fuzztest.Service(root, rn)).MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "faces", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return &faces{t: t, root: root, rn: rn, eng: eng, api: api, mcp: cs}
}

// checked is the policy the engine was asked to check, or the refusal.
type checked struct {
	policy *isolation.Policy
	kind   string
	msg    string
}

// took is the policy the engine checked or, when it checked none, the
// face's refusal.
func (f *faces) took(kind, msg string) checked {
	f.t.Helper()
	jobs := f.eng.Checked()
	switch len(jobs) {
	case 0:
		return checked{kind: kind, msg: msg}
	case 1:
		return checked{policy: &jobs[0].Policy}
	}
	f.t.Fatalf("the engine checked %d specs, want 1", len(jobs))
	return checked{}
}

// cli is `airlock sandbox create ARGS`.
func (f *faces) cli(args ...string) checked {
	f.t.Helper()
	fl := &sandboxCreateFlags{}
	cmd := &cobra.Command{Use: "create"}
	addRunFlags(cmd, &fl.runFlags)
	fl.addFlags(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		f.t.Fatal(err)
	}
	s, err := fl.spec(cmd, &globals{root: f.root, stderr: os.Stderr})
	if err == nil {
		_, err = f.rn.Create(context.Background(), s)
	}
	return f.took(errorKind(err), err.Error())
}

// http is POST /v1/sandboxes with body.
func (f *faces) http(body string) checked {
	f.t.Helper()
	rec := httptest.NewRecorder()
	f.api.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body)))
	var e server.ErrorBody
	json.Unmarshal(rec.Body.Bytes(), &e)
	return f.took(e.Error.Kind, e.Error.Message)
}

// batch is `airlock batch FLAGS` on one job line.
func (f *faces) batch(line string, flags ...string) checked {
	f.t.Helper()
	var base runFlags
	cmd := &cobra.Command{Use: "batch"}
	addRunFlags(cmd, &base)
	if err := cmd.ParseFlags(flags); err != nil {
		f.t.Fatal(err)
	}
	pol, err := base.policy()
	if err != nil {
		f.t.Fatal(err)
	}
	jobs, bad, err := runner.ParseJobs(strings.NewReader(line + "\n"))
	if err != nil || len(bad) > 0 {
		f.t.Fatalf("the job line does not parse: %v %+v", err, bad)
	}
	g := &globals{root: f.root, stderr: os.Stderr}
	tmpl, _, err := g.batchTemplates(cmd, &base, runner.Spec{Policy: pol})
	if err != nil {
		f.t.Fatal(err)
	}
	ceil, err := batchCeilings(cmd.Flags(), tmpl, runner.Spec{Policy: pol})
	if err != nil {
		f.t.Fatal(err)
	}
	var res runner.BatchResult
	f.rn.RunBatch(context.Background(), jobs, runner.BatchOptions{Base: runner.Spec{Policy: pol}, Template: tmpl, Ceilings: ceil}, func(r runner.BatchResult) { res = r })
	return f.took(res.ErrorKind, res.Error)
}

// file is a template file holding tmpl's JSON with the fields of edit
// replaced, made into a sandbox with `airlock sandbox create --template`.
func (f *faces) file(edit map[string]any) checked {
	f.t.Helper()
	t, err := templates.Open(f.root).Get(narrowTemplate)
	if err != nil {
		f.t.Fatal(err)
	}
	var m map[string]any
	b, _ := json.Marshal(t)
	json.Unmarshal(b, &m)
	delete(m, "version")
	m["name"] = "file"
	for k, v := range edit {
		m[k] = v
	}
	b, _ = json.Marshal(m)
	if err := os.WriteFile(filepath.Join(f.root, "templates", "file.json"), b, 0o644); err != nil {
		f.t.Fatal(err)
	}
	return f.cli("--template", "file")
}

// tool is MCP's sandbox_create with args.
func (f *faces) tool(args map[string]any) checked {
	f.t.Helper()
	res, err := f.mcp.CallTool(context.Background(), &mcp.CallToolParams{Name: "sandbox_create", Arguments: args})
	if err != nil {
		f.t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	// "creating the sandbox: KIND: MESSAGE (ADVICE)"
	_, text, _ = strings.Cut(text, ": ")
	kind, msg, _ := strings.Cut(text, ": ")
	return f.took(kind, msg)
}

func recordHash(t *testing.T, p *isolation.Policy) string {
	t.Helper()
	b, err := json.Marshal(p.Record())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// One policy given through the CLI, the API, a batch line, a template file
// and MCP reaches the engine as one policy: the same isolation.Record.
func TestOnePolicyEveryFace(t *testing.T) {
	f := newFaces(t)
	// A batch line may only narrow the batch's --allow-host: the batch
	// gives the hosts too.
	hosts := []string{"--allow-host", "pypi.org", "--allow-host", "*.pythonhosted.org:443"}
	got := map[string]checked{
		"cli":   f.cli("--memory", "256MiB", "--timeout", "20s", "--allow-host", "PyPI.org", "--allow-host", "*.pythonhosted.org:443", "--egress-limit", "2GiB"),
		"api":   f.http(`{"memory":"256MiB","timeout":"20s","allow_host":["PyPI.org","*.pythonhosted.org:443"],"egress_limit":"2GiB"}`),
		"batch": f.batch(`{"id":"a","argv":["true"],"limits":{"memory":"256MiB","timeout":"20s"},"allow_host":["PyPI.org","*.pythonhosted.org:443"],"egress_limit":"2GiB"}`, hosts...),
		"file":  f.file(map[string]any{"memory": "256MiB", "timeout": "20s", "allow_host": []string{"PyPI.org", "*.pythonhosted.org:443"}, "egress_limit": "2GiB"}),
		"mcp":   f.tool(map[string]any{"memory": "256MiB", "timeout_s": 20, "allow_host": []string{"PyPI.org", "*.pythonhosted.org:443"}, "egress_limit": "2GiB"}),
	}
	want := isolation.Default().WithDefaults()
	want.Limits.Memory, want.Limits.Timeout = 256<<20, 20*time.Second
	var first string
	for face, c := range got {
		if c.policy == nil {
			t.Fatalf("%s refused the policy: %s: %s", face, c.kind, c.msg)
		}
		if l := c.policy.Limits; l.Memory != want.Limits.Memory || l.Timeout != want.Limits.Timeout || l.CPUs != want.Limits.CPUs || l.Pids != want.Limits.Pids {
			t.Errorf("%s: limits %+v, want %+v", face, l, want.Limits)
		}
		if e := c.policy.Record().Egress; e == nil || strings.Join(e.AllowHost, " ") != "pypi.org *.pythonhosted.org:443" || e.LimitBytes != 2<<30 {
			t.Errorf("%s: egress %+v", face, e)
		}
		h := recordHash(t, c.policy)
		if first == "" {
			first = h
		}
		if h != first {
			b, _ := json.Marshal(c.policy.Record())
			t.Errorf("%s: record %s differs from another face's: %s", face, h[:12], b)
		}
	}
}

// One bad value is refused through every face that can say it with the
// same kind and the same words (each face names the field its own way,
// --timeout, timeout or timeout_s, and MCP gives seconds as a number).
func TestOneRefusalEveryFace(t *testing.T) {
	f := newFaces(t)
	for _, c := range []struct {
		name  string
		kind  string
		words string
		faces map[string]func() checked
	}{
		{"memory lots", "invalid_input", `"lots": give a positive size such as "512MiB" or "1.5GiB"`, map[string]func() checked{
			"cli":   func() checked { return f.cli("--memory", "lots") },
			"api":   func() checked { return f.http(`{"memory":"lots"}`) },
			"batch": func() checked { return f.batch(`{"id":"a","argv":["true"],"limits":{"memory":"lots"}}`) },
			"file":  func() checked { return f.file(map[string]any{"memory": "lots"}) },
			"mcp":   func() checked { return f.tool(map[string]any{"memory": "lots"}) },
		}},
		{"zero timeout", "invalid_input", `: a limit of zero is neither "unlimited" nor "the default"; give a positive value, or leave it out for the default`, map[string]func() checked{
			"cli":   func() checked { return f.cli("--timeout", "0") },
			"api":   func() checked { return f.http(`{"timeout":"0"}`) },
			"batch": func() checked { return f.batch(`{"id":"a","argv":["true"],"limits":{"timeout":"0"}}`) },
			"file":  func() checked { return f.file(map[string]any{"timeout": "0"}) },
			"mcp":   func() checked { return f.tool(map[string]any{"timeout_s": 0}) },
		}},
		{"a widening of a template", "invalid_input", "memory 1GiB is above template \"narrow\"'s 256MiB: a template's settings may narrow it, never widen or change it; leave memory out to take the template's, or create another template (`airlock template create`) for more", map[string]func() checked{
			"cli": func() checked { return f.cli("--template", narrowTemplate, "--memory", "1GiB") },
			"api": func() checked { return f.http(`{"template":"narrow","memory":"1GiB"}`) },
			"batch": func() checked {
				return f.batch(`{"id":"a","argv":["true"],"template":"narrow","limits":{"memory":"1GiB"}}`)
			},
			"mcp": func() checked { return f.tool(map[string]any{"template": narrowTemplate, "memory": "1GiB"}) },
		}},
		{"allow_host *", "invalid_input", `"*": a wildcard is "*." before a name, such as "*.example.org"`, map[string]func() checked{
			"cli":   func() checked { return f.cli("--allow-host", "pypi.org", "--allow-host", "*") },
			"api":   func() checked { return f.http(`{"allow_host":["pypi.org","*"]}`) },
			"batch": func() checked { return f.batch(`{"id":"a","argv":["true"],"allow_host":["pypi.org","*"]}`) },
			"file":  func() checked { return f.file(map[string]any{"allow_host": []string{"pypi.org", "*"}}) },
			"mcp":   func() checked { return f.tool(map[string]any{"allow_host": []string{"pypi.org", "*"}}) },
		}},
		{"a host added to a template's", "invalid_input", `"pypi.org": port 443 of this host is not on the template's list (); a run may remove hosts, never add them`, map[string]func() checked{
			"cli": func() checked { return f.cli("--template", narrowTemplate, "--allow-host", "pypi.org") },
			"api": func() checked { return f.http(`{"template":"narrow","allow_host":["pypi.org"]}`) },
			"batch": func() checked {
				return f.batch(`{"id":"a","argv":["true"],"template":"narrow","allow_host":["pypi.org"]}`)
			},
			"mcp": func() checked {
				return f.tool(map[string]any{"template": narrowTemplate, "allow_host": []string{"pypi.org"}})
			},
		}},
		{"egress_limit lots", "invalid_input", `"lots": give a positive size such as "512MiB" or "1.5GiB"`, map[string]func() checked{
			"cli": func() checked { return f.cli("--allow-host", "pypi.org", "--egress-limit", "lots") },
			"api": func() checked { return f.http(`{"allow_host":["pypi.org"],"egress_limit":"lots"}`) },
			"batch": func() checked {
				return f.batch(`{"id":"a","argv":["true"],"allow_host":["pypi.org"],"egress_limit":"lots"}`)
			},
			"file": func() checked {
				return f.file(map[string]any{"allow_host": []string{"pypi.org"}, "egress_limit": "lots"})
			},
			"mcp": func() checked {
				return f.tool(map[string]any{"allow_host": []string{"pypi.org"}, "egress_limit": "lots"})
			},
		}},
		{"an egress limit without egress", "invalid_input", "egress limit 2GiB caps the egress proxy, and this sandbox has no egress: allow a host (allow_host, --allow-host) or leave the limit out", map[string]func() checked{
			"cli":   func() checked { return f.cli("--egress-limit", "2GiB") },
			"api":   func() checked { return f.http(`{"egress_limit":"2GiB"}`) },
			"batch": func() checked { return f.batch(`{"id":"a","argv":["true"],"egress_limit":"2GiB"}`) },
			"mcp":   func() checked { return f.tool(map[string]any{"egress_limit": "2GiB"}) },
		}},
		{"an egress limit above a template's", "invalid_input", `egress_limit 2GiB is above template "net"'s 1GiB`, map[string]func() checked{
			"cli": func() checked { return f.cli("--template", netTemplate, "--egress-limit", "2GiB") },
			"api": func() checked { return f.http(`{"template":"net","egress_limit":"2GiB"}`) },
			"batch": func() checked {
				return f.batch(`{"id":"a","argv":["true"],"template":"net","egress_limit":"2GiB"}`)
			},
			"mcp": func() checked { return f.tool(map[string]any{"template": netTemplate, "egress_limit": "2GiB"}) },
		}},
		// A credential reads airlock's environment or a host file: only the
		// host's command line names one; a client may only narrow a
		// template's.
		{"a client's own credential", "invalid_input", `"api.example.com=Authorization:@/etc/shadow": a credential names airlock's environment or a host file`, map[string]func() checked{
			"api": func() checked { return f.http(`{"credential":["api.example.com=Authorization:@/etc/shadow"]}`) },
			"batch": func() checked {
				return f.batch(`{"id":"a","argv":["true"],"credential":["api.example.com=Authorization:@/etc/shadow"]}`)
			},
			"mcp": func() checked {
				return f.tool(map[string]any{"credential": []string{"api.example.com=Authorization:@/etc/shadow"}})
			},
		}},
	} {
		for face, try := range c.faces {
			got := try()
			if got.policy != nil {
				t.Errorf("%s through %s reached the engine", c.name, face)
				continue
			}
			if got.kind != c.kind || !strings.Contains(got.msg, c.words) {
				t.Errorf("%s through %s: %s: %s; want %s with %q", c.name, face, got.kind, got.msg, c.kind, c.words)
				continue
			}
		}
	}
}
