package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// credTemplate is a template with a credential route to api.example.com.
const credTemplate = "cred"

func newCeilFaces(t *testing.T) *faces {
	f := newFaces(t)
	t.Setenv("AIRLOCK_TEST_KEY", "secret")
	allow, err := egress.ParseAllowlist([]string{"api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := egress.ParseCredential("api.example.com=Authorization:AIRLOCK_TEST_KEY")
	if err != nil {
		t.Fatal(err)
	}
	fuzztest.PutTemplate(t, f.root, credTemplate, runner.Spec{Policy: isolation.Policy{Egress: isolation.Egress{Allow: allow, Credentials: []egress.Credential{cred}}}}, "auto")
	return f
}

// The batch's flags given explicitly are ceilings for its job lines: a
// line may ask for less, never more, and one that asks more is refused
// as invalid input, saying the field, its value, the ceiling and the
// flag. A flag left out is only a default.
func TestBatchFlagsAreCeilings(t *testing.T) {
	f := newCeilFaces(t)
	bounded := []string{"--memory", "256MiB", "--timeout", "30s", "--cpus", "1", "--pids", "64", "--output-limit", "1MiB"}
	for _, c := range []struct {
		name  string
		line  string
		flags []string
		words []string // empty: the job reaches the engine
		check func(l isolation.Limits) bool
	}{
		{"memory above", `{"id":"a","argv":["true"],"limits":{"memory":"64GiB"}}`, bounded,
			[]string{"memory 64GiB is above this batch's ceiling of 256MiB (airlock batch --memory)", "ask for at most 256MiB, or give the batch a higher --memory"}, nil},
		{"timeout above", `{"id":"a","argv":["true"],"limits":{"timeout":"24h"}}`, bounded,
			[]string{"timeout 24h0m0s is above this batch's ceiling of 30s (airlock batch --timeout)"}, nil},
		{"cpus above", `{"id":"a","argv":["true"],"limits":{"cpus":"8"}}`, bounded,
			[]string{"cpus 8 is above this batch's ceiling of 1 (airlock batch --cpus)"}, nil},
		{"pids above", `{"id":"a","argv":["true"],"limits":{"pids":4096}}`, bounded,
			[]string{"pids 4096 is above this batch's ceiling of 64 (airlock batch --pids)"}, nil},
		{"output above", `{"id":"a","argv":["true"],"limits":{"output":"1GiB"}}`, bounded,
			[]string{"output limit 1GiB is above this batch's ceiling of 1MiB (airlock batch --output-limit)"}, nil},
		{"each refusal said", `{"id":"a","argv":["true"],"limits":{"memory":"1GiB","timeout":"1m"}}`, bounded,
			[]string{"memory 1GiB is above", "timeout 1m0s is above"}, nil},
		{"narrower taken", `{"id":"a","argv":["true"],"limits":{"memory":"128MiB","timeout":"5s","pids":32}}`, bounded, nil,
			func(l isolation.Limits) bool {
				return l.Memory == 128<<20 && l.Timeout == 5*time.Second && l.Pids == 32
			}},
		{"flag taken", `{"id":"a","argv":["true"]}`, bounded, nil,
			func(l isolation.Limits) bool { return l.Memory == 256<<20 && l.Timeout == 30*time.Second }},
		{"no flag, no ceiling", `{"id":"a","argv":["true"],"limits":{"memory":"1GiB","timeout":"5m"}}`, nil, nil,
			func(l isolation.Limits) bool { return l.Memory == 1<<30 && l.Timeout == 5*time.Minute }},
		{"only the flags given", `{"id":"a","argv":["true"],"limits":{"memory":"1GiB"}}`, []string{"--timeout", "10s"}, nil,
			func(l isolation.Limits) bool { return l.Memory == 1<<30 && l.Timeout == 10*time.Second }},
		// On a template, the line's own limits replace the flags', and
		// are bounded by them all the same.
		{"above on a template", `{"id":"a","argv":["true"],"template":"narrow","limits":{"memory":"200MiB"}}`, []string{"--memory", "128MiB"},
			[]string{"memory 200MiB is above this batch's ceiling of 128MiB (airlock batch --memory)"}, nil},
		{"within on a template", `{"id":"a","argv":["true"],"template":"narrow","limits":{"memory":"100MiB"}}`, []string{"--memory", "128MiB"}, nil,
			func(l isolation.Limits) bool { return l.Memory == 100<<20 }},
	} {
		got := f.batch(c.line, c.flags...)
		switch {
		case len(c.words) == 0 && got.policy == nil:
			t.Errorf("%s: refused: %s: %s", c.name, got.kind, got.msg)
		case len(c.words) == 0 && !c.check(got.policy.Limits):
			t.Errorf("%s: the engine got limits %+v", c.name, got.policy.Limits)
		case len(c.words) > 0 && got.policy != nil:
			t.Errorf("%s: reached the engine with limits %+v", c.name, got.policy.Limits)
		case len(c.words) > 0:
			if got.kind != "invalid_input" {
				t.Errorf("%s: kind %s, want invalid_input: %s", c.name, got.kind, got.msg)
			}
			for _, w := range c.words {
				if !strings.Contains(got.msg, w) {
					t.Errorf("%s: %q does not say %q", c.name, got.msg, w)
				}
			}
		}
	}
}

// A line's egress is within the batch's: its --allow-host and
// --credential when given, else its --template's, else none. A line never
// turns egress on by itself, by its own allow_host or by naming a
// template with egress; egress_limit is bounded by --egress-limit.
func TestBatchLineEgressIsBounded(t *testing.T) {
	f := newCeilFaces(t)
	for _, c := range []struct {
		name  string
		line  string
		flags []string
		words string // empty: the job reaches the engine
		hosts string
	}{
		{"no flag, own host", `{"id":"a","argv":["true"],"allow_host":["pypi.org"]}`, nil,
			`allow_host "pypi.org" is not on this batch's allowlist (none: the batch gave no --allow-host): a job line may narrow the batch's egress, never widen it; leave the host out, or give the batch --allow-host pypi.org`, ""},
		{"no flag, a template's host", `{"id":"a","argv":["true"],"template":"net"}`, nil,
			`allow_host "pypi.org" (template "net"'s) is not on this batch's allowlist (none: the batch gave no --allow-host)`, ""},
		{"no flag, a template's credential", `{"id":"a","argv":["true"],"template":"cred"}`, []string{"--allow-host", "api.example.com"},
			`credential "api.example.com=Authorization:AIRLOCK_TEST_KEY" (template "cred"'s) is not one of this batch's credentials (none: the batch gave no --credential)`, ""},
		{"a host added to the flags'", `{"id":"a","argv":["true"],"allow_host":["pypi.org","evil.example"]}`, []string{"--allow-host", "pypi.org"},
			`allow_host "evil.example" is not on this batch's allowlist (--allow-host: pypi.org)`, ""},
		{"a port added to the flags'", `{"id":"a","argv":["true"],"allow_host":["pypi.org:22"]}`, []string{"--allow-host", "pypi.org"},
			`allow_host "pypi.org:22" is not on this batch's allowlist`, ""},
		{"a host above a wildcard", `{"id":"a","argv":["true"],"allow_host":["example.org"]}`, []string{"--allow-host", "*.example.org"},
			`allow_host "example.org" is not on this batch's allowlist`, ""},
		{"fewer hosts", `{"id":"a","argv":["true"],"allow_host":["files.pythonhosted.org"]}`, []string{"--allow-host", "pypi.org", "--allow-host", "*.pythonhosted.org"},
			"", "files.pythonhosted.org"},
		{"the flags' hosts", `{"id":"a","argv":["true"]}`, []string{"--allow-host", "pypi.org"}, "", "pypi.org"},
		{"--template's hosts", `{"id":"a","argv":["true"]}`, []string{"--template", "net"}, "", "pypi.org"},
		{"--template's named", `{"id":"a","argv":["true"],"template":"net","allow_host":["pypi.org"]}`, []string{"--template", "net"}, "", "pypi.org"},
		{"--template's credential", `{"id":"a","argv":["true"]}`, []string{"--template", "cred"}, "", "api.example.com"},
		{"egress_limit above", `{"id":"a","argv":["true"],"egress_limit":"2GiB"}`, []string{"--allow-host", "pypi.org", "--egress-limit", "100MiB"},
			"egress limit 2GiB is above this batch's ceiling of 100MiB (airlock batch --egress-limit)", ""},
		{"egress_limit within", `{"id":"a","argv":["true"],"egress_limit":"50MiB"}`, []string{"--allow-host", "pypi.org", "--egress-limit", "100MiB"},
			"", "pypi.org"},
	} {
		got := f.batch(c.line, c.flags...)
		switch {
		case c.words == "" && got.policy == nil:
			t.Errorf("%s: refused: %s: %s", c.name, got.kind, got.msg)
		case c.words == "":
			if e := got.policy.Record().Egress; e == nil || strings.Join(e.AllowHost, " ") != c.hosts {
				t.Errorf("%s: the engine got egress %+v, want hosts %s", c.name, e, c.hosts)
			}
		case got.policy != nil:
			t.Errorf("%s: reached the engine with egress %+v", c.name, got.policy.Record().Egress)
		case got.kind != "invalid_input" || !strings.Contains(got.msg, c.words):
			t.Errorf("%s: %s: %s; want invalid_input saying %q", c.name, got.kind, got.msg, c.words)
		}
	}
	if got := f.batch(`{"id":"a","argv":["true"],"egress_limit":"50MiB"}`, "--allow-host", "pypi.org", "--egress-limit", "100MiB"); got.policy == nil || got.policy.Egress.Bytes != 50<<20 {
		t.Errorf("egress_limit 50MiB under --egress-limit 100MiB: %+v", got)
	}
}

// With --template, a line may name that template or none, never another:
// it would take the other's settings wherever the batch gave no flag.
func TestBatchTemplateBoundsLines(t *testing.T) {
	f := newCeilFaces(t)
	got := f.batch(`{"id":"a","argv":["true"],"template":"net"}`, "--template", narrowTemplate)
	want := `template "net": this batch runs on --template narrow, and a job line may not name another (it would take that template's settings); leave "template" out of the line to run on narrow, or run the batch without --template`
	if got.policy != nil || got.kind != "invalid_input" || !strings.Contains(got.msg, want) {
		t.Errorf("another template: %+v, want invalid_input saying %q", got, want)
	}
	for _, line := range []string{`{"id":"a","argv":["true"],"template":"narrow"}`, `{"id":"a","argv":["true"]}`} {
		if got := f.batch(line, "--template", narrowTemplate); got.policy == nil || got.policy.Limits.Memory != 256<<20 {
			t.Errorf("%s on --template narrow: %+v", line, got)
		}
	}
	// Without --template, a line names any template, as before.
	if got := f.batch(`{"id":"a","argv":["true"],"template":"narrow"}`); got.policy == nil {
		t.Errorf("a template without --template: refused: %s", got.msg)
	}
}

// airlock batch writes a line over its flags as that job's invalid_input
// result, and goes on.
func TestBatchCommandRefusesALineOverItsFlags(t *testing.T) {
	dir := t.TempDir()
	jobs, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	os.WriteFile(jobs, []byte(`{"id":"big","argv":["true"],"limits":{"memory":"64GiB","timeout":"24h"}}`+"\n"+
		`{"id":"net","argv":["true"],"allow_host":["evil.example"]}`+"\n"+
		`{"id":"done","argv":["true"]}`+"\n"), 0o644)
	os.WriteFile(out, []byte(`{"job_id":"done"}`+"\n"), 0o644)
	if _, err := batchCmd(t, context.Background(), jobs, "--out", out, "--memory", "256MiB", "--timeout", "30s"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	got := map[string]runner.BatchResult{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r runner.BatchResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		got[r.JobID] = r
	}
	for id, words := range map[string][]string{
		"big": {`job "big": `, "memory 64GiB is above this batch's ceiling of 256MiB (airlock batch --memory)", "timeout 24h0m0s is above this batch's ceiling of 30s (airlock batch --timeout)"},
		"net": {`allow_host "evil.example" is not on this batch's allowlist (none: the batch gave no --allow-host)`},
	} {
		r := got[id]
		if r.Reason != runner.ReasonError || r.ErrorKind != "invalid_input" {
			t.Errorf("job %s: %+v, want an invalid_input result", id, r)
		}
		for _, w := range words {
			if !strings.Contains(r.Error, w) {
				t.Errorf("job %s: %q does not say %q", id, r.Error, w)
			}
		}
	}
}

// A batch's isolation bounds its lines: under gVisor (the default, or
// --template's), a line naming a template of runc's isolation is refused;
// a batch run with --isolation seccomp takes it.
func TestBatchLineIsolationIsBounded(t *testing.T) {
	f := newCeilFaces(t)
	fuzztest.PutTemplate(t, f.root, "runc", runner.Spec{Policy: isolation.Policy{Isolation: isolation.Seccomp}}, "auto")
	line := `{"id":"a","argv":["true"],"template":"runc"}`
	want := `isolation seccomp (template "runc"'s) is weaker than this batch's gvisor: a job line may narrow the batch's settings, never widen them`
	if got := f.batch(line); got.policy != nil || got.kind != "invalid_input" || !strings.Contains(got.msg, want) {
		t.Errorf("no flags: %+v; want invalid_input saying %q", got, want)
	}
	// Refused by the template's own narrowing, and by --template's rule.
	for _, flags := range [][]string{{"--isolation", "gvisor"}, {"--template", narrowTemplate}} {
		if got := f.batch(line, flags...); got.policy != nil || got.kind != "invalid_input" {
			t.Errorf("%v: %+v; want invalid_input", flags, got)
		}
	}
	if got := f.batch(line, "--isolation", "seccomp"); got.policy == nil || got.policy.Isolation != isolation.Seccomp {
		t.Errorf("--isolation seccomp: %+v", got)
	}
	if got := f.batch(`{"id":"a","argv":["true"],"template":"narrow"}`); got.policy == nil || got.policy.Isolation != isolation.GVisor {
		t.Errorf("a gVisor template: %+v", got)
	}
}
