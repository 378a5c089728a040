package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// pauseServer is an engine whose sandboxes pause as the oci engine's do:
// one opened while paused has no exec agent to serve, and its Serve
// returns at once.
type pauseServer struct {
	enginetest.Refusing
	mu     sync.Mutex
	paused bool
	opens  int
	once   sync.Once
	served chan struct{} // closed once a running sandbox is served
}

func (e *pauseServer) Open(_ context.Context, id string) (engine.Sandbox, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.opens++
	return &pauseServed{e: e, id: id, paused: e.paused}, nil
}

func (e *pauseServer) setPaused(p bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.paused = p
}

func (e *pauseServer) Pause(_ context.Context, _ string) error  { e.setPaused(true); return nil }
func (e *pauseServer) Resume(_ context.Context, _ string) error { e.setPaused(false); return nil }
func (e *pauseServer) Paused(context.Context, string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.paused, nil
}

func (e *pauseServer) opened() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.opens
}

// pauseServed is a sandbox of pauseServer, as it was when opened.
type pauseServed struct {
	e      *pauseServer
	id     string
	paused bool
}

func (s *pauseServed) ID() string { return s.id }
func (s *pauseServed) Exec(context.Context, *engine.Process) (engine.Exit, error) {
	return engine.Exit{}, nil
}
func (s *pauseServed) Destroy(context.Context) error { return nil }
func (s *pauseServed) Serve(ctx context.Context) error {
	if s.paused {
		return nil
	}
	s.e.once.Do(func() { close(s.e.served) })
	<-ctx.Done()
	return nil
}

// A supervisor started while its sandbox is paused (a respawned one)
// serves the sandbox's exec agent once it is resumed.
func TestSuperviseServesASandboxResumedAfterItStarted(t *testing.T) {
	root := t.TempDir()
	eng := &pauseServer{paused: true, served: make(chan struct{})}
	rn, err := New(WithRoot(root), WithEngine(eng))
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-00000000000000000011"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready, lifecycle.Paused)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rn.Supervise(ctx, id) }()
	defer func() { cancel(); <-done }()
	for eng.opened() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the supervisor returned: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := rn.Resume(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-eng.served:
	case <-time.After(5 * time.Second):
		t.Fatal("the resumed sandbox was not served")
	}
}

// logBuffer is a log's text, written to by the supervisor's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// spoilRecord makes sandbox id's record unreadable in place, as a read
// that fails (ELOOP standing for EIO) or a torn file would.
func spoilRecord(t *testing.T, root, id string, torn bool) {
	t.Helper()
	if torn {
		if err := atomicfile.Replace(infoPath(root, id), []byte(`{"id":"`), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	tmp := infoPath(root, id) + ".loop"
	if err := os.Symlink(id+".json", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, infoPath(root, id)); err != nil {
		t.Fatal(err)
	}
}

// A record that cannot be read for a moment does not end its sandbox:
// the supervisor logs it and reads it again.
func TestSuperviseOutlivesARecordUnreadableForAMoment(t *testing.T) {
	for _, torn := range []bool{false, true} {
		t.Run(map[bool]string{false: "read error", true: "torn"}[torn], func(t *testing.T) {
			root := t.TempDir()
			logs := &logBuffer{}
			rn, err := New(WithRoot(root), WithEngine(&fakeSandboxer{}), WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			const id = "sb-00000000000000000012"
			liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
			good, err := os.ReadFile(infoPath(root, id))
			if err != nil {
				t.Fatal(err)
			}
			spoilRecord(t, root, id, torn)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- rn.Supervise(ctx, id) }()
			for !strings.Contains(logs.String(), "trying again") {
				select {
				case err := <-done:
					cancel()
					t.Fatalf("the supervisor returned (%v), the sandbox %s; log:\n%s", err, stateOf(t, root, id), logs)
				case <-time.After(5 * time.Millisecond):
				}
			}
			if err := atomicfile.Replace(infoPath(root, id), good, 0o600); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; err != context.Canceled {
				t.Errorf("the supervisor returned %v; want it cancelled", err)
			}
			if st := stateOf(t, root, id); st != lifecycle.Ready {
				t.Errorf("the sandbox is %q; want it ready", st)
			}
		})
	}
}

// One that stays unreadable still ends its sandbox, as orphaned: nobody
// can say when it ends.
func TestSuperviseEndsASandboxWhoseRecordStaysUnreadable(t *testing.T) {
	root := t.TempDir()
	rn, err := New(WithRoot(root), WithEngine(&fakeSandboxer{}))
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb-00000000000000000013"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
	spoilRecord(t, root, id, true)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := rn.Supervise(ctx, id); err != nil {
		t.Fatalf("supervise: %v", err)
	}
	endedOrphaned(t, root, id)
}
