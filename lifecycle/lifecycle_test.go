package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		ok       bool
	}{
		{"", Requested, true},
		{Requested, Created, true},
		{Created, Ready, true},
		{Ready, Running, true},
		{Running, Terminating, true},
		{Terminating, Terminated, true},
		{Running, Failed, true},
		{Failed, Terminating, true},
		{Running, Orphaned, true},
		{Created, Expired, true},
		{Terminated, Running, false}, // start after terminate
		{Terminated, Orphaned, false},
		{Requested, Running, false},
		{Running, Created, false},
		{"", Running, false},
		{Orphaned, Running, false},
		{Requested, Pooled, true},
		{Pooled, Created, true}, // a claim
		{Pooled, Orphaned, true},
		{Pooled, Running, false},
		{Ready, Pooled, false}, // a used sandbox never goes back to a pool
		{Terminated, Pooled, false},
		{Ready, Paused, true},
		{Paused, Ready, true}, // resumed
		{Paused, Expired, true},
		{Paused, Terminating, true},
		{Paused, Running, false}, // resumed first
		{Running, Paused, false}, // not while an exec runs
		{Created, Paused, false},
	} {
		if got := Allowed(tc.from, tc.to); got != tc.ok {
			t.Errorf("Allowed(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}

func events(t *testing.T, s *Store) []map[string]any {
	t.Helper()
	f, err := os.Open(s.Audit().Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line is not JSON: %q", sc.Text())
		}
		out = append(out, ev)
	}
	return out
}

func TestLifecycleAndAudit(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := "0123456789abcdef0123"
	for _, to := range []State{Requested, Created, Ready, Running, Terminating} {
		if err := s.Move(id, to, "", map[string]any{"note": "ok"}); err != nil {
			t.Fatalf("move to %s: %v", to, err)
		}
	}
	if r, _ := s.Get(id); r.State != Terminating {
		t.Errorf("state %s", r.State)
	}
	if err := s.Move(id, Terminated, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Move(id, Running, "", nil); !errors.Is(err, ErrTransition) {
		t.Errorf("start after terminate: %v", err)
	}
	if _, err := os.Stat(s.path(id)); !os.IsNotExist(err) {
		t.Errorf("terminated run keeps a state file")
	}
	evs := events(t, s)
	if len(evs) != 6 || evs[0]["to"] != "requested" || evs[5]["to"] != "terminated" || evs[2]["note"] != "ok" {
		t.Errorf("events %v", evs)
	}
}

// TestMoveThrough: a start's moves are one write each of the state and
// the log, the same events as Move's, and none when one is refused.
func TestMoveThrough(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := "0123456789abcdef0123"
	if err := s.Move(id, Requested, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.MoveThrough(id, Created, Ready, Running); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(id); r.State != Running {
		t.Errorf("state %s, want running", r.State)
	}
	// Running cannot go back to created: nothing moves, nothing is logged.
	if err := s.MoveThrough(id, Terminating, Created); !errors.Is(err, ErrTransition) {
		t.Errorf("a refused move: %v", err)
	}
	if r, _ := s.Get(id); r.State != Running {
		t.Errorf("after a refused MoveThrough the state is %s", r.State)
	}
	evs := events(t, s)
	var path []any
	for _, ev := range evs {
		path = append(path, ev["from"], ev["to"])
	}
	want := []any{"", "requested", "requested", "created", "created", "ready", "ready", "running"}
	if !reflect.DeepEqual(path, want) {
		t.Errorf("logged moves %v; want %v", path, want)
	}
}

func TestDestroyRunsOnceUnderRaces(t *testing.T) {
	s, _ := Open(t.TempDir())
	id := "aaaaaaaaaaaaaaaaaaaa"
	s.Move(id, Requested, "", nil)
	s.Move(id, Created, "", nil)
	var freed atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Destroy(context.Background(), id, Orphaned, func() error { freed.Add(1); return nil })
			// Every caller returns only once the run is terminated.
			if rec, _ := s.Get(id); err == nil && rec.State != "" {
				err = fmt.Errorf("returned while the run is %s", rec.State)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("destroy: %v", err)
		}
	}
	if freed.Load() != 1 {
		t.Errorf("resources freed %d times", freed.Load())
	}
	if err := s.Destroy(context.Background(), id, "", func() error { freed.Add(1); return nil }); err != nil || freed.Load() != 1 {
		t.Errorf("destroy after terminated: %v, freed %d", err, freed.Load())
	}
	var orphaned bool
	for _, ev := range events(t, s) {
		orphaned = orphaned || ev["to"] == "orphaned"
	}
	if !orphaned {
		t.Error("no orphaned transition recorded")
	}
}

func TestDestroyDuringCreateWaits(t *testing.T) {
	root := t.TempDir()
	s, _ := Open(root)
	id := "bbbbbbbbbbbbbbbbbbbb"
	held, err := s.Begin(context.Background(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var freed atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- s.Destroy(context.Background(), id, "", func() error { freed.Add(1); return nil })
	}()
	select {
	case err := <-done:
		t.Fatalf("destroy returned mid-create: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if freed.Load() != 0 {
		t.Fatal("destroy freed resources mid-create")
	}
	if err := s.Move(id, Created, "", nil); err != nil {
		t.Fatal(err)
	}
	held.Release()
	if err := <-done; err != nil || freed.Load() != 1 {
		t.Fatalf("destroy after create: %v, freed %d", err, freed.Load())
	}
	var moves []string
	for _, ev := range events(t, s) {
		if ev["event"] == "transition" {
			moves = append(moves, fmt.Sprint(ev["to"]))
		}
	}
	if got := strings.Join(moves, " "); got != "requested created terminating terminated" {
		t.Errorf("moves %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "state", id+"*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A creator that died mid-create let go of its lock with its life: destroy
// does not wait for it.
func TestDestroyAfterCreatorDied(t *testing.T) {
	s, _ := Open(t.TempDir())
	id := "cccccccccccccccccccc"
	held, _ := s.Begin(context.Background(), id, nil)
	held.l.Release(false) // what the kernel does when the creator dies
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Destroy(ctx, id, Orphaned, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Get(id); rec.State != "" {
		t.Errorf("run is %s", rec.State)
	}
}

func TestRedact(t *testing.T) {
	for _, secret := range []string{
		"AKIAIOSFODNN7EXAMPLE",
		"ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"xoxb-1234567890-abcdefghij",
		"sk-abcdefghijklmnopqrstuvwx",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
		"Authorization: Bearer abc.def.ghi123456",
		"password=hunter22",
		"API_KEY: 0123456789",
		"https://user:pa55word@example.com/x",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
	} {
		got := Redact("before " + secret + " after")
		if strings.Contains(got, strings.Split(secret, "\n")[0][4:]) || !strings.Contains(got, "[REDACTED]") {
			t.Errorf("Redact kept %q: %q", secret, got)
		}
	}
	if got := Redact("plot.png sha256:abc exit 0"); got != "plot.png sha256:abc exit 0" {
		t.Errorf("Redact changed plain text: %q", got)
	}
	s, _ := Open(t.TempDir())
	s.Audit().Append(map[string]any{"error": "token=abc123secret", "nested": map[string]any{"k": []string{"ghp_abcdefghijklmnopqrstuvwxyz0123"}}})
	b, _ := os.ReadFile(s.Audit().Path())
	if strings.Contains(string(b), "abc123secret") || strings.Contains(string(b), "ghp_abc") {
		t.Errorf("audit log holds a secret: %s", b)
	}
}

// A Begin refused because the id has a live record leaves that record.
func TestRefusedBeginKeepsTheRecordThere(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := s.Begin(ctx, "run1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MoveThrough("run1", Created, Ready); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := s.Begin(ctx, "run1", nil); err == nil {
		t.Fatal("a second Begin of a ready run was accepted")
	}
	if rec, err := s.Get("run1"); err != nil || rec.State != Ready {
		t.Fatalf("after a refused Begin, the live run's record is %+v (%v); want it still ready", rec, err)
	}
}
