//go:build e2e

package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
)

// hostTmp is a nosuid,nodev tmpfs of the test's own, a sandbox's /tmp
// (engine.SandboxSpec.TmpSource), unmounted when the test ends.
func hostTmp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=8m,mode=1777"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// counter counts in /tmp/n every 20 ms, from where it was: the process
// holds its count in memory, and a restored copy goes on from it. While
// /tmp/hold exists it writes nothing (saying so in /tmp/held), so that a
// snapshot (hold) finds no file of /tmp open: a clone's /tmp is another,
// where runsc could not reopen it.
const counter = `
import os, time
n = 0
open("/tmp/airlock-ready", "w").close()
while True:
    n += 1
    if os.path.exists("/tmp/hold"):
        if not os.path.exists("/tmp/held"):
            open("/tmp/held", "w").close()
    else:
        with open("/tmp/n.new", "w") as f:
            f.write("%d %d" % (os.getpid(), n))
        os.rename("/tmp/n.new", "/tmp/n")
    time.sleep(0.02)
`

// hold stops the counter of the sandbox whose /tmp source is dir writing
// to /tmp, and waits until it has.
func hold(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the counter to hold", func() bool { _, err := os.Stat(filepath.Join(dir, "held")); return err == nil })
}

// gvisorEngine is an engine on a root of the test's own, and the spec of
// a gVisor sandbox of the default image by id, each call's with a /tmp of
// its own (hostTmp).
func gvisorEngine(t *testing.T) (*Engine, func(id string) *engine.SandboxSpec) {
	t.Helper()
	root, _ := testRoot(t)
	_, ref, err := images.OpenIndex(filepath.Join(sysRoot(), "images")).Default()
	if err != nil {
		t.Fatalf("no default image (`make setup` builds it): %v", err)
	}
	e, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	pol := isolation.Default()
	pol.Seccomp = profile(t, isolation.GVisor)
	return e, func(id string) *engine.SandboxSpec {
		return &engine.SandboxSpec{ID: id, Image: ref.ID, Policy: pol, TmpSource: hostTmp(t), Workdir: "/"}
	}
}

// readCount reads the counter's pid and count from a sandbox's /tmp
// source; 0, 0 while there is none.
func readCount(dir string) (pid, n int) {
	b, err := os.ReadFile(filepath.Join(dir, "n"))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	pid, _ = strconv.Atoi(f[0])
	n, _ = strconv.Atoi(f[1])
	return pid, n
}

// countsOn waits until the counter of the sandbox whose /tmp source is
// dir is seen counting: a read of its count above the read before. Not
// above the count there at the call: a sandbox restored from an older
// checkpoint counts on from that checkpoint's count, below what the one
// it replaced wrote last, for as long as that one ran.
func countsOn(t *testing.T, dir, what string) {
	t.Helper()
	_, last := readCount(dir)
	waitFor(t, what, func() bool {
		_, n := readCount(dir)
		if n == 0 {
			return false // none to read
		}
		up := last > 0 && n > last
		last = n
		return up
	})
}

// waitFor polls cond until it holds. The bound only keeps a broken
// sandbox from hanging the run: a loaded machine may take many times
// what an idle one does.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A warmed Python sandbox holding a counter is snapshotted; two new
// sandboxes, each with its own id, bundle, cgroup and /tmp, are restored
// from it, and in each the same process counts on from where the
// snapshot stopped it, into its own fresh /tmp. A snapshot that does not
// fit, and runc's isolation, are refused; nothing is left behind.
func TestSnapshotRestore(t *testing.T) {
	e, spec := gvisorEngine(t)
	warm := spec("snap-warm")
	ref, pol := warm.Image, warm.Policy
	ctx := context.Background()
	freed := func(id string) {
		t.Helper()
		if left := leftovers(t, e, id); len(left) > 0 {
			t.Errorf("left of %s: %v", id, left)
		}
	}

	sb, err := e.Create(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-c", counter}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the counter", func() bool { _, n := readCount(warm.TmpSource); return n > 5 })
	hold(t, warm.TmpSource)
	snap, err := e.Snapshot(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	warmPid, atSnapshot := readCount(warm.TmpSource)
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	freed(sb.ID())

	// Root's alone, named by its manifest.
	dir := e.snapshotDir(snap)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("snapshot directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if fi, _ := ent.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v; want 0600", ent.Name(), fi.Mode().Perm())
		}
	}
	if m, err := e.readSnapshot(snap); err != nil || m.Image != ref || m.Policy != policyDigest(pol) || len(m.Files) == 0 {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	if list, err := e.Snapshots(ctx); err != nil || len(list) != 1 {
		t.Fatalf("Snapshots = %v, %v; want only %s", list, err, snap)
	}

	var clones []*engine.SandboxSpec
	for _, id := range []string{"snap-a", "snap-b"} {
		s := spec(id)
		begin := time.Now()
		csb, err := e.Restore(ctx, s, snap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restored in %v", id, time.Since(begin))
		t.Cleanup(func() {
			if err := csb.Destroy(ctx); err != nil {
				t.Error(err)
			}
			freed(id)
		})
		clones = append(clones, s)
		// The same process, counting on from the snapshot, into this
		// sandbox's own /tmp: the warm sandbox's was never seen here.
		waitFor(t, id+"'s counter", func() bool { _, n := readCount(s.TmpSource); return n > atSnapshot+3 })
		pid, _ := readCount(s.TmpSource)
		if pid != warmPid {
			t.Errorf("%s: the counter runs as pid %d; want the snapshot's %d", id, pid, warmPid)
		}
		if _, err := os.Stat(filepath.Join(s.TmpSource, "airlock-ready")); err == nil {
			t.Errorf("%s: the warm sandbox's /tmp came along", id)
		}
		var out strings.Builder
		x, err := csb.Exec(ctx, &engine.Process{Argv: []string{"cat", "/proc/1/cmdline"}, Stdout: &out, Timeout: time.Minute})
		if err != nil || x.Code != 0 {
			t.Fatalf("%s: exec after restore: %+v, %v", id, x, err)
		}
	}
	if clones[0].TmpSource == clones[1].TmpSource || e.bundleDir("snap-a") == e.bundleDir("snap-b") {
		t.Fatal("the clones share a mount")
	}
	if _, n := readCount(warm.TmpSource); n != atSnapshot {
		t.Errorf("the warm sandbox's /tmp moved on from %d to %d after its snapshot", atSnapshot, n)
	}

	// Refusals, before anything is made.
	narrowed := spec("snap-narrow")
	narrowed.Policy.Limits.Memory /= 2
	if _, err := e.Restore(ctx, narrowed, snap); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("restore under another policy: %v; want invalid input", err)
	}
	freed("snap-narrow")
	native := spec("snap-runc")
	native.Policy.Isolation = isolation.Seccomp
	native.Policy.Seccomp = profile(t, isolation.Seccomp)
	if _, err := e.Restore(ctx, native, snap); !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), "gvisor") {
		t.Errorf("restore under runc: %v; want not implemented, naming gvisor", err)
	}
	freed("snap-runc")
	nsb, err := e.Create(ctx, native)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Snapshot(ctx, nsb.ID()); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("snapshot under runc: %v; want not implemented", err)
	}
	if err := nsb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	freed("snap-runc")
	if _, err := e.Restore(ctx, spec("snap-gone"), strings.Repeat("0", 64)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore from no snapshot: %v; want not found", err)
	}
	freed("snap-gone")

	if err := e.RemoveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("snapshot still there after RemoveSnapshot: %v", err)
	}
	// The clones run on without it.
	countsOn(t, clones[0].TmpSource, "snap-a's counter after the snapshot's removal")
}

// A sandbox without the spawner (no exec agent, or no control socket)
// started its detached programs with runsc exec, which a restore ends: a
// snapshot of it would restore without its warm program, and is refused.
func TestSnapshotNeedsSpawner(t *testing.T) {
	root, image := testRoot(t)
	sb := gvisorSandbox(t, root, image, "snap-nospawner", WithRuntimeExec())
	e, err := New(root, WithRuntimeExec())
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Snapshot(context.Background(), "snap-nospawner")
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "no spawner") {
		t.Fatalf("Snapshot of a sandbox without a spawner: %v; want it refused, saying why", err)
	}
	if x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Timeout: time.Minute}); err != nil || x.Code != 0 {
		t.Fatalf("the sandbox after the refusal: %+v, %v; want it as it was", x, err)
	}
	if snaps, _ := e.Snapshots(context.Background()); len(snaps) > 0 {
		t.Errorf("snapshots left: %v", snaps)
	}
}

// keepsOpen is a warm program that keeps a file of its /tmp open once
// ready: /tmp/d/x, in a directory of its own.
const keepsOpen = `
import os, time
os.mkdir("/tmp/d")
f = open("/tmp/d/x", "w")
open("/tmp/airlock-ready", "w").close()
while True:
    time.sleep(3600)
`

// A snapshot whose warm program kept a file of its /tmp open cannot be
// restored: the new sandbox's /tmp is another. The restore is refused as
// invalid input, naming the file and the fix, not as runsc's "failed to
// walk"; nothing is left of the sandbox it was for.
func TestSnapshotKeptOpen(t *testing.T) {
	e, spec := gvisorEngine(t)
	warm := spec("snap-open-warm")
	ctx := context.Background()
	sb, err := e.Create(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-c", keepsOpen}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the warm program", func() bool { _, err := os.Stat(filepath.Join(warm.TmpSource, "airlock-ready")); return err == nil })
	snap, err := e.Snapshot(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.RemoveSnapshot(ctx, snap) })
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	csb, err := e.Restore(ctx, spec("snap-open-a"), snap)
	if err == nil {
		csb.Destroy(ctx)
		t.Fatal("restored a snapshot whose warm program kept /tmp/d/x open; want it refused")
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("restore: %v; want invalid input (no restore of it can succeed)", err)
	}
	for _, want := range []string{snap, `"/tmp/d" (or a file beneath it)`, "close its files under /tmp, /home/user and /out", "--replace --warm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("restore: %v; want it to say %q", err, want)
		}
	}
	if left := leftovers(t, e, "snap-open-a"); len(left) > 0 {
		t.Errorf("left of snap-open-a: %v", left)
	}
}
