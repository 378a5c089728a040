package templates

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

func testEgress(t *testing.T, allow, creds []string) isolation.Egress {
	t.Helper()
	e, err := wire.ParseEgress(allow, creds)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A template keeps its egress through its file, and one without egress
// writes no egress fields, so its version is what it always was.
func TestEgressRoundTrip(t *testing.T) {
	plain, err := json.Marshal(mustNew(t, "plain", runner.Spec{}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), "allow_host") || strings.Contains(string(plain), "credential") || strings.Contains(string(plain), "egress_limit") {
		t.Errorf("a template without egress writes egress fields: %s", plain)
	}
	s := runner.Spec{Policy: isolation.Policy{Egress: testEgress(t, []string{"pypi.org", "*.pythonhosted.org:443"}, []string{"api.example.com=Authorization:@/run/key"})}}
	tp := mustNew(t, "net", s)
	b, err := json.Marshal(tp)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"allow_host":["pypi.org","*.pythonhosted.org:443"]`, `"credential":["api.example.com=Authorization:@/run/key"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back Template
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version() != tp.Version() || strings.Join(back.Egress.Allow.Entries(), " ") != "pypi.org *.pythonhosted.org:443" || len(back.Egress.Credentials) != 1 {
		t.Errorf("read back %+v", back.Egress)
	}
	if got := tp.Spec().Policy.Egress; !got.On() || len(got.Credentials) != 1 {
		t.Errorf("the template's spec has egress %+v", got)
	}
	// A limit given is kept, in the CLI's units.
	s.Policy.Egress.Bytes = 4 << 30
	b4, err := json.Marshal(mustNew(t, "net4", s))
	if err != nil {
		t.Fatal(err)
	}
	var back4 Template
	if !strings.Contains(string(b4), `"egress_limit":"4GiB"`) || json.Unmarshal(b4, &back4) != nil || back4.Egress.Bytes != 4<<30 {
		t.Errorf("a template with a 4GiB egress limit: %s, read back %v", b4, back4.Egress.Bytes)
	}
	// A file's entries go through the one parser.
	bad := strings.Replace(string(b), `"pypi.org",`, `"*",`, 1)
	bad = strings.Replace(bad, `"version":"`+tp.Version()+`",`, "", 1)
	var we *wire.Error
	if err := json.Unmarshal([]byte(bad), &back); !errors.As(err, &we) || we.Field != "allow_host" {
		t.Errorf("a template file with allow_host \"*\": %v", err)
	}
}

// A run may remove hosts and credentials from its template's, never add
// one, and a run that names none keeps the template's.
func TestNarrowEgress(t *testing.T) {
	tp := mustNew(t, "net", runner.Spec{Policy: isolation.Policy{Egress: testEgress(t, []string{"*.example.org", "pypi.org:443"}, []string{"api.example.com=Authorization:KEY", "b.example.com=X-Key:@/k"})}})
	run := func(allow, creds []string) (runner.Spec, error) {
		return tp.Narrow(runner.Spec{Argv: []string{"true"}, Policy: isolation.Policy{Egress: testEgress(t, allow, creds)}})
	}
	s, err := run(nil, nil)
	if err != nil || len(s.Policy.Egress.Allow.Rules()) != 2 || len(s.Policy.Egress.Credentials) != 2 {
		t.Errorf("no egress given: %+v, %v", s.Policy.Egress, err)
	}
	s, err = run([]string{"a.example.org", "pypi.org:443"}, []string{"b.example.com=X-Key:@/k"})
	if err != nil || strings.Join(s.Policy.Egress.Allow.Entries(), " ") != "a.example.org pypi.org:443" || len(s.Policy.Egress.Credentials) != 1 || s.Policy.Egress.Credentials[0].Host != "b.example.com" {
		t.Errorf("a narrower egress: %+v, %v", s.Policy.Egress, err)
	}
	for _, c := range []struct {
		allow, creds []string
		words        string
	}{
		{[]string{"example.org"}, nil, `allow_host "example.org"`},
		{[]string{"pypi.org"}, nil, `allow_host "pypi.org": port 80`},
		{[]string{"192.0.2.1"}, nil, `allow_host "192.0.2.1"`},
		{nil, []string{"api.example.com=Authorization:OTHER"}, `credential "api.example.com=Authorization:OTHER"`},
		{nil, []string{"c.example.com=X-Key:@/k"}, `credential "c.example.com=X-Key:@/k"`},
	} {
		_, err := run(c.allow, c.creds)
		var ee *egress.Error
		if !errdefs.IsInvalidArgument(err) || !errors.As(err, &ee) || !strings.Contains(err.Error(), c.words) || !strings.Contains(err.Error(), `template "net"`) {
			t.Errorf("%v %v: %v; want invalid input with %q", c.allow, c.creds, err, c.words)
		}
	}
}

// A template's egress limit needs its egress.
func TestEgressLimitNeedsEgress(t *testing.T) {
	_, err := New("t", runner.Spec{Policy: isolation.Policy{Egress: isolation.Egress{Bytes: 1 << 30}}}, "", testIndex(t))
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "no egress") {
		t.Errorf("a template with an egress limit and no egress: %v", err)
	}
}

// A run may lower its template's egress limit (given or the default),
// never raise it, and gives none to a template without egress.
func TestNarrowEgressLimit(t *testing.T) {
	net := testEgress(t, []string{"pypi.org"}, nil)
	limited := net
	limited.Bytes = 2 << 30
	for _, c := range []struct {
		tmpl      isolation.Egress
		want, got units.Bytes
		words     string
	}{
		{limited, 1 << 30, 1 << 30, ""},
		{limited, 0, 2 << 30, ""},
		{limited, 3 << 30, 0, `egress_limit 3GiB is above template "t"'s 2GiB`},
		{net, 512 << 20, 512 << 20, ""},
		{net, 2 << 30, 0, `egress_limit 2GiB is above template "t"'s 1GiB`},
		{isolation.Egress{}, 1 << 20, 0, `template "t" has no egress, so egress_limit cannot be given`},
	} {
		tp := mustNew(t, "t", runner.Spec{Policy: isolation.Policy{Egress: c.tmpl}})
		s, err := tp.Narrow(runner.Spec{Argv: []string{"true"}, Policy: isolation.Policy{Egress: isolation.Egress{Bytes: c.want}}})
		switch {
		case c.words == "" && (err != nil || s.Policy.Egress.Bytes != c.got):
			t.Errorf("template limit %v, run asks %v: %v, %v; want %v", c.tmpl.Bytes, c.want, s.Policy.Egress.Bytes, err, c.got)
		case c.words != "" && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.words)):
			t.Errorf("template limit %v, run asks %v: %v; want invalid input with %q", c.tmpl.Bytes, c.want, err, c.words)
		}
	}
}
