package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/units"
)

var testCeilings = Ceilings{Memory: 1 << 30, Output: 8 << 20, Egress: 2 << 30, Workspace: 4 << 30, Timeout: time.Minute, TTL: 2 * time.Hour}

// testEgress allows one host through a proxy of limit bytes.
func testEgress(t *testing.T, limit units.Bytes) isolation.Egress {
	t.Helper()
	allow, err := egress.ParseAllowlist([]string{"pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	return isolation.Egress{Allow: allow, Bytes: limit}
}

// TestCeilingsRefuse: a run, a sandbox or an exec over a ceiling is
// invalid input naming the field, the ceiling and the flag, and reaches
// no engine.
func TestCeilingsRefuse(t *testing.T) {
	fe := &fakeEngine{}
	r, _ := newFakeRunner(t, fe, WithCeilings(testCeilings))
	ctx := context.Background()
	for name, c := range map[string]struct {
		set  func(*Spec)
		want []string
	}{
		"memory": {func(s *Spec) { s.Policy.Limits.Memory = 2 << 30 }, []string{"memory 2GiB", "ceiling of 1GiB", "--max-memory"}},
		// /tmp is memory, and an upload's pages there are the server's.
		"tmp":     {func(s *Spec) { s.Policy.Limits.Memory, s.Policy.Limits.Tmp = 256<<20, 2<<30 }, []string{"tmp size 2GiB", "ceiling of 1GiB", "--max-memory"}},
		"timeout": {func(s *Spec) { s.Policy.Limits.Timeout = 2 * time.Minute }, []string{"timeout 2m0s", "ceiling of 1m0s", "--max-timeout"}},
		"output":  {func(s *Spec) { s.Policy.Limits.Output = 9 << 20 }, []string{"output limit 9MiB", "ceiling of 8MiB", "--max-output-limit"}},
		"egress":  {func(s *Spec) { s.Policy.Egress = testEgress(t, 3<<30) }, []string{"egress limit 3GiB", "ceiling of 2GiB", "--max-egress-limit"}},
	} {
		s := fakeSpec()
		c.set(&s)
		_, err := r.Run(ctx, s)
		for _, w := range c.want {
			if !errdefs.IsInvalidArgument(err) || err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("a run over the %s ceiling: %v; want invalid input naming %q", name, err, w)
				break
			}
		}
	}
	// At the ceilings exactly is allowed: the run reaches the engine.
	fe.run = func(context.Context, *engine.SandboxSpec) (engine.Exit, error) { return engine.Exit{}, nil }
	s := fakeSpec()
	s.Policy.Limits.Memory, s.Policy.Limits.Timeout, s.Policy.Limits.Output = testCeilings.Memory, testCeilings.Timeout, testCeilings.Output
	s.Policy.Egress = testEgress(t, testCeilings.Egress)
	if _, err := r.Run(ctx, s); err != nil {
		t.Errorf("a run at the ceilings: %v", err)
	}
	if n := fe.runs.Load(); n != 1 {
		t.Errorf("%d runs reached the engine, want the one at the ceilings", n)
	}
}

// TestCeilingsNameTheirCommand: a refusal names the command whose flag
// sets the ceiling, airlock node's as well as airlock serve's.
func TestCeilingsNameTheirCommand(t *testing.T) {
	a := asked{Output: 2 << 30}
	for cmd, want := range map[string]string{
		"":             "output limit 2GiB is above this server's ceiling of 1GiB (airlock serve --max-output-limit): ask for at most 1GiB",
		"airlock node": "output limit 2GiB is above this node's ceiling of 1GiB (airlock node --max-output-limit): ask for at most 1GiB",
	} {
		err := Ceilings{Output: 1 << 30, Command: cmd}.check(a)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", cmd, err, want)
		}
	}
}

func TestCeilingsSandboxAndExec(t *testing.T) {
	f := &fakeSandboxer{}
	r, _ := newSandboxRunner(t, f)
	r.ceil = testCeilings
	ctx := context.Background()
	s := fakeSandboxSpec()
	refused := func(what, want string) {
		t.Helper()
		sb, err := r.Create(ctx, s)
		if err == nil {
			r.Destroy(ctx, sb.ID())
		}
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("a sandbox over the %s ceiling: %v; want invalid input naming %q", what, err, want)
		}
	}
	s.TTL = 3 * time.Hour
	refused("TTL", "ttl 3h0m0s is above this server's ceiling of 2h0m0s (airlock serve --max-ttl)")
	s.TTL = 0
	s.Policy.Limits.Memory = 2 << 30
	refused("memory", "--max-memory")
	s.Policy.Limits.Memory = 0
	s.WorkspaceSize = 8 << 30
	refused("workspace", "workspace size 8GiB is above this server's ceiling of 4GiB (airlock serve --max-workspace-size)")
	s.WorkspaceSize = 0
	sb, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy(ctx, sb.ID())
	for _, p := range []ExecSpec{
		{Argv: []string{"true"}, Timeout: 2 * time.Minute},
		{Argv: []string{"true"}, OutputLimit: 9 << 20},
	} {
		if _, err := sb.Exec(ctx, p); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "ceiling") {
			t.Errorf("an exec over a ceiling (%v, %v): %v", p.Timeout, p.OutputLimit, err)
		}
	}
	if len(f.specs) != 1 {
		t.Errorf("%d sandboxes reached the engine, want 1", len(f.specs))
	}
}

// TestExecOnlyNarrows: an exec's timeout and output limit may narrow its
// sandbox's, never widen them.
func TestExecOnlyNarrows(t *testing.T) {
	var got *engine.Process
	f := &fakeSandboxer{exec: func(_ context.Context, p *engine.Process) (engine.Exit, error) { got = p; return engine.Exit{}, nil }}
	r, _ := newSandboxRunner(t, f)
	ctx := context.Background()
	s := fakeSandboxSpec()
	s.Policy.Limits.Timeout, s.Policy.Limits.Output = 2*time.Second, 4<<10
	sb, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Destroy(ctx, sb.ID())
	for _, c := range []struct {
		timeout time.Duration
		output  units.Bytes
		wantT   time.Duration
		wantO   int64
	}{
		{0, 0, 2 * time.Second, 4 << 10},
		{time.Minute, 1 << 20, 2 * time.Second, 4 << 10},
		{time.Second, 2 << 10, time.Second, 2 << 10},
	} {
		res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}, Timeout: c.timeout, OutputLimit: c.output})
		if err != nil {
			t.Fatal(err)
		}
		if got.Timeout != c.wantT || res.Limits.TimeoutMS != c.wantT.Milliseconds() || res.Limits.OutputBytes != c.wantO {
			t.Errorf("exec asking %v, %v in a sandbox of 2s, 4KiB: ran with %v, limits %+v; want %v, %d", c.timeout, c.output, got.Timeout, res.Limits, c.wantT, c.wantO)
		}
	}
	// Under a millisecond, a timeout would count as none (the sandbox's
	// own): it is refused.
	got = nil
	if _, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}, Timeout: 500 * time.Microsecond}); !errdefs.IsInvalidArgument(err) || got != nil {
		t.Errorf("an exec asking 500µs: %v (ran: %v)", err, got != nil)
	}
}
