package enginetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
)

// The held-sandbox cases, for engines that implement engine.Holder.
var heldCases = []struct {
	name string
	fn   func(t *testing.T, s *suite, h engine.Holder)
}{
	{"HeldRunsOneProgram", testHeldRuns},
	{"HeldTimeout", testHeldTimeout},
	{"HeldMissingProgram", testHeldMissing},
	{"HeldUnused", testHeldUnused},
	{"HeldLost", testHeldLost},
}

// hold makes a held sandbox that is destroyed, and checked freed, when the
// test ends.
func (s *suite) hold(t *testing.T, h engine.Holder, env ...string) engine.Held {
	t.Helper()
	spec := s.spec(env...)
	hs, err := h.Hold(context.Background(), spec)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if hs.ID() != spec.ID {
		t.Fatalf("ID() = %q; want %q", hs.ID(), spec.ID)
	}
	t.Cleanup(func() {
		if err := hs.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy %s: %v", spec.ID, err)
		}
		if left := s.h.Leftovers(t, spec.ID); len(left) > 0 {
			t.Errorf("held sandbox %s destroyed, but left: %v", spec.ID, left)
		}
	})
	return hs
}

// start hands p to hs, waits for it and destroys the sandbox.
func start(t *testing.T, hs engine.Held, p engine.Process) result {
	t.Helper()
	var out, errb bytes.Buffer
	p.Stdout, p.Stderr = &out, &errb
	sb, err := hs.Start(context.Background(), &p)
	if err != nil {
		t.Fatalf("Start %q: %v", p.Argv, err)
	}
	x, err := sb.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait %q: %v", p.Argv, err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	return result{x, out.String(), errb.String()}
}

// The program gets its argv, the sandbox's environment under its own, its
// working directory and its stdin; it is the container's first process,
// and its exit status is the sandbox's.
func testHeldRuns(t *testing.T, s *suite, h engine.Holder) {
	hs := s.hold(t, h, "BASE=1", "OVER=base")
	r := start(t, hs, engine.Process{
		Argv:    sh(`echo "$0 $BASE $OVER $(pwd) $$"; cat; echo err >&2; exit 3`),
		Env:     []string{"OVER=job"},
		Workdir: "/tmp",
		Stdin:   strings.NewReader("in\n"),
		Timeout: 30 * time.Second,
	})
	if want := "sh 1 job /tmp 1\nin\n"; r.stdout != want || r.stderr != "err\n" || r.Code != 3 {
		t.Fatalf("got %q %q exit %d; want %q \"err\\n\" exit 3", r.stdout, r.stderr, r.Code, want)
	}
	if _, err := hs.Start(context.Background(), &engine.Process{Argv: []string{"true"}}); err == nil {
		t.Fatal("a held sandbox took a second program")
	}
}

// The timeout is the program's, from Start, and ends the sandbox.
func testHeldTimeout(t *testing.T, s *suite, h engine.Holder) {
	r := start(t, s.hold(t, h), engine.Process{Argv: sh("sleep 100 & sleep 100"), Timeout: time.Second})
	if !r.TimedOut {
		t.Fatalf("got %+v; want a timeout", r.Exit)
	}
}

// A program the image does not have is refused before anything runs, and
// the sandbox still takes another.
func testHeldMissing(t *testing.T, s *suite, h engine.Holder) {
	hs := s.hold(t, h)
	_, err := hs.Start(context.Background(), &engine.Process{Argv: []string{"no-such-program"}})
	if !errdefs.IsNotFound(err) {
		t.Fatalf("Start of a missing program: %v; want ErrNotFound", err)
	}
	if r := start(t, hs, engine.Process{Argv: []string{"echo", "ok"}, Timeout: 30 * time.Second}); r.stdout != "ok\n" || r.Code != 0 {
		t.Fatalf("after a refused start: %+v %q", r.Exit, r.stdout)
	}
}

// A held sandbox that is never used is destroyed whole (hold's cleanup
// checks the leftovers).
func testHeldUnused(t *testing.T, s *suite, h engine.Holder) {
	s.hold(t, h)
}

// A held sandbox killed from outside says so at Start.
func testHeldLost(t *testing.T, s *suite, h engine.Holder) {
	hs := s.hold(t, h)
	s.h.KillSandbox(t, hs.ID())
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := hs.Start(context.Background(), &engine.Process{Argv: []string{"true"}, Timeout: 10 * time.Second})
		if errors.Is(err, engine.ErrSandboxLost) {
			return
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("Start after the sandbox was killed: %v; want ErrSandboxLost", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
