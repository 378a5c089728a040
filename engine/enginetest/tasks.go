package enginetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// The task cases: the one-shot run every `airlock run` is.
var taskCases = []struct {
	name string
	fn   func(t *testing.T, s *suite)
}{
	{"TaskRunsOneProgram", testTaskRuns},
	{"TaskConfined", testTaskConfined},
	{"TaskTimeoutKillsDescendants", testTaskTimeout},
	{"TaskCancel", testTaskCancel},
	{"TaskKinds", testTaskKinds},
}

// task runs the program p in a new task with timeout as its limit, waits
// for it with ctx and destroys it; the host must then hold nothing of it.
func (s *suite) task(t *testing.T, ctx context.Context, p engine.Process, timeout time.Duration, env ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	p.Stdout, p.Stderr = &out, &errb
	spec := s.spec(env...)
	spec.Policy.Limits.Timeout = timeout
	spec.Init = &p
	if err := s.e.Check(context.Background(), spec); err != nil {
		t.Fatalf("Check: %v", err)
	}
	tk, err := s.e.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run %q: %v", p.Argv, err)
	}
	if tk.ID() != spec.ID {
		t.Fatalf("ID() = %q; want %q", tk.ID(), spec.ID)
	}
	x, err := tk.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait %q: %v", p.Argv, err)
	}
	for range 2 { // destroying what is gone succeeds
		if err := tk.Destroy(context.Background()); err != nil {
			t.Fatalf("Destroy %s: %v", spec.ID, err)
		}
	}
	if left := s.h.Leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("task %s destroyed, but left: %v", spec.ID, left)
	}
	return result{x, out.String(), errb.String()}
}

// The program gets its argv, the sandbox's environment and stdin, and its
// exit status and both streams come back.
func testTaskRuns(t *testing.T, s *suite) {
	r := s.task(t, context.Background(), engine.Process{Argv: sh(`echo "$0 $TASK"; cat; echo err >&2; exit 3`), Stdin: strings.NewReader("in\n")}, 30*time.Second, "TASK=yes")
	if r.Code != 3 || r.stdout != "sh yes\nin\n" || r.stderr != "err\n" || r.TimedOut || r.Killed {
		t.Fatalf("code %d, stdout %q, stderr %q, %+v; want 3, \"sh yes\\nin\\n\", \"err\\n\"", r.Code, r.stdout, r.stderr, r.Exit)
	}
	if r.Started.IsZero() || r.Finished.Before(r.Started) {
		t.Fatalf("started %v, finished %v", r.Started, r.Finished)
	}
	if r := s.task(t, context.Background(), engine.Process{Argv: []string{"true"}}, 30*time.Second); r.Code != 0 || r.stdout != "" {
		t.Fatalf("true: code %d, stdout %q", r.Code, r.stdout)
	}
}

// A task's program is as confined as a sandbox's exec.
func testTaskConfined(t *testing.T, s *suite) {
	r := s.task(t, context.Background(), engine.Process{Argv: sh("id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; touch /x 2>/dev/null && echo root writable")}, 30*time.Second)
	for _, line := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(r.stdout, line+"\n") {
			t.Errorf("the program's status lacks %q:\n%s", line, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "root writable") || strings.HasPrefix(r.stdout, "0\n") {
		t.Errorf("the program runs as root or can write the root:\n%s", r.stdout)
	}
}

// The policy's timeout ends the program and everything it started, in its
// session or out of it.
func testTaskTimeout(t *testing.T, s *suite) {
	start := time.Now()
	r := s.task(t, context.Background(), engine.Process{Argv: sh("sleep 100 & setsid sleep 101 & sleep 102")}, time.Second)
	if !r.TimedOut {
		t.Fatalf("timed out %v, code %d; want a timeout", r.TimedOut, r.Code)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("a 1s timeout took %v", d)
	}
}

// A wait whose context ends kills the program and says so.
func testTaskCancel(t *testing.T, s *suite) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	r := s.task(t, ctx, engine.Process{Argv: sh("sleep 100")}, time.Minute)
	if !r.Killed || r.TimedOut {
		t.Fatalf("killed %v, timed out %v, code %d; want killed", r.Killed, r.TimedOut, r.Code)
	}
}

// Run takes only a spec with a program, Create only one without, and each
// refuses the other before anything is made.
func testTaskKinds(t *testing.T, s *suite) {
	ctx := context.Background()
	spec := s.spec()
	if _, err := s.e.Run(ctx, spec); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Run with no program: %v; want invalid argument", err)
	}
	spec.Init = &engine.Process{Argv: []string{"true"}}
	if _, err := s.e.Create(ctx, spec); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create with a program: %v; want invalid argument", err)
	}
	if left := s.h.Leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("refused specs left: %v", left)
	}
}
