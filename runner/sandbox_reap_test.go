package runner

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// leakyEngine fails Create after the runner made its records and areas,
// still holding something for the id (Leftovers names it), and fails its
// first Reap, as an engine lock held too long behind a runtime would.
type leakyEngine struct {
	fakeSandboxer
	lmu   sync.Mutex
	held  map[string]bool
	calls int
}

func (f *leakyEngine) Create(_ context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	f.held[s.ID] = true
	return nil, errors.New("create failed half-way")
}

func (f *leakyEngine) Leftovers(context.Context) ([]string, error) {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	var ids []string
	for id := range f.held {
		ids = append(ids, id)
	}
	return ids, nil
}

func (f *leakyEngine) Reap(_ context.Context, id string) error {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if f.calls++; f.calls == 1 {
		return errors.New("engine lock busy")
	}
	delete(f.held, id)
	return nil
}

// A failed create whose undo could not free the engine's part leaves no
// record, but the engine's state names the id: reap frees it, and reports
// reaped only what it freed.
func TestReapFreesWhatOnlyTheEngineHolds(t *testing.T) {
	f := &leakyEngine{held: map[string]bool{}}
	r, root := newSandboxRunner(t, &f.fakeSandboxer)
	r.engine = f
	if _, err := r.Create(context.Background(), fakeSandboxSpec()); err == nil {
		t.Fatal("create succeeded")
	}
	if len(f.held) != 1 {
		t.Fatalf("the engine holds %v after the failed create", f.held)
	}
	var id string
	for id = range f.held {
	}
	rep, err := Reap(context.Background(), root, func() []engine.Reaper { return []engine.Reaper{f} }, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.held) != 0 || !slices.Contains(rep.Reaped, id) {
		t.Fatalf("reap reported %v; the engine still holds %v", rep.Reaped, f.held)
	}
	// Nothing is left: a second reap finds nothing to report.
	if rep, err := Reap(context.Background(), root, func() []engine.Reaper { return []engine.Reaper{f} }, true); err != nil || len(rep.Reaped) != 0 {
		t.Fatalf("a second reap: %+v %v", rep, err)
	}
}

// A record that cannot be read for a moment (an I/O error) says nothing
// of its sandbox: the sweep reads it again, and leaves the sandbox. One
// that stays unreadable is an orphan's, as it is to its supervisor.
func TestReapRereadsARecordThatCannotBeRead(t *testing.T) {
	root := t.TempDir()
	const id = "sb-00000000000000000013"
	liveSandbox(t, root, id, lifecycle.Created, lifecycle.Ready)
	good, err := os.ReadFile(infoPath(root, id))
	if err != nil {
		t.Fatal(err)
	}
	spoilRecord(t, root, id, false)
	mended := make(chan error, 1)
	time.AfterFunc(sweepRereadGap/2, func() { mended <- atomicfile.Replace(infoPath(root, id), good, 0o600) })
	rep, err := Reap(context.Background(), root, nil, false)
	if merr := <-mended; merr != nil {
		t.Fatal(merr)
	}
	if err != nil || slices.Contains(rep.Reaped, id) || stateOf(t, root, id) != lifecycle.Ready {
		t.Fatalf("reap took a sandbox whose record read failed for a moment (reaped %v, state %s): %v", rep.Reaped, stateOf(t, root, id), err)
	}
	spoilRecord(t, root, id, false)
	if rep, _ := Reap(context.Background(), root, nil, false); !slices.Contains(rep.Reaped, id) {
		t.Fatalf("a sandbox whose record stays unreadable was not reaped: %+v", rep)
	}
}
