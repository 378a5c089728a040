package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/wire"
)

// putTemplate stores template "py" (oci, 256MiB, env A=1) under root.
func putTemplate(t *testing.T, root string) *templates.Template {
	spec := runner.Spec{Env: []string{"A=1"}, Policy: isolation.Policy{Limits: isolation.Limits{Memory: 256 << 20}}}
	return fuzztest.PutTemplate(t, root, "py", spec, "oci")
}

func TestTemplateRequests(t *testing.T) {
	s, root := newTestServer(t, nil)
	putTemplate(t, root)
	h := s.Handler()
	for _, c := range []struct {
		name, target, body, kind, says string
	}{
		{"unknown template", "/v1/runs", `{"argv":["true"],"template":"nope"}`, KindNotFound, `no template "nope"`},
		{"unknown template, sandbox", "/v1/sandboxes", `{"template":"nope"}`, KindNotFound, `no template "nope"`},
		{"bad name", "/v1/runs", `{"argv":["true"],"template":"../x"}`, KindInvalidInput, "template name"},
		{"wider memory", "/v1/runs", `{"argv":["true"],"template":"py","memory":"1GiB"}`, KindInvalidInput, `memory 1GiB is above template "py"'s 256MiB`},
		{"wider memory, sandbox", "/v1/sandboxes", `{"template":"py","memory":"1GiB"}`, KindInvalidInput, `memory 1GiB is above template "py"'s 256MiB`},
		{"other engine", "/v1/runs", `{"argv":["true"],"template":"py","engine":"docker"}`, KindInvalidInput, "engine docker"},
		{"other isolation", "/v1/sandboxes", `{"template":"py","isolation":"seccomp"}`, KindInvalidInput, "isolation seccomp"},
		{"other image", "/v1/runs", `{"argv":["true"],"template":"py","image":"sha256:` + strings.Repeat("2", 64) + `"}`, KindInvalidInput, "not template \"py\"'s image"},
		// A narrowing passes conversion and reaches the (absent) engine.
		{"narrower", "/v1/runs", `{"argv":["true"],"template":"py","memory":"128MiB"}`, KindUnavailable, "no engine"},
		{"narrower, sandbox", "/v1/sandboxes", `{"template":"py","memory":"128MiB","ttl":"1m"}`, KindUnavailable, "no engine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := errorOf(t, do(t, h, false, "POST", c.target, c.body))
			if e.Kind != c.kind || !strings.Contains(e.Message, c.says) {
				t.Fatalf("got %s %q; want %s saying %q", e.Kind, e.Message, c.kind, c.says)
			}
		})
	}
}

func TestTemplateRequestSpec(t *testing.T) {
	root := t.TempDir()
	tp := putTemplate(t, root)
	ts := service.New(root, &fuzztest.NoEngines{})
	pids := int64(32)
	q := RunRequest{PolicyRequest: PolicyRequest{Policy: wire.Policy{Template: "py", Memory: "128MiB", Pids: &pids, Env: []string{"B=2"}}}, Argv: []string{"true"}}
	s, eng, err := q.spec(ts)
	if err != nil {
		t.Fatal(err)
	}
	l := s.Policy.Limits
	if s.Image != tp.Image || l.Memory != 128<<20 || l.Pids != 32 || l.Timeout != tp.Limits.Timeout || !slices.Equal(s.Env, []string{"A=1", "B=2"}) || eng != "oci" {
		t.Errorf("spec %+v, engine %q", s, eng)
	}
	sq := SandboxRequest{PolicyRequest: PolicyRequest{Policy: wire.Policy{Template: "py", CPUs: "0.5"}}, TTL: "1m"}
	ss, eng, err := sq.spec(ts)
	if err != nil {
		t.Fatal(err)
	}
	if ss.Policy.Limits.CPUs != 500 || ss.Policy.Limits.Memory != 256<<20 || ss.TTL != time.Minute || eng != "oci" {
		t.Errorf("sandbox spec %+v, engine %q", ss, eng)
	}
	// Without a template, absent fields still take the defaults.
	plain := RunRequest{Argv: []string{"true"}}
	if s, _, err := plain.spec(ts); err != nil || s.Policy.Limits != isolation.Default().Limits {
		t.Errorf("no template: %+v, %v", s.Policy, err)
	}
}

// An empty allow_host or credential on a template with egress is refused:
// read as not given, it would keep the template's whole egress, the
// widest answer to a request for none of it.
func TestEmptyEgressListOnTemplateRefused(t *testing.T) {
	s, root := newTestServer(t, nil)
	allow, err := egress.ParseAllowlist([]string{"pypi.org", "*.pythonhosted.org"})
	if err != nil {
		t.Fatal(err)
	}
	fuzztest.PutTemplate(t, root, "net", runner.Spec{Policy: isolation.Policy{Egress: isolation.Egress{Allow: allow}}}, "oci")
	h := s.Handler()
	for _, c := range []struct{ target, body, field string }{
		{"/v1/runs", `{"template":"net","argv":["true"],"allow_host":[]}`, "allow_host"},
		{"/v1/runs", `{"template":"net","argv":["true"],"credential":[]}`, "credential"},
		{"/v1/sandboxes", `{"template":"net","allow_host":[]}`, "allow_host"},
		{"/v1/sandboxes", `{"allow_host":[]}`, "allow_host"},
	} {
		e := errorOf(t, do(t, h, false, "POST", c.target, c.body))
		if e.Kind != KindInvalidInput || !strings.HasPrefix(e.Message, c.field+" []: ") || !strings.Contains(e.Message, "leave it out") {
			t.Errorf("%s %s: %s %q; want invalid_input naming %s", c.target, c.body, e.Kind, e.Message, c.field)
		}
	}
}
