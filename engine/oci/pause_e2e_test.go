//go:build e2e

package oci

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
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
	counts := func(what string) {
		t.Helper()
		_, n := readCount(spec.TmpSource)
		waitFor(t, "the counter "+what, func() bool { _, m := readCount(spec.TmpSource); return m > n })
	}

	// pauseKeeping pauses the sandbox and keeps a copy of its checkpoint.
	dir := e.checkpointDir(spec.ID)
	kept := t.TempDir()
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
			b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
			if err == nil {
				err = os.WriteFile(filepath.Join(kept, ent.Name()), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// plant puts back the kept files named, as a resume cut short left
	// them.
	plant := func(names ...string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(kept, n))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, n), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
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
		counts("after the resume " + what)
		return s
	}

	pauseKeeping()
	resume("uncut")
	var pages []string
	for _, n := range []string{"pages.img", "pages_meta.img"} {
		if _, err := os.Stat(filepath.Join(kept, n)); err == nil {
			pages = append(pages, n)
		}
	}
	if len(pages) == 0 {
		t.Fatal("the checkpoint had no pages files")
	}

	// Cut before the checkpoint was removed: restored from it again.
	plant(checkpointDone, checkpointImage)
	plant(pages...)
	resume("cut before the checkpoint's removal")

	// Cut as it removed it: the running sandbox stays as it is.
	pauseKeeping()
	before := resume("uncut, again")
	plant(pages...)
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
		_, n := readCount(spec.TmpSource)
		waitFor(t, "the counter after the refused "+what, func() bool { _, m := readCount(spec.TmpSource); return m > n })
	}
	if paused, err := e.Paused(ctx, spec.ID); err != nil || paused {
		t.Errorf("Paused = %v, %v; want the sandbox running", paused, err)
	}
}

// countingSandbox is a gVisor sandbox id on an engine of the test's own,
// its Python counter (counter) counting; destroyed when the test ends,
// with nothing of it left.
func countingSandbox(t *testing.T, id string) (*Engine, *engine.SandboxSpec) {
	t.Helper()
	e, specOf := gvisorEngine(t)
	ctx := context.Background()
	spec := specOf(id)
	sb, err := e.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Error(err)
		}
		if left := leftovers(t, e, spec.ID); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-c", counter}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the counter", func() bool { _, n := readCount(spec.TmpSource); return n > 5 })
	return e, spec
}
