// Package enginetest is the conformance suite every engine.Engine
// passes, in every isolation mode, against the real runtime: one table of
// cases, as containerd's snapshotter testsuite, for long-lived sandboxes,
// for tasks (the one-shot run) and, where the engine holds them, for held
// sandboxes.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// Harness is what the suite needs to know of an engine besides its
// Sandboxer.
type Harness struct {
	// Policy is the sandboxes' policy; its Isolation is the mode under test.
	Policy isolation.Policy
	// KillSandbox kills the runtime's sandbox process with SIGKILL, from
	// outside, as a crash or an operator would.
	KillSandbox func(t *testing.T, id string)
	// Leftovers lists what the engine still holds for id on the host:
	// runtime containers, cgroups, mounts, directories. Empty once
	// destroyed.
	Leftovers func(t *testing.T, id string) []string
	// Started, when set, is called with each new sandbox: it starts what
	// the engine's supervisor would run beside it (engine.Server).
	Started func(t *testing.T, sb engine.Sandbox)
	// BareExec, when set, is the runtime's own command that runs `true` in
	// sandbox id, for the exec latency figure beside the Go API's.
	BareExec func(id string) *exec.Cmd
}

// Sandboxes runs the suite: every case creates its own sandboxes from
// image (a busybox image: sh, echo, cat, ps, nc, sleep) with newEngine's
// engine and destroys them.
func Sandboxes(t *testing.T, newEngine func(t *testing.T) engine.Engine, image digest.Digest, h Harness) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"ExecMany", testExecMany},
		{"Confined", testConfined},
		{"StatePersists", testStatePersists},
		{"TmpSource", testTmpSource},
		{"EnvAndWorkdir", testEnvAndWorkdir},
		{"Stdin", testStdin},
		{"ExitCodes", testExitCodes},
		{"TimeoutKillsDescendants", testTimeout},
		{"DetachServer", testDetach},
		{"Isolated", testIsolated},
		{"Reopen", testReopen},
		{"Concurrent", testConcurrent},
		{"Lost", testLost},
		{"LostDuringExec", testLostDuringExec},
		{"Cancel", testCancel},
		{"OutOfMemory", testOOM},
		{"Destroy", testDestroy},
		{"OpenUnknown", testOpenUnknown},
		{"ExecLatency", testLatency},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, &suite{e: newEngine(t), image: image, h: h, newEngine: newEngine})
		})
	}
	for _, c := range taskCases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, &suite{e: newEngine(t), image: image, h: h, newEngine: newEngine})
		})
	}
	// Held sandboxes, for engines that keep warm pools (the others refuse
	// a pool: runner.NewPool, and serve's e2e).
	if _, ok := newEngine(t).(engine.Holder); !ok {
		return
	}
	for _, c := range heldCases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t)
			c.fn(t, &suite{e: e, image: image, h: h, newEngine: newEngine}, e.(engine.Holder))
		})
	}
}

type suite struct {
	e         engine.Engine
	newEngine func(t *testing.T) engine.Engine
	image     digest.Digest
	h         Harness
}

var seq struct {
	sync.Mutex
	n int
}

// create makes a sandbox that is destroyed, and checked freed, when the
// test ends.
func (s *suite) create(t *testing.T, env ...string) engine.Sandbox {
	t.Helper()
	return s.createSpec(t, s.spec(env...))
}

// spec is a new sandbox's spec, under a new id.
func (s *suite) spec(env ...string) *engine.SandboxSpec {
	seq.Lock()
	seq.n++
	id := fmt.Sprintf("enginetest-%d-%d", time.Now().UnixNano()%1e9, seq.n)
	seq.Unlock()
	return &engine.SandboxSpec{ID: id, Image: s.image, Policy: s.h.Policy, Env: env, Owner: "enginetest", Deadline: time.Now().Add(time.Hour)}
}

// createSpec is create with the spec given.
func (s *suite) createSpec(t *testing.T, spec *engine.SandboxSpec) engine.Sandbox {
	t.Helper()
	ctx, id := context.Background(), spec.ID
	if err := s.e.Check(ctx, spec); err != nil {
		t.Fatalf("Check: %v", err)
	}
	sb, err := s.e.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if sb.ID() != id {
		t.Fatalf("ID() = %q; want %q", sb.ID(), id)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy %s: %v", id, err)
		}
		if left := s.h.Leftovers(t, id); len(left) > 0 {
			t.Errorf("sandbox %s destroyed, but left: %v", id, left)
		}
	})
	if s.h.Started != nil {
		s.h.Started(t, sb)
	}
	return sb
}

type result struct {
	engine.Exit
	stdout, stderr string
}

func run(t *testing.T, sb engine.Sandbox, p engine.Process) result {
	t.Helper()
	var out, errb bytes.Buffer
	p.Stdout, p.Stderr = &out, &errb
	if p.Timeout == 0 {
		p.Timeout = 30 * time.Second
	}
	x, err := sb.Exec(context.Background(), &p)
	if err != nil {
		t.Fatalf("Exec %q: %v", p.Argv, err)
	}
	return result{x, out.String(), errb.String()}
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func testExecMany(t *testing.T, s *suite) {
	sb := s.create(t)
	for i := 0; i < 20; i++ {
		r := run(t, sb, engine.Process{Argv: sh(fmt.Sprintf("echo out%d; echo err%d >&2; exit %d", i, i, i%3))})
		if r.stdout != fmt.Sprintf("out%d\n", i) || r.stderr != fmt.Sprintf("err%d\n", i) || r.Code != i%3 || r.TimedOut {
			t.Fatalf("exec %d: code %d, stdout %q, stderr %q, timed out %v", i, r.Code, r.stdout, r.stderr, r.TimedOut)
		}
		if r.Started.IsZero() || r.Finished.Before(r.Started) {
			t.Fatalf("exec %d: started %v, finished %v", i, r.Started, r.Finished)
		}
	}
}

// An exec is as confined as the sandbox: the policy's user, no
// capabilities, no new privileges, the seccomp filter, a read-only root.
func testConfined(t *testing.T, s *suite) {
	sb := s.create(t)
	r := run(t, sb, engine.Process{Argv: sh("id -u; id -g; grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; touch /x 2>/dev/null && echo root writable")})
	want := fmt.Sprintf("%d\n%d\n", s.h.Policy.UID, s.h.Policy.GID)
	if !strings.HasPrefix(r.stdout, want) {
		t.Errorf("exec runs as %q; want %q", r.stdout, want)
	}
	for _, line := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(r.stdout, line+"\n") {
			t.Errorf("exec's status lacks %q:\n%s", line, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "root writable") {
		t.Errorf("exec can write the root")
	}
}

func testStatePersists(t *testing.T, s *suite) {
	sb := s.create(t)
	run(t, sb, engine.Process{Argv: sh("echo kept > /tmp/state")})
	if r := run(t, sb, engine.Process{Argv: []string{"cat", "/tmp/state"}}); r.stdout != "kept\n" || r.Code != 0 {
		t.Fatalf("cat /tmp/state: code %d, %q %q; want kept", r.Code, r.stdout, r.stderr)
	}
}

func testEnvAndWorkdir(t *testing.T, s *suite) {
	sb := s.create(t, "SANDBOX_VAR=s", "OVER=sandbox")
	r := run(t, sb, engine.Process{Argv: sh("echo $SANDBOX_VAR $OVER $PROC_VAR; pwd"), Env: []string{"PROC_VAR=p", "OVER=process"}, Workdir: "/tmp"})
	if r.stdout != "s process p\n/tmp\n" {
		t.Fatalf("got %q (stderr %q); want the sandbox's env, the process's laid over it, and /tmp", r.stdout, r.stderr)
	}
	// The next process starts from the sandbox's again.
	r = run(t, sb, engine.Process{Argv: sh("echo $OVER $PROC_VAR; pwd")})
	if r.stdout != "sandbox\n/\n" {
		t.Fatalf("got %q; a process's env or workdir leaked into the next", r.stdout)
	}
	sb2, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Workdir: "../etc"})
	if err == nil || !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Exec with workdir ../etc: %+v, %v; want an invalid-argument error", sb2, err)
	}
}

func testStdin(t *testing.T, s *suite) {
	sb := s.create(t)
	r := run(t, sb, engine.Process{Argv: []string{"cat"}, Stdin: strings.NewReader("fed\nin\n")})
	if r.stdout != "fed\nin\n" || r.Code != 0 {
		t.Fatalf("cat: %q, code %d", r.stdout, r.Code)
	}
	if r := run(t, sb, engine.Process{Argv: []string{"cat"}}); r.stdout != "" || r.Code != 0 {
		t.Fatalf("cat with no stdin: %q, code %d; want EOF at once", r.stdout, r.Code)
	}
	// A host file given as stdin is read through a pipe: the sandbox never
	// holds the host's descriptor (a directory's would reach past its root).
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("from a host file\n")
	f.Seek(0, 0)
	if r := run(t, sb, engine.Process{Argv: sh("test -p /dev/stdin && cat"), Stdin: f}); r.stdout != "from a host file\n" || r.Code != 0 {
		t.Fatalf("stdin from a host file: %q, code %d; want it read through a pipe (test -p)", r.stdout, r.Code)
	}
}

func testExitCodes(t *testing.T, s *suite) {
	sb := s.create(t)
	for _, c := range []struct {
		script string
		code   int
	}{{"exit 0", 0}, {"exit 3", 3}, {"exit 255", 255}, {"kill -9 $$", 137}, {"kill -15 $$", 143}} {
		if r := run(t, sb, engine.Process{Argv: sh(c.script)}); r.Code != c.code || r.TimedOut || r.Killed {
			t.Errorf("%s: code %d (timed out %v); want %d", c.script, r.Code, r.TimedOut, c.code)
		}
	}
	// A program that cannot start gets a shell's codes, whichever path
	// the exec took: 127 for a missing one, 126 for one not executable.
	for _, c := range []struct {
		argv []string
		code int
	}{{[]string{"/no/such/program"}, 127}, {[]string{"/etc/passwd"}, 126}} {
		if r := run(t, sb, engine.Process{Argv: c.argv}); r.Code != c.code || r.TimedOut || r.Killed {
			t.Errorf("%s: code %d, stderr %q; want %d", c.argv[0], r.Code, r.stderr, c.code)
		}
	}
}

// processes lists the sandbox's processes as `ps` inside it shows them.
func processes(t *testing.T, sb engine.Sandbox) string {
	t.Helper()
	r := run(t, sb, engine.Process{Argv: []string{"ps", "-o", "pid,stat,args"}})
	if r.Code != 0 {
		t.Fatalf("ps: code %d, %q", r.Code, r.stderr)
	}
	return r.stdout
}

func testTimeout(t *testing.T, s *suite) {
	sb := s.create(t)
	start := time.Now()
	r := run(t, sb, engine.Process{Argv: sh("sleep 100 & sleep 101"), Timeout: time.Second})
	if !r.TimedOut || r.Code != 137 {
		t.Fatalf("timed out %v, code %d; want a timeout, 137", r.TimedOut, r.Code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a 1s timeout took %v", d)
	}
	// Nothing it started survives; a zombie not yet reaped by init is
	// given a moment.
	deadline := time.Now().Add(3 * time.Second)
	for ps := processes(t, sb); strings.Contains(ps, "sleep 10"); ps = processes(t, sb) {
		if time.Now().After(deadline) {
			t.Fatalf("after the timeout, the sandbox still runs:\n%s", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := run(t, sb, engine.Process{Argv: []string{"echo", "usable"}}); r.stdout != "usable\n" {
		t.Fatalf("exec after a timeout: %q, code %d", r.stdout, r.Code)
	}
	// A child in a session and process group of its own goes too.
	if r := run(t, sb, engine.Process{Argv: sh("setsid sleep 102 & sleep 103"), Timeout: time.Second}); !r.TimedOut {
		t.Fatalf("setsid case: timed out %v, code %d, %q", r.TimedOut, r.Code, r.stderr)
	}
	deadline = time.Now().Add(3 * time.Second)
	for ps := processes(t, sb); strings.Contains(ps, "sleep 10"); ps = processes(t, sb) {
		if time.Now().After(deadline) {
			t.Fatalf("after the timeout, a child that left the session still runs:\n%s", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testDetach(t *testing.T, s *suite) {
	sb := s.create(t)
	x, err := sb.Exec(context.Background(), &engine.Process{Argv: sh("while true; do echo served | nc -l -p 8123; done"), Detach: true, Timeout: 5 * time.Second})
	if err != nil || x.Code != 0 {
		t.Fatalf("detach: %+v, %v", x, err)
	}
	// The detached server outlives its exec and its timeout.
	time.Sleep(5 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := run(t, sb, engine.Process{Argv: []string{"nc", "-w", "2", "127.0.0.1", "8123"}, Timeout: 10 * time.Second})
		if strings.Contains(r.stdout, "served") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the detached server never answered: code %d, %q %q\n%s", r.Code, r.stdout, r.stderr, processes(t, sb))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testIsolated(t *testing.T, s *suite) {
	a, b := s.create(t), s.create(t)
	run(t, a, engine.Process{Argv: sh("echo secret > /tmp/a-secret")})
	if x, err := a.Exec(context.Background(), &engine.Process{Argv: []string{"sleep", "1234"}, Detach: true}); err != nil || x.Code != 0 {
		t.Fatalf("detach: %+v, %v", x, err)
	}
	if !strings.Contains(processes(t, a), "sleep 1234") {
		t.Fatalf("the detached sleep is not running in its own sandbox")
	}
	if r := run(t, b, engine.Process{Argv: []string{"ls", "-a", "/tmp"}}); strings.Contains(r.stdout, "a-secret") {
		t.Fatalf("sandbox b sees a's /tmp: %q", r.stdout)
	}
	if ps := processes(t, b); strings.Contains(ps, "sleep 1234") {
		t.Fatalf("sandbox b sees a's processes:\n%s", ps)
	}
}

// Ten sandboxes at once, five execs each, all correct, and each
// sandbox's /tmp its own. (e2e's TestSandboxesTwenty holds twenty, through
// the CLI, on every engine and isolation pair.)
func testConcurrent(t *testing.T, s *suite) {
	const n, execs = 10, 5
	sbs := make([]engine.Sandbox, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range sbs {
		sbs[i] = s.create(t)
	}
	for i, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < execs; j++ {
				var out bytes.Buffer
				x, err := sb.Exec(context.Background(), &engine.Process{Argv: sh(fmt.Sprintf("echo %d-%d >> /tmp/log; cat /tmp/log | wc -l", i, j)), Stdout: &out, Timeout: time.Minute})
				if err == nil && (x.Code != 0 || strings.TrimSpace(out.String()) != fmt.Sprint(j+1)) {
					err = fmt.Errorf("exec %d: code %d, %q; want %d lines", j, x.Code, out.String(), j+1)
				}
				if err != nil {
					errs[i] = fmt.Errorf("sandbox %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func testReopen(t *testing.T, s *suite) {
	sb := s.create(t)
	run(t, sb, engine.Process{Argv: sh("echo again > /tmp/x")})
	// Another engine value shares nothing in memory with the first.
	sb2, err := s.newEngine(t).Open(context.Background(), sb.ID())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if sb2.ID() != sb.ID() {
		t.Fatalf("Open gave %q for %q", sb2.ID(), sb.ID())
	}
	if r := run(t, sb2, engine.Process{Argv: []string{"cat", "/tmp/x"}}); r.stdout != "again\n" {
		t.Fatalf("reopened: %q, code %d", r.stdout, r.Code)
	}
}

func testLost(t *testing.T, s *suite) {
	sb := s.create(t)
	run(t, sb, engine.Process{Argv: []string{"true"}})
	s.h.KillSandbox(t, sb.ID())
	_, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Timeout: 10 * time.Second})
	if !errors.Is(err, engine.ErrSandboxLost) {
		t.Fatalf("Exec after the sandbox was killed: %v; want ErrSandboxLost", err)
	}
	// Reopened, it is still lost (and it can still be destroyed).
	sb2, err := s.newEngine(t).Open(context.Background(), sb.ID())
	if err == nil {
		_, err = sb2.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Timeout: 10 * time.Second})
	}
	if !errors.Is(err, engine.ErrSandboxLost) {
		t.Fatalf("Open and Exec of a lost sandbox: %v; want ErrSandboxLost", err)
	}
}

func testLostDuringExec(t *testing.T, s *suite) {
	sb := s.create(t)
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sleep", "100"}, Timeout: time.Minute})
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(processes(t, sb), "sleep 100") {
		if time.Now().After(deadline) {
			t.Fatal("sleep never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.h.KillSandbox(t, sb.ID())
	select {
	case err := <-errc:
		if !errors.Is(err, engine.ErrSandboxLost) {
			t.Fatalf("Exec whose sandbox was killed under it: %v; want ErrSandboxLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return 30s after its sandbox was killed")
	}
}

// A cancelled context kills the process (and what it started), not the
// sandbox.
func testCancel(t *testing.T, s *suite) {
	sb := s.create(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	x, err := sb.Exec(ctx, &engine.Process{Argv: sh("sleep 104 & sleep 105"), Timeout: time.Minute})
	if err != nil || !x.Killed || x.TimedOut {
		t.Fatalf("cancelled Exec: %+v, %v; want Killed", x, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for ps := processes(t, sb); strings.Contains(ps, "sleep 10"); ps = processes(t, sb) {
		if time.Now().After(deadline) {
			t.Fatalf("after the cancel, the sandbox still runs:\n%s", ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if x, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); err != nil || !x.Killed {
		t.Fatalf("Exec on a done context: %+v, %v; want Killed at once", x, err)
	}
}

// A process past the memory limit is the OOM killer's: an exit with
// OOMKilled set (the sandbox stays), or, where the runtime cannot keep
// the sandbox (gVisor's is one host process), ErrSandboxLost.
func testOOM(t *testing.T, s *suite) {
	sb := s.create(t)
	// One read of twice the limit from /dev/zero into one buffer: the
	// pages fill in a single syscall (a byte-wise pipe took 90 s in gVisor).
	p := engine.Process{Argv: sh(fmt.Sprintf(`dd if=/dev/zero of=/dev/null bs=%d count=1 2>/dev/null && echo survived`, 2*int64(s.h.Policy.Limits.Memory))), Timeout: 2 * time.Minute}
	var out, errw bytes.Buffer
	p.Stdout, p.Stderr = &out, &errw
	x, err := sb.Exec(context.Background(), &p)
	switch {
	case errors.Is(err, engine.ErrSandboxLost):
		t.Logf("the OOM kill took the sandbox: %v", err)
	case err != nil:
		t.Fatalf("Exec: %v", err)
	case !x.OOMKilled || x.Code != 137 || strings.Contains(out.String(), "survived"):
		t.Fatalf("past the memory limit: %+v, stdout %q, stderr %q; want OOMKilled, 137", x, out.String(), errw.String())
	default:
		if r := run(t, sb, engine.Process{Argv: []string{"echo", "after"}}); r.stdout != "after\n" || r.OOMKilled {
			t.Fatalf("exec after an OOM kill: %+v %q", r.Exit, r.stdout)
		}
	}
}

func testDestroy(t *testing.T, s *suite) {
	sb := s.create(t)
	if x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sleep", "1000"}, Detach: true}); err != nil || x.Code != 0 {
		t.Fatalf("detach: %+v, %v", x, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = sb.Destroy(context.Background()) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Destroys: %v", err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy again: %v", err)
	}
	if left := s.h.Leftovers(t, sb.ID()); len(left) > 0 {
		t.Fatalf("destroyed, but left: %v", left)
	}
	if _, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}}); !errdefs.IsNotFound(err) {
		t.Fatalf("Exec after Destroy: %v; want not found", err)
	}
	if _, err := s.e.Open(context.Background(), sb.ID()); !errdefs.IsNotFound(err) {
		t.Fatalf("Open after Destroy: %v; want not found", err)
	}
}

func testOpenUnknown(t *testing.T, s *suite) {
	if _, err := s.e.Open(context.Background(), "enginetest-never-made"); !errdefs.IsNotFound(err) {
		t.Fatalf("Open of an id never made: %v; want not found", err)
	}
	if _, err := s.e.Open(context.Background(), "../etc"); !errdefs.IsInvalidArgument(err) && !errdefs.IsNotFound(err) {
		t.Fatalf("Open of ../etc: %v; want invalid argument or not found", err)
	}
}

// testLatency logs the p50 of Exec(true) through the Go API beside the
// runtime's own exec, interleaved on one sandbox. A figure, never an
// assertion.
func testLatency(t *testing.T, s *suite) {
	if s.h.BareExec == nil {
		t.Log("no bare exec to compare with")
	}
	sb := s.create(t)
	const n = 10 // a check that execs repeat; bench-session measures them
	var api, bare []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if r := run(t, sb, engine.Process{Argv: []string{"true"}}); r.Code != 0 {
			t.Fatalf("true: code %d", r.Code)
		}
		api = append(api, time.Since(start))
		if s.h.BareExec != nil {
			start = time.Now()
			if out, err := s.h.BareExec(sb.ID()).CombinedOutput(); err != nil {
				t.Fatalf("bare exec: %v: %s", err, out)
			}
			bare = append(bare, time.Since(start))
		}
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	if len(bare) > 0 {
		t.Logf("exec true p50 over %d: Go API %v, bare runtime exec %v (%.2fx)", n, p50(api), p50(bare), float64(p50(api))/float64(p50(bare)))
	} else {
		t.Logf("exec true p50 over %d: Go API %v", n, p50(api))
	}
}
