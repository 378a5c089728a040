package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

func TestSandboxExecProtocol(t *testing.T) {
	f := &fakeSandboxer{}
	r, sb, root := newFakeSandbox(t, f, fakeSandboxSpec())
	ctx := context.Background()
	id := sb.ID()
	if CheckSandboxID(id) != nil || stateOf(t, root, id) != lifecycle.Ready {
		t.Fatalf("id %q, state %s", id, stateOf(t, root, id))
	}
	f.exec = func(_ context.Context, p *engine.Process) (engine.Exit, error) {
		if st := stateOf(t, root, id); st != lifecycle.Running {
			t.Errorf("state during an exec: %s", st)
		}
		fmt.Fprint(p.Stdout, "secret-output")
		return engine.Exit{Code: 3}, nil
	}
	// Another process reconnects by id.
	r2, _ := New(WithRoot(root), WithEngine(f))
	sb2, err := r2.Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb2.Exec(ctx, ExecSpec{Argv: []string{"python3", "-c", "x"}, PodUID: "pod-uid-1"})
	if err != nil || res.Reason != ReasonExited || res.ExitCode != 3 || string(res.Stdout.Head) != "secret-output" || res.SandboxID != id {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	// A node's exec for a pod binds the pod's UID into its receipt.
	if res.Receipt == nil || res.Receipt.Receipt.PodUID != "pod-uid-1" {
		t.Fatalf("exec's receipt: %+v", res.Receipt)
	}
	if st := stateOf(t, root, id); st != lifecycle.Ready {
		t.Fatalf("state after an exec: %s", st)
	}
	audit, _ := os.ReadFile(filepath.Join(root, "audit.jsonl"))
	if !strings.Contains(string(audit), `"event":"exec"`) || !strings.Contains(string(audit), `"argv_sha256"`) || strings.Contains(string(audit), "secret-output") {
		t.Fatalf("audit log: %s", audit)
	}
	// Concurrent destroys free once and all succeed.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Destroy(ctx, id) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || f.destroyed.Load() != 1 {
		t.Fatalf("destroys: %v, freed %d times", err, f.destroyed.Load())
	}
	if _, err := sb2.Exec(ctx, ExecSpec{Argv: []string{"true"}}); !errdefs.IsNotFound(err) {
		t.Fatalf("exec after destroy: %v", err)
	}
	if _, err := r.Open(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("open after destroy: %v", err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatalf("a second close: %v", err)
	}
	noSandboxLeftovers(t, root)
}

func TestSandboxLostIsFailed(t *testing.T) {
	f := &fakeSandboxer{}
	r, sb, root := newFakeSandbox(t, f, fakeSandboxSpec())
	ctx := context.Background()
	f.exec = func(context.Context, *engine.Process) (engine.Exit, error) {
		return engine.Exit{}, engine.Lost("the runtime's process was killed")
	}
	res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}})
	if !errors.Is(err, engine.ErrSandboxLost) || res.ErrorKind != "sandbox_lost" || res.Reason != ReasonError {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if st := stateOf(t, root, sb.ID()); st != lifecycle.Failed {
		t.Fatalf("state: %s", st)
	}
	if _, err := r.Open(ctx, sb.ID()); !errors.Is(err, engine.ErrSandboxLost) {
		t.Fatalf("open: %v", err)
	}
	// A full reap frees a failed sandbox.
	if _, err := Reap(ctx, root, nil, true); err != nil {
		t.Fatal(err)
	}
	noSandboxLeftovers(t, root)
}

func TestSuperviseEndsAnIdleSandbox(t *testing.T) {
	f := &fakeSandboxer{}
	spec := fakeSandboxSpec()
	spec.IdleTimeout = 300 * time.Millisecond
	r, sb, root := newFakeSandbox(t, f, spec)
	ctx := context.Background()
	// An exec in progress keeps it alive past its idle timeout. The
	// supervisor starts once the exec is recorded, so that a slow host
	// cannot let the idle timeout pass before the exec begins.
	started := make(chan time.Time, 1)
	f.exec = func(context.Context, *engine.Process) (engine.Exit, error) {
		started <- time.Now()
		time.Sleep(time.Second)
		return engine.Exit{}, nil
	}
	type execEnd struct {
		res Result
		err error
	}
	execDone := make(chan execEnd, 1)
	go func() {
		res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}})
		execDone <- execEnd{res, err}
	}()
	begin := <-started
	done := make(chan error, 1)
	go func() { done <- r.Supervise(ctx, sb.ID()) }()
	if e := <-execDone; e.err != nil || e.res.Reason != ReasonExited || f.destroyed.Load() != 0 {
		t.Fatalf("an exec longer than the idle timeout: %+v, %v; freed %d times during it", e.res, e.err, f.destroyed.Load())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor did not end the idle sandbox")
	}
	// The exec's end, a second after its start, is its last activity.
	if d := time.Since(begin); d < time.Second+300*time.Millisecond {
		t.Fatalf("ended %v after the exec began, before its end plus the idle timeout", d)
	}
	if f.destroyed.Load() != 1 {
		t.Fatalf("freed %d times", f.destroyed.Load())
	}
	audit, _ := os.ReadFile(filepath.Join(root, "audit.jsonl"))
	if !strings.Contains(string(audit), `"to":"expired"`) {
		t.Fatalf("no expired transition in %s", audit)
	}
	noSandboxLeftovers(t, root)
}

func TestSweepEndsExpiredAndCorruptSandboxes(t *testing.T) {
	spec := fakeSandboxSpec()
	spec.TTL = 200 * time.Millisecond
	r, expired, root := newFakeSandbox(t, &fakeSandboxer{}, spec)
	ctx := context.Background()
	corrupt, err := r.Create(ctx, fakeSandboxSpec())
	if err != nil {
		t.Fatal(err)
	}
	live, err := r.Create(ctx, fakeSandboxSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(infoPath(root, corrupt.ID()), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	rep, err := Reap(ctx, root, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Reaped) != 2 || rep.Live != 1 {
		t.Fatalf("reaped %v, live %d; want %s and %s reaped, one live", rep.Reaped, rep.Live, expired.ID(), corrupt.ID())
	}
	if _, err := r.Open(ctx, live.ID()); err != nil {
		t.Fatalf("the live sandbox: %v", err)
	}
	if err := live.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noSandboxLeftovers(t, root)
}

// An rm that lands during an exec wins: the exec says destroyed, and the
// rm frees the sandbox once, without a lost sandbox's failed state.
func TestDestroyDuringExec(t *testing.T) {
	f := &fakeSandboxer{}
	r, sb, root := newFakeSandbox(t, f, fakeSandboxSpec())
	ctx := context.Background()
	started := make(chan struct{})
	f.exec = func(context.Context, *engine.Process) (engine.Exit, error) {
		close(started)
		for {
			f.mu.Lock()
			live := f.live[sb.ID()]
			f.mu.Unlock()
			if !live {
				return engine.Exit{}, engine.Lost("the sandbox's process is gone")
			}
			time.Sleep(time.Millisecond)
		}
	}
	type out struct {
		res Result
		err error
	}
	got := make(chan out, 1)
	go func() { res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sleep", "100"}}); got <- out{res, err} }()
	<-started
	if err := r.Destroy(ctx, sb.ID()); err != nil {
		t.Fatalf("destroy during an exec: %v", err)
	}
	o := <-got
	if o.err != nil || o.res.Reason != ReasonDestroyed {
		t.Fatalf("exec: %+v, %v", o.res, o.err)
	}
	noSandboxLeftovers(t, root)
}

// A sandbox whose destroy was cut short (its destroyer killed once the
// lifecycle recorded it terminating) is reaped, where it was left alone
// as live: the engine is asked to free it and its records go.
func TestReapFinishesCutShortDestroy(t *testing.T) {
	f := &fakeSandboxer{}
	_, sb, root := newFakeSandbox(t, f, fakeSandboxSpec())
	ctx := context.Background()
	lc, err := lifecycle.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Move(sb.ID(), lifecycle.Terminating, "", nil); err != nil {
		t.Fatal(err)
	}
	rep, err := Reap(ctx, root, func() []engine.Reaper { return []engine.Reaper{f} }, false)
	if err != nil || !slices.Equal(rep.Reaped, []string{sb.ID()}) || rep.Live != 0 {
		t.Fatalf("reap: reaped %v, live %d, %v; want %s reaped", rep.Reaped, rep.Live, err, sb.ID())
	}
	f.fakeEngine.mu.Lock()
	reaped := slices.Clone(f.fakeEngine.reaped)
	f.fakeEngine.mu.Unlock()
	if !slices.Contains(reaped, sb.ID()) {
		t.Errorf("the engine was asked to free %v, not %s", reaped, sb.ID())
	}
	if rec, err := lc.Get(sb.ID()); err != nil || (rec.State != "" && rec.State != lifecycle.Terminated) {
		t.Errorf("after the reap: %+v, %v; want it terminated or forgotten", rec, err)
	}
	noSandboxLeftovers(t, root)
}

// A label is any client's text, shown by sandbox ls and kept in records:
// one line of UTF-8 without control characters, within its bounds.
func TestCheckLabels(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		ok     bool
	}{
		{map[string]string{"agent": "demo", "task": "é ✓ \u202e"}, true},
		{map[string]string{"agent": strings.Repeat("x", 256)}, true},
		{map[string]string{"agent": strings.Repeat("x", 257)}, false},
		{map[string]string{"agent": "a\nb"}, false},
		{map[string]string{"agent": "\x1b]0;pwned\x07"}, false},
		{map[string]string{"agent": "a\rb"}, false},
		{map[string]string{"agent": "\u009b31m"}, false},
		{map[string]string{"agent": "\xff"}, false},
		{map[string]string{"a b": "x"}, false},
	} {
		err := checkLabels(tc.labels)
		if (err == nil) != tc.ok || err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("%q: %v; want ok %v", tc.labels, err, tc.ok)
		}
	}
}

// A TTL or an idle timeout past a year is refused, naming the field and
// the maximum; a year is taken, and its deadline is a year away.
func TestSandboxDeadlinesCappedAtAYear(t *testing.T) {
	f := &fakeSandboxer{}
	r, root := newSandboxRunner(t, f)
	ctx := context.Background()
	for field, set := range map[string]func(*SandboxSpec){
		"ttl":          func(s *SandboxSpec) { s.TTL = isolation.MaxTimeout + time.Millisecond },
		"idle timeout": func(s *SandboxSpec) { s.IdleTimeout = math.MaxInt64 },
	} {
		s := fakeSandboxSpec()
		set(&s)
		sb, err := r.Create(ctx, s)
		if err == nil {
			sb.Close(ctx)
		}
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), isolation.MaxTimeout.String()) {
			t.Errorf("%s over a year: %v; want invalid input naming it and the maximum", field, err)
		}
	}
	s := fakeSandboxSpec()
	s.TTL, s.IdleTimeout = isolation.MaxTimeout, isolation.MaxTimeout
	sb, err := r.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	si := infoOf(t, root, sb.ID())
	if now := time.Now(); si.Deadline(now).Before(now.Add(isolation.MaxTimeout - time.Hour)) {
		t.Errorf("a sandbox of a year's TTL and idle timeout ends at %v", si.Deadline(now))
	}
}

// An exec's working directory is checked as a run's: none inside /proc
// (/proc/self/fd/N is CVE-2024-21626's way out under runc), /sys or /dev.
func TestExecWorkdirChecked(t *testing.T) {
	var execs atomic.Int32
	f := &fakeSandboxer{exec: func(context.Context, *engine.Process) (engine.Exit, error) {
		execs.Add(1)
		return engine.Exit{}, nil
	}}
	_, sb, _ := newFakeSandbox(t, f, fakeSandboxSpec())
	ctx := context.Background()
	defer sb.Close(ctx)
	for _, wd := range []string{"/proc/self/fd/7", "/proc", "/sys/fs/cgroup", "/dev/shm", "work", "/a/../b"} {
		_, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}, Workdir: wd})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), wd) {
			t.Errorf("workdir %q: %v; want invalid input naming it", wd, err)
		}
	}
	if n := execs.Load(); n != 0 {
		t.Errorf("%d refused execs ran", n)
	}
	if res, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}, Workdir: "/home/user/proc"}); err != nil || res.Reason != ReasonExited {
		t.Errorf("workdir /home/user/proc: %v, %v", res.Reason, err)
	}
}
