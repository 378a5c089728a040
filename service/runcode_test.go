package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
	airlockunits "github.com/airlock-sandbox/airlock/units"
)

// putWarm stores template name on the oci engine with a snapshot of warm.
func putWarm(t *testing.T, root, name string, warm []string) {
	t.Helper()
	tp := fuzztest.PutTemplate(t, root, name, runner.Spec{}, "oci")
	tp.Warm, tp.Snapshot = warm, strings.Repeat("ab", 32)
	if err := templates.Open(root).Replace(tp); err != nil {
		t.Fatal(err)
	}
}

// TestRunCodeTemplates: serve refuses at start-up, naming the problem and
// the fix, a --run-code-template that cannot serve; one that can gets a
// pool.
func TestRunCodeTemplates(t *testing.T) {
	root := t.TempDir()
	fuzztest.PutTemplate(t, root, "plain", runner.Spec{}, "oci")
	fuzztest.PutTemplate(t, root, "seccomp", runner.Spec{Policy: isolation.Policy{Isolation: isolation.Seccomp}}, "oci")
	putWarm(t, root, "other", []string{"python3", "-c", "import time; time.sleep(1e9)"})
	argv, err := forkserver.Argv("python", []string{"json"})
	if err != nil {
		t.Fatal(err)
	}
	putWarm(t, root, "rc", argv)
	for _, c := range []struct {
		lang, template string
		is             func(error) bool
		want           string
	}{
		{"bash", "rc", errdefs.IsInvalidArgument, "only python has a fork server"},
		{"python", "nope", errdefs.IsNotFound, `no template "nope"`},
		{"python", "plain", errdefs.IsInvalidArgument, `template "plain" has no snapshot`},
		{"python", "seccomp", errdefs.IsNotImplemented, "which has no snapshots"},
		{"python", "other", errdefs.IsInvalidArgument, "not this airlock's fork server"},
	} {
		s := service.New(root, &fuzztest.NoEngines{}, service.WithRunCodeTemplates(map[string]string{c.lang: c.template}))
		err := s.StartPools(context.Background())
		if !c.is(err) || !strings.Contains(err.Error(), c.want) || (c.lang == "python" && !strings.Contains(err.Error(), "--run-code python")) {
			t.Errorf("%s=%s: %v; want an error saying %q and how to make one", c.lang, c.template, err, c.want)
		}
	}
	n := &fuzztest.NoEngines{}
	s := service.New(root, n, service.WithRunCodeTemplates(map[string]string{"python": "rc"}))
	if err := s.StartPools(context.Background()); !errors.Is(err, fuzztest.ErrNoEngine) || !strings.Contains(err.Error(), `warm pool of template "rc"`) {
		t.Errorf("a run-code template: %v; want its pool made (on no engine here)", err)
	}
	if asked := n.Asked(); !slices.Equal(asked, []string{"oci"}) {
		t.Errorf("the pool asked for engines %v", asked)
	}
}

// TestRunCodeRoutes: code of a language with a run-code template, which
// fits its policy, goes to the template's engine; the rest starts cold,
// saying why.
func TestRunCodeRoutes(t *testing.T) {
	root := t.TempDir()
	argv, _ := forkserver.Argv("python", nil)
	putWarm(t, root, "rc", argv)
	tp, _ := templates.Open(root).Get("rc")
	n := &fuzztest.NoEngines{}
	s := service.New(root, n, service.WithEngine("docker"), service.WithRunCodeTemplates(map[string]string{"python": "rc"}))
	pol := func(timeout time.Duration, mem int64) isolation.Policy {
		p := isolation.Default()
		p.Limits.Timeout = timeout
		if mem != 0 {
			p.Limits.Memory = airlockunits.Bytes(mem)
		}
		return p
	}
	for _, c := range []struct {
		lang   string
		policy isolation.Policy
		engine string
		cold   string
	}{
		{"python", pol(time.Second, 0), "oci", ""},
		{"python", pol(tp.Limits.Timeout, int64(tp.Limits.Memory)), "oci", ""},
		{"bash", pol(time.Second, 0), "docker", ""},
		{"python", pol(tp.Limits.Timeout+time.Second, 0), "docker", "run timeout"},
		{"python", pol(time.Second, 64<<20), "docker", "memory limit 64MiB"},
	} {
		interp := "python3"
		if c.lang == "bash" {
			interp = "bash"
		}
		asked := c.policy.Limits.Memory != isolation.Default().Limits.Memory
		run, err := s.RunCode(context.Background(), service.Code{Language: c.lang, Policy: c.policy, MemoryAsked: asked, Argv: []string{interp, "/home/user/main"}})
		if asked := n.Asked(); !errors.Is(err, fuzztest.ErrNoEngine) || !slices.Equal(asked, []string{c.engine}) {
			t.Errorf("%s %+v: asked %v (%v), want %s", c.lang, c.policy.Limits, asked, err, c.engine)
		}
		if (c.engine == "oci") != (run.Template == "rc") || !strings.Contains(run.Cold, c.cold) || (c.cold == "" && run.Cold != "") {
			t.Errorf("%s %+v: template %q, cold %q; want cold saying %q", c.lang, c.policy.Limits, run.Template, run.Cold, c.cold)
		}
	}
}

// TestRunCodeMemoryAsked: a memory limit the client gave is a limit even
// when it is the default's value: a run-code template of more memory does
// not serve it (the code starts cold, at the limit asked); without one,
// the template's memory serves.
func TestRunCodeMemoryAsked(t *testing.T) {
	root := t.TempDir()
	argv, _ := forkserver.Argv("python", nil)
	var spec runner.Spec
	spec.Policy.Limits.Memory = 2 << 30
	tp := fuzztest.PutTemplate(t, root, "rc", spec, "oci")
	tp.Warm, tp.Snapshot = argv, strings.Repeat("ab", 32)
	if err := templates.Open(root).Replace(tp); err != nil {
		t.Fatal(err)
	}
	n := &fuzztest.NoEngines{}
	s := service.New(root, n, service.WithEngine("docker"), service.WithRunCodeTemplates(map[string]string{"python": "rc"}))
	pol := isolation.Default()
	pol.Limits.Timeout = service.CodeTimeout
	for _, asked := range []bool{false, true} {
		run, _ := s.RunCode(context.Background(), service.Code{Language: "python", Policy: pol, MemoryAsked: asked, Argv: []string{"python3", "/home/user/main"}})
		if pooled := run.Template == "rc"; pooled == asked || asked && !strings.Contains(run.Cold, "memory limit") {
			t.Errorf("memory %v, asked %v: template %q, cold %q", pol.Limits.Memory, asked, run.Template, run.Cold)
		}
	}
}
