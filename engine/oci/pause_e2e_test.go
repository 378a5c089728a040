//go:build e2e

package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// TestResumeCutShort: a resume whose process died after the sandbox was
// restored and its state written, at the two points left before it
// returns. With the whole checkpoint still there, the next resume
// restores from it again; with the checkpoint's marker and the kernel's
// state gone and its pages not yet (cut as it removed them), the next
// resume leaves the running sandbox as it is and removes the rest.
func TestResumeCutShort(t *testing.T) {
	e, spec := countingSandbox(t, "cut-resume")
	ctx := context.Background()
	// copyFiles copies the files named from one directory to another:
	// the checkpoint's aside after a pause, and back as a resume cut short
	// left them.
	dir := e.checkpointDir(spec.ID)
	kept := t.TempDir()
	copyFiles := func(from, to string, names ...string) {
		t.Helper()
		if err := os.MkdirAll(to, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(from, n))
			if err == nil {
				err = os.WriteFile(filepath.Join(to, n), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// pauseKeeping pauses the sandbox and keeps a copy of its checkpoint.
	pauseKeeping := func() {
		t.Helper()
		if err := e.Pause(ctx, spec.ID); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			copyFiles(dir, kept, ent.Name())
		}
	}
	resume := func(what string) *sandbox {
		t.Helper()
		if err := e.Resume(ctx, spec.ID); err != nil {
			t.Fatalf("resume %s: %v", what, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("resume %s: the checkpoint is still there (%v)", what, err)
		}
		// Its pages go after the resume returned; Close waits for them.
		e.Close()
		if used, _ := filepath.Glob(filepath.Join(e.checkpointsDir(), usedPrefix+spec.ID+"-*")); len(used) > 0 {
			t.Fatalf("resume %s: the used checkpoint is still there after Close: %v", what, used)
		}
		s, err := e.openState(spec.ID)
		if err != nil || s.st.Paused || s.alive() != nil {
			t.Fatalf("resume %s: state %+v, %v, alive: %v", what, s.st, err, s.alive())
		}
		countsOn(t, spec.TmpSource, "the counter after the resume "+what)
		return s
	}

	pauseKeeping()
	before := resume("uncut")
	var pages []string
	for _, n := range []string{"pages.img", "pages_meta.img"} {
		if _, err := os.Stat(filepath.Join(kept, n)); err == nil {
			pages = append(pages, n)
		}
	}
	if len(pages) == 0 {
		t.Fatal("the checkpoint had no pages files")
	}

	// Cut before the checkpoint was removed, after the sandbox was
	// recorded running: it runs on as it is; restoring the checkpoint
	// again would undo what it did since.
	copyFiles(kept, dir, checkpointDone, checkpointImage)
	copyFiles(kept, dir, pages...)
	if after := resume("cut before the checkpoint's removal"); after.st.Pid != before.st.Pid || after.st.Start != before.st.Start {
		t.Errorf("the running sandbox was restored again: pid %d, was %d", after.st.Pid, before.st.Pid)
	}

	// Cut as it removed it: the running sandbox stays as it is.
	pauseKeeping()
	before = resume("uncut, again")
	copyFiles(kept, dir, pages...)
	after := resume("cut while the checkpoint's pages were removed")
	if after.st.Pid != before.st.Pid || after.st.Start != before.st.Start {
		t.Errorf("the running sandbox was restored again: pid %d, was %d", after.st.Pid, before.st.Pid)
	}
}

// A pause and a snapshot write the sandbox's memory under airlock's root;
// where that file system has no room for it and the reserve beside it,
// each is refused before runsc writes, saying how to make room, and the
// sandbox runs on as it was (a checkpoint that failed for want of room
// would have stopped it).
func TestSnapshotOrPauseNeedsRoom(t *testing.T) {
	e, spec := countingSandbox(t, "no-room")
	ctx := context.Background()
	// Each directory a small file system of its own: 64 MiB, less than
	// the reserve alone.
	for _, dir := range []string{e.checkpointsDir(), e.snapshotsDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0700"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
	}
	for what, try := range map[string]func() error{
		"pause":    func() error { return e.Pause(ctx, spec.ID) },
		"snapshot": func() error { _, err := e.Snapshot(ctx, spec.ID); return err },
	} {
		err := try()
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "needs about") || !strings.Contains(err.Error(), "free space there") {
			t.Errorf("%s with 64 MiB free: %v; want it refused as unavailable, saying how to make room", what, err)
		}
		countsOn(t, spec.TmpSource, "the counter after the refused "+what)
	}
	if paused, err := e.Paused(ctx, spec.ID); err != nil || paused {
		t.Errorf("Paused = %v, %v; want the sandbox running", paused, err)
	}
}

// incompressible holds 64 MiB of random bytes in memory, then idles.
const incompressible = `
import os, time
keep = os.urandom(64 << 20)
open("/tmp/ready", "w").close()
while True:
    time.sleep(1)
`

// Pauses made at once share the room: each one's checkpoint is promised
// its room until written, so where the file system has room for one
// sandbox's memory and the reserve, not two, one of two pauses begun
// together is refused, saying room is promised to a checkpoint being
// written, and its sandbox runs on.
func TestSnapshotOrPauseNeedsRoomAtOnce(t *testing.T) {
	e, specOf := gvisorEngine(t)
	ctx := context.Background()
	ids := []string{"room-a", "room-b"}
	for _, id := range ids {
		spec := specOf(id)
		runningSandbox(t, e, spec, incompressible, "the sandbox's memory", func() bool { _, err := os.Stat(filepath.Join(spec.TmpSource, "ready")); return err == nil })
	}
	var need int64
	for _, id := range ids {
		n, err := cgroup.MemoryInUse(id)
		if err != nil {
			t.Fatal(err)
		}
		need = max(need, n)
	}
	size := checkpointReserve + need + need/4
	dir := e.checkpointsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })

	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.Pause(ctx, id)
		}()
	}
	wg.Wait()
	free, _ := engine.FreeBytes(dir)
	refused := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		refused++
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "promised to checkpoints being written") {
			t.Errorf("pause of %s: %v; want it refused as unavailable, naming the room promised", ids[i], err)
		}
		if paused, err := e.Paused(ctx, ids[i]); err != nil || paused {
			t.Errorf("refused %s: Paused = %v, %v; want it running", ids[i], paused, err)
		}
	}
	if refused != 1 {
		t.Errorf("pauses at once, on a file system with room for one sandbox's memory (%d MiB) and the reserve: %v, %d MiB free after; want one refused", need>>20, errs, free>>20)
	}
	if ents, _ := os.ReadDir(e.reservationsDir()); len(ents) != 0 {
		t.Errorf("reservations left after the pauses: %v", ents)
	}
}

// countingSandbox is a gVisor sandbox id on an engine of the test's own,
// its Python counter (counter) counting; destroyed when the test ends,
// with nothing of it left.
func countingSandbox(t *testing.T, id string) (*Engine, *engine.SandboxSpec) {
	t.Helper()
	e, specOf := gvisorEngine(t)
	spec := specOf(id)
	// Cleanups run last first: this one after the sandbox's destroy.
	t.Cleanup(func() {
		if left := leftovers(t, e, spec.ID); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
	runningSandbox(t, e, spec, counter, "the counter", func() bool { _, n := readCount(spec.TmpSource); return n > 5 })
	return e, spec
}

// runningSandbox creates spec's sandbox on e, destroyed when the test
// ends, and starts the Python program in it, detached, until ready.
func runningSandbox(t *testing.T, e *Engine, spec *engine.SandboxSpec, program, what string, ready func() bool) {
	t.Helper()
	ctx := context.Background()
	sb, err := e.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-c", program}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what, ready)
}
