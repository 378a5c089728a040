package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/isolation"
)

// fakeRunsc stands for runsc at a pause and a resume: checkpoint kills
// every process of the sandbox's cgroup and writes a kernel's state;
// restore starts a sleep in the cgroup and writes its pid. After either,
// it fills the file system named in <root>/fill (its inodes: tmpfs
// nr_inodes), so that what airlock writes next there fails, as on a full
// disk.
const fakeRunsc = `#!/bin/sh
cmd= pidfile= img=
while [ $# -gt 0 ]; do
	case "$1" in
	--version) echo "runsc version fake"; exit 0;;
	--pid-file) pidfile=$2; shift;;
	--image-path=*) img=${1#--image-path=};;
	checkpoint|restore|delete) [ -n "$cmd" ] || cmd=$1;;
	esac
	shift
done
fill() {
	[ -f ROOT/fill ] || return 0
	d=$(cat ROOT/fill); i=0
	while touch "$d/fill$i" 2>/dev/null; do i=$((i+1)); done
}
case "$cmd" in
checkpoint)
	for f in PROCS; do for p in $(cat "$f"); do kill -9 "$p" 2>/dev/null; done; done
	echo state > "$img/checkpoint.img"
	fill;;
restore)
	for f in PROCS; do echo $$ > "$f"; done
	sleep 300 </dev/null >/dev/null 2>&1 &
	echo $! > "$pidfile"
	fill;;
esac
`

// recordRig is a gVisor sandbox's record on an engine under fakeRunsc:
// its process a sleep in its cgroup, its bundle and checkpoints each a
// small tmpfs that fill (and free) can make full.
type recordRig struct {
	e    *Engine
	id   string
	root string
}

func newRecordRig(t *testing.T, id string) *recordRig {
	t.Helper()
	roottest.Require(t, "it mounts tmpfs and makes a cgroup")
	root := t.TempDir()
	e, err := New(root, WithRunsc(filepath.Join(root, "runsc")))
	if err != nil {
		t.Fatal(err)
	}
	r := &recordRig{e: e, id: id, root: root}
	for _, dir := range []string{e.bundleDir(id), e.checkpointsDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1g,nr_inodes=64,mode=0700"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	}
	cg, err := cgroup.New(id, cgroup.Limits{Memory: 64 << 20, MilliCPUs: 1000, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		if err := cgroup.Remove(context.Background(), id); err != nil {
			t.Error(err)
		}
	})
	procs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroup.PathOf(id), "cgroup.procs"))
	procs = append(procs, filepath.Join("/sys/fs/cgroup", cgroup.PathOf(id), "cgroup.procs"))
	var live []string
	for _, p := range procs {
		if _, err := os.Stat(p); err == nil {
			live = append(live, p)
		}
	}
	script := strings.NewReplacer("ROOT", root, "PROCS", strings.Join(live, " ")).Replace(fakeRunsc)
	if err := os.WriteFile(filepath.Join(root, "runsc"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}

	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	go sleep.Wait()
	t.Cleanup(func() { sleep.Process.Kill() })
	if err := cg.Add(sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}
	start, ok := procStart(sleep.Process.Pid)
	if !ok {
		t.Fatal("the sandbox's sleep is not running")
	}
	st, _ := json.Marshal(sandboxState{ID: id, Mode: isolation.GVisor, Pid: sleep.Process.Pid, Start: start})
	cfg, _ := json.Marshal(specs.Spec{Process: &specs.Process{Args: []string{"/init"}}})
	for name, b := range map[string][]byte{stateFile: st, "config.json": cfg} {
		if err := os.WriteFile(filepath.Join(e.bundleDir(id), name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// fill makes the next runsc fill dir's file system.
func (r *recordRig) fill(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.root, "fill"), []byte(dir), 0o600); err != nil {
		t.Fatal(err)
	}
}

// free undoes fill: dir's file system has room again.
func (r *recordRig) free(t *testing.T, dir string) {
	t.Helper()
	os.Remove(filepath.Join(r.root, "fill"))
	left, _ := filepath.Glob(filepath.Join(dir, "fill*"))
	for _, f := range left {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
}

// resumes checks that a resume now restores the sandbox: running,
// recorded so, its checkpoint gone.
func (r *recordRig) resumes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := r.e.Resume(ctx, r.id); err != nil {
		t.Fatalf("Resume once the disk has room: %v; want the sandbox restored", err)
	}
	r.e.Close()
	sb, err := r.e.openState(r.id)
	if err != nil || sb.st.Paused || sb.alive() != nil {
		t.Fatalf("after the resume: state %+v, %v, alive %v; want it running", sb.st, err, sb.alive())
	}
	if _, err := os.Stat(r.e.checkpointDir(r.id)); !os.IsNotExist(err) {
		t.Errorf("after the resume the checkpoint is still there (%v)", err)
	}
}

// A pause whose runsc checkpoint stopped the sandbox and wrote its
// checkpoint, and which then cannot record it (the checkpoint's marker,
// or the sandbox's state, on a full disk), loses nothing: it fails
// saying the sandbox is stopped and how to resume it, the checkpoint
// stays, Paused reports the sandbox paused (the runner keeps it paused),
// a pause again is done already, and a resume restores it.
func TestPauseUnrecordedKeepsCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name string
		full func(e *Engine, id string) string
	}{
		{"the checkpoint's marker", func(e *Engine, id string) string { return e.checkpointsDir() }},
		{"the sandbox's state", func(e *Engine, id string) string { return e.bundleDir(id) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "sb-unrecorded-" + strings.ReplaceAll(strings.TrimPrefix(c.name, "the "), "'s ", "-")
			r := newRecordRig(t, id)
			ctx := context.Background()
			full := c.full(r.e, id)
			r.fill(t, full)
			err := r.e.Pause(ctx, id)
			if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "checkpoint kept") || !strings.Contains(err.Error(), "airlock sandbox resume "+id) {
				t.Fatalf("Pause with %s unwritable: %v; want unavailable, saying the checkpoint is kept and how to resume", c.name, err)
			}
			if paused, err := r.e.Paused(ctx, id); !paused || err != nil {
				t.Errorf("Paused = %v, %v; want the stopped sandbox reported paused", paused, err)
			}
			if !r.e.checkpointWritten(id) {
				t.Errorf("the checkpoint was removed; want it kept for a resume")
			}
			if err := r.e.Pause(ctx, id); err != nil {
				t.Errorf("Pause again: %v; want it paused already", err)
			}
			r.free(t, full)
			r.resumes(t)
		})
	}
}

// A resume whose runsc restore started the sandbox, and which then
// cannot record it (its state on a full disk), stops the restored
// sandbox rather than leave it running while recorded paused: it stays
// paused, its checkpoint whole, and the next resume restores it.
func TestResumeUnrecordedStaysPaused(t *testing.T) {
	r := newRecordRig(t, "sb-unrecorded-resume")
	ctx := context.Background()
	if err := r.e.Pause(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	full := r.e.bundleDir(r.id)
	r.fill(t, full)
	err := r.e.Resume(ctx, r.id)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "stays paused") {
		t.Fatalf("Resume with the state unwritable: %v; want unavailable, saying the sandbox stays paused", err)
	}
	pid, perr := readPid(filepath.Join(full, "restore.pid"))
	if perr != nil {
		t.Fatal(perr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := procStart(pid); ok; _, ok = procStart(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the restored sandbox (pid %d) runs on while its record says paused", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if paused, err := r.e.Paused(ctx, r.id); !paused || err != nil || !r.e.checkpointed(r.id) {
		t.Errorf("Paused = %v, %v, checkpoint whole %v; want it paused, its checkpoint kept", paused, err, r.e.checkpointed(r.id))
	}
	r.free(t, full)
	r.resumes(t)
}

// failNextRestore makes the rig's fake runsc fail its next restore once,
// as a transient failure (a full disk, a runsc hiccup) would.
func (r *recordRig) failNextRestore(t *testing.T) {
	t.Helper()
	p := filepath.Join(r.root, "runsc")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	flag := filepath.Join(r.root, "failrestore")
	hook := `if [ "$cmd" = restore ] && [ -f ` + flag + ` ]; then rm -f ` + flag + `; echo "restore: transient failure" >&2; exit 1; fi
case "$cmd" in`
	s := strings.Replace(string(b), `case "$cmd" in`, hook, 1)
	if err := os.WriteFile(p, []byte(s), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A pause that could not record its checkpoint keeps it, and the sandbox
// counts as paused: a resume whose restore then fails for a passing
// reason leaves it paused, to be resumed again, not lost.
func TestResumeOfKeptCheckpointFailingOnceStaysPaused(t *testing.T) {
	r := newRecordRig(t, "sb-rv2-kept-restore-fails")
	ctx := context.Background()
	full := r.e.checkpointsDir()
	r.fill(t, full)
	if err := r.e.Pause(ctx, r.id); err == nil || !strings.Contains(err.Error(), "checkpoint kept") {
		t.Fatalf("Pause with the marker unwritable: %v; want the checkpoint kept", err)
	}
	r.free(t, full)
	if paused, err := r.e.Paused(ctx, r.id); !paused || err != nil {
		t.Fatalf("Paused = %v, %v; want paused", paused, err)
	}
	r.failNextRestore(t)
	err := r.e.Resume(ctx, r.id)
	if err == nil {
		t.Fatal("Resume succeeded; the fake runsc was to fail the restore")
	}
	if errors.Is(err, engine.ErrSandboxLost) {
		t.Errorf("a resume of a kept checkpoint that failed once: %v\nwant a retryable error (it stays paused), not the sandbox lost", err)
	}
	if paused, perr := r.e.Paused(ctx, r.id); !paused || perr != nil {
		t.Errorf("after the failed resume Paused = %v, %v; want it still paused", paused, perr)
	}
	r.resumes(t)
}

// A resume cut short after it recorded the sandbox running, before it
// removed the checkpoint, is over: the next resume leaves the running
// sandbox as it is (restoring the checkpoint again would undo what it did
// since), and removes the checkpoint; should the sandbox then die, it is
// not taken for paused.
func TestResumeCutBeforeCheckpointRemovalKeepsTheSandbox(t *testing.T) {
	r := newRecordRig(t, "sb-cut-before-removal")
	ctx := context.Background()
	if err := r.e.Pause(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	dir := r.e.checkpointDir(r.id)
	mark, err := os.ReadFile(filepath.Join(dir, checkpointDone))
	if err != nil || len(mark) == 0 {
		t.Fatalf("the checkpoint's mark: %q, %v; want a nonce", mark, err)
	}
	r.resumes(t)
	before, err := r.e.openState(r.id)
	if err != nil {
		t.Fatal(err)
	}
	// What the cut left: the mark and the kernel's state, still there.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{checkpointDone: mark, checkpointImage: []byte("state\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if paused, err := r.e.Paused(ctx, r.id); paused || err != nil {
		t.Fatalf("Paused = %v, %v; want running", paused, err)
	}
	r.resumes(t)
	after, err := r.e.openState(r.id)
	if err != nil {
		t.Fatal(err)
	}
	if after.st.Pid != before.st.Pid || after.st.Start != before.st.Start {
		t.Fatalf("the running sandbox was restored again: pid %d, was %d", after.st.Pid, before.st.Pid)
	}

	// Died with the checkpoint still there: lost, not paused.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{checkpointDone: mark, checkpointImage: []byte("state\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Kill(after.st.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); after.alive() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed sandbox still runs")
		}
	}
	if paused, err := r.e.Paused(ctx, r.id); paused || err != nil {
		t.Errorf("a resumed sandbox that died since: Paused = %v, %v; want not paused", paused, err)
	}
}

// A checkpoint already restored is never restored again, even once the
// sandbox is recorded paused since (a snapshot stops it and records it
// so): the resume refuses, saying the checkpoint is gone.
func TestResumeNeverRestoresACheckpointTwice(t *testing.T) {
	r := newRecordRig(t, "sb-restored-once")
	ctx := context.Background()
	if err := r.e.Pause(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	dir := r.e.checkpointDir(r.id)
	mark, err := os.ReadFile(filepath.Join(dir, checkpointDone))
	if err != nil {
		t.Fatal(err)
	}
	r.resumes(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{checkpointDone: mark, checkpointImage: []byte("state\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := r.e.openState(r.id)
	if err != nil {
		t.Fatal(err)
	}
	unix.Kill(sb.st.Pid, unix.SIGKILL)
	sb.st.Paused, sb.st.Pid, sb.st.Start, sb.st.Control = true, 0, 0, ""
	if err := r.e.writeState(sb); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Resume(ctx, r.id); !errdefs.IsDataLoss(err) {
		t.Fatalf("a resume from a checkpoint restored already: %v; want data loss (the checkpoint is gone)", err)
	}
}
