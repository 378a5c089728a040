package oci

// Pause and resume of long-lived gVisor sandboxes (engine.Pauser):
// `runsc checkpoint` into <root>/oci/checkpoints/<id>, which stops the
// sandbox, then `runsc restore` from there into the same bundle, under the
// same container name. The bundle, its root overlay, the cgroup and the
// sandbox's areas (workspace, /tmp, /out) stay as they are while it is
// paused: the restored sandbox finds its mounts where it left them.
//
// gVisor's restore kills every process an exec started (and what those
// forked): only the descendants of the container's init survive it. The
// init starts the spawner for that (internal/agent/spawner.go), and a
// detached exec starts its program through it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/capbuf"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/gvisor"
	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/airlock-sandbox/airlock/isolation"
)

// checkpointDone marks a checkpoint that runsc wrote whole;
// checkpointImage is the kernel's state in it, which runsc writes;
// checkpointRuntime holds the version of the runsc that wrote it.
const (
	checkpointDone    = "complete"
	checkpointImage   = "checkpoint.img"
	checkpointRuntime = "runtime"
)

// checkpointTimeout bounds a runsc checkpoint of a sandbox holding need
// bytes of memory: cleanupTimeout, and a second per checkpointRate bytes.
func checkpointTimeout(need int64) time.Duration {
	return cleanupTimeout + time.Duration(need/checkpointRate)*time.Second
}

// checkpointRate is a low bound of the rate runsc writes a checkpoint
// at, in bytes a second.
const checkpointRate = 16 << 20

// checkRuntime refuses to restore checkpoint dir unless under the runsc
// that wrote it, version rt (a checkpoint from before versions were
// recorded is tried).
func checkRuntime(id, dir, rt string) error {
	b, err := os.ReadFile(filepath.Join(dir, checkpointRuntime))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: reading the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	if string(b) != rt {
		// Lost to its clients: no retry resumes it, a new sandbox serves.
		return engine.Lost("sandbox %q was paused under runsc %q, and this is runsc %q, which cannot restore its checkpoint: the sandbox cannot be resumed; remove it (`airlock sandbox rm %s`)", id, b, rt, id)
	}
	return nil
}

func (e *Engine) checkpointsDir() string { return filepath.Join(e.root, "oci", "checkpoints") }

func (e *Engine) checkpointDir(id string) string { return filepath.Join(e.checkpointsDir(), id) }

// checkpointMark reads the mark of sandbox id's checkpoint: a nonce its
// pause wrote, "" for none (or a checkpoint from before marks held one).
func (e *Engine) checkpointMark(id string) string {
	b, _ := os.ReadFile(filepath.Join(e.checkpointDir(id), checkpointDone))
	return string(b)
}

// resumedFrom reports whether sandbox sb was resumed from the checkpoint
// still there: a resume cut short as it removed it, after it recorded the
// sandbox running (and, since, a snapshot may have stopped it).
func (e *Engine) resumedFrom(sb *sandbox) bool {
	return sb.st.Resumed != "" && sb.st.Resumed == e.checkpointMark(sb.st.ID)
}

// checkpointed reports whether sandbox id has a whole checkpoint.
func (e *Engine) checkpointed(id string) bool {
	_, err := os.Stat(filepath.Join(e.checkpointDir(id), checkpointDone))
	return err == nil
}

// checkpointWritten reports whether runsc wrote a checkpoint's state
// file for sandbox id, whole or not.
func (e *Engine) checkpointWritten(id string) bool {
	_, err := os.Stat(filepath.Join(e.checkpointDir(id), checkpointImage))
	return err == nil
}

// refusePause explains why a sandbox under runc cannot pause.
func refusePause(id string) error {
	return fmt.Errorf("%w: sandbox %q runs under runc (--isolation seccomp), which cannot checkpoint a sandbox's processes and memory; only gVisor sandboxes pause (create it with --isolation gvisor)", errdefs.ErrNotImplemented, id)
}

// Paused implements engine.Pauser.
func (e *Engine) Paused(ctx context.Context, id string) (bool, error) {
	sb, err := e.openState(id)
	if err != nil {
		return false, err
	}
	return e.paused(sb), nil
}

// paused reports whether sandbox sb is paused: recorded so, or stopped by
// a checkpoint still there, which a pause that could not record it (or
// died first) left, and which Resume restores.
func (e *Engine) paused(sb *sandbox) bool {
	if sb.st.Paused {
		return true
	}
	if e.resumedFrom(sb) {
		return false // running, or died since: not a pause to finish
	}
	return (e.checkpointed(sb.st.ID) || e.checkpointWritten(sb.st.ID)) && sb.alive() != nil
}

// openLocked opens sandbox id under its engine lock (which Create and
// Destroy take too) for a pause or a resume, refusing one under runc.
func (e *Engine) openLocked(ctx context.Context, id string) (_ *sandbox, _ *flock.Lock, release func(), err error) {
	if err := checkSandboxID(id); err != nil {
		return nil, nil, nil, err
	}
	lk, err := e.lock(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	sb, err := e.openState(id)
	if err == nil && sb.st.Mode == isolation.Seccomp {
		err = refusePause(id)
	}
	if err != nil {
		lk.Release(true)
		return nil, nil, nil, err
	}
	return sb, lk, func() { lk.Release(true) }, nil
}

func (e *Engine) openState(id string) (*sandbox, error) {
	esb, err := e.Open(context.Background(), id)
	if err != nil {
		return nil, err
	}
	return esb.(*sandbox), nil
}

// Pause implements engine.Pauser: the sandbox's processes and memory go
// into a checkpoint (0600, in a 0700 directory under airlock's root), its
// sandbox and gofer processes end, and its cgroup is left empty.
func (e *Engine) Pause(ctx context.Context, id string) (err error) {
	sb, lk, release, err := e.openLocked(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	if e.paused(sb) {
		return nil
	}
	// A sandbox with egress keeps its namespaces and its proxy (served by
	// its supervisor) while paused; the checkpoint holds its netstack,
	// which the restore attaches to the same interface.
	if err := sb.alive(); err != nil {
		return err
	}
	bin, state, args := e.runtimeFor(sb.st.Mode, sb.bundle)
	rt, err := engine.BinaryVersion(ctx, bin, filepath.Join(e.root, "cache"))
	if err != nil {
		return fmt.Errorf("%w: reading runsc's version for a pause: %v", errdefs.ErrUnavailable, err)
	}
	dir := e.checkpointDir(id)
	if err := os.MkdirAll(e.checkpointsDir(), 0o700); err != nil {
		return fmt.Errorf("%w: creating the checkpoints directory: %v", errdefs.ErrUnavailable, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%w: removing an earlier checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("%w: creating the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	kept := false
	defer func() {
		if err != nil && !kept && !e.checkpointed(id) {
			os.RemoveAll(dir)
		}
	}()
	room, err := e.reserveRoom(id, dir, fmt.Sprintf("pausing sandbox %q", id))
	if err != nil {
		return err
	}
	defer room.Release()
	// Another runsc cannot restore the checkpoint: Resume refuses it.
	if err := atomicfile.WriteFile(filepath.Join(dir, checkpointRuntime), []byte(rt), 0o600); err != nil {
		return fmt.Errorf("%w: recording the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	name := sb.name()
	// Not on ctx: a checkpoint cut short leaves the sandbox stopped
	// half-way, so once begun it runs to its end.
	timeout := checkpointTimeout(room.need)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	ck := exec.CommandContext(cctx, bin, append(args, "checkpoint", "--image-path="+dir, name)...)
	// runsc holds the engine's lock of the sandbox too: should this
	// process die, a resume waits for the checkpoint to end before it
	// looks at the sandbox. It holds the room reserved for the
	// checkpoint as long as it writes.
	ck.ExtraFiles = []*os.File{lk.File(), room.File()}
	lap := stopwatch()
	out, err := ck.CombinedOutput()
	lap("checkpoint")
	room.Release()
	if err != nil {
		if cctx.Err() != nil {
			// The sandbox was stopped for the save, which was cut short.
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer scancel()
			e.stopRuntime(sctx, sb, state, name, nil)
			return engine.Lost("checkpointing sandbox %q took more than %v, and it was stopped half-way; it cannot be resumed: remove it (`airlock sandbox rm %s`)", id, timeout, id)
		}
		if aerr := sb.alive(); aerr != nil {
			return aerr
		}
		return fmt.Errorf("%w: checkpointing sandbox %q: %v: %s", errdefs.ErrUnavailable, id, err, bytes.TrimSpace(out))
	}
	// runsc stopped the sandbox and wrote its checkpoint whole. Should
	// recording that fail, the checkpoint stays, Paused reports the sandbox
	// paused and Resume restores it, as after a pause cut short.
	kept, stopped := true, false
	defer func() {
		if err == nil {
			return
		}
		if !stopped {
			e.stopRuntime(cctx, sb, state, name, nil)
		}
		if !sb.st.Paused {
			// The state may be writable where the marker was not (another
			// file system): recorded paused, a failed restore keeps it so.
			sb.st.Paused, sb.st.Pid, sb.st.Start, sb.st.Control = true, 0, 0, ""
			if werr := e.writeState(sb); werr != nil {
				sb.st.Paused = false
			}
		}
		err = fmt.Errorf("%w; sandbox %q is stopped and its checkpoint kept: `airlock sandbox resume %s` restores it", err, id, id)
	}()
	// runsc writes its images 0644; a checkpoint holds the sandbox's
	// memory, for root alone.
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if err := os.Chmod(filepath.Join(dir, ent.Name()), 0o600); err != nil {
			return fmt.Errorf("%w: restricting the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
		}
	}
	// The mark holds a nonce, which a resume records, so that a resume
	// cut short as it removes the checkpoint is told from a pause to
	// finish.
	if err := atomicfile.WriteFile(filepath.Join(dir, checkpointDone), []byte(rand.Text()), 0o600); err != nil {
		return fmt.Errorf("%w: recording the checkpoint of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	// From here the checkpoint is whole: should this process die, Resume
	// restores from it. The sandbox wrote it, so its cgroup is charged
	// with the dirty page cache, which the reclaim must write back: that
	// writeback starts now, beside the sandbox's end.
	written := writeBack(dir)
	e.stopRuntime(cctx, sb, state, name, written)
	stopped = true
	lap("stop")
	sb.st.Paused, sb.st.Pid, sb.st.Start, sb.st.Control = true, 0, 0, ""
	if err := e.writeState(sb); err != nil {
		return err
	}
	e.log.Debug("sandbox paused", "sandbox_id", id, "steps", lap("state"))
	return nil
}

// writeBack writes dir's files' dirty pages to disk, in the background;
// the channel closes once that is done.
func writeBack(dir string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			f, err := os.Open(filepath.Join(dir, ent.Name()))
			if err != nil {
				continue
			}
			unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			f.Close()
		}
	}()
	return done
}

// stopRuntime ends what is left of a checkpointed (or half-restored)
// sandbox's runtime: every process of its cgroup, runsc's state of it,
// and the memory its cgroup still counts that the kernel can reclaim,
// once written (nil: nothing to wait for).
func (e *Engine) stopRuntime(ctx context.Context, sb *sandbox, state, name string, written <-chan struct{}) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		pids := cgroupPids(sb.st.ID)
		if len(pids) == 0 {
			break
		}
		for pid := range pids {
			killInCgroup(pid, sb.st.ID)
		}
	}
	e.delete(ctx, e.runsc, state, name, e.log)
	if written != nil {
		<-written
	}
	reclaim(sb.st.ID)
}

// reclaim asks the kernel to give back what an empty memory cgroup still
// holds (page cache); tmpfs pages (the sandbox's /tmp) stay.
func reclaim(id string) {
	if cgroup.Unified() {
		os.WriteFile(filepath.Join("/sys/fs/cgroup", cgroup.Parent, id, "memory.reclaim"), []byte("1G"), 0)
		return
	}
	os.WriteFile(filepath.Join("/sys/fs/cgroup/memory", cgroup.Parent, id, "memory.force_empty"), []byte("0"), 0)
}

func (e *Engine) writeState(sb *sandbox) error {
	b, _ := json.Marshal(sb.st)
	if err := atomicfile.WriteFile(filepath.Join(sb.bundle, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("%w: writing the state of sandbox %q: %v", errdefs.ErrUnavailable, sb.st.ID, err)
	}
	return nil
}

// Resume implements engine.Pauser: the sandbox is restored from its
// checkpoint into its bundle and cgroup, and the checkpoint is removed.
// A resume cut short is done again from the start, once the runsc restore
// it started has ended. A pause cut short is finished: its checkpoint
// restored once the sandbox it stopped has ended.
func (e *Engine) Resume(ctx context.Context, id string) error {
	sb, lk, release, err := e.openLocked(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	lap := stopwatch()
	if !sb.st.Paused {
		if e.resumedFrom(sb) {
			// Resumed, and cut short as it removed its checkpoint:
			// restoring that again would undo what the sandbox did since.
			os.RemoveAll(e.checkpointDir(id))
			return sb.alive()
		}
		if !e.checkpointed(id) && !e.checkpointWritten(id) {
			// Running: what a finished resume, cut short as it removed
			// its checkpoint, left of it goes now.
			os.RemoveAll(e.checkpointDir(id))
			return sb.alive()
		}
		// A pause whose process died after runsc checkpoint began: runsc
		// held this lock until it ended, so the checkpoint is over.
		if !e.checkpointed(id) && !e.checkpointEnded(cctx, sb) {
			// It never reached the sandbox, which runs on.
			e.log.Warn("a cut-short pause left a checkpoint that did not stop the sandbox; removing it", "sandbox_id", id)
			os.RemoveAll(e.checkpointDir(id))
			return sb.alive()
		}
		lap("checkpoint end")
		// Restored like a paused one. A checkpoint not marked whole (its
		// process died while runsc wrote it) is tried too: a torn one
		// fails to restore, and the sandbox is lost, as it would be
		// without it.
	} else if e.resumedFrom(sb) || !e.checkpointed(id) && !e.checkpointWritten(id) {
		// (Recorded paused with no mark: a pause that wrote its state but
		// not the mark, after runsc wrote the checkpoint whole. One whose
		// mark the state names was restored already.)
		return fmt.Errorf("%w: sandbox %q is paused but its checkpoint is gone; `airlock sandbox rm %s` frees it", errdefs.ErrDataLoss, id, id)
	}
	bin, state, args := e.runtimeFor(sb.st.Mode, sb.bundle)
	rt, err := engine.BinaryVersion(cctx, bin, filepath.Join(e.root, "cache"))
	if err != nil {
		return fmt.Errorf("%w: reading runsc's version for a resume: %v", errdefs.ErrUnavailable, err)
	}
	if err := checkRuntime(id, e.checkpointDir(id), rt); err != nil {
		return err
	}
	mark := e.checkpointMark(id)
	name := sb.name()
	// What an earlier resume, cut short, left running or recorded.
	e.stopRuntime(cctx, sb, state, name, nil)
	lap("stop")
	if sb.st.Egress != nil {
		// As at create: the netstack takes the namespace's interface,
		// whose address the boot took off it and which goes back first.
		eg, err := sb.st.Egress.policy()
		if err != nil {
			return fmt.Errorf("%w: sandbox %q's egress: %v", errdefs.ErrDataLoss, id, err)
		}
		args = isolation.RunscNetwork(args, eg)
		if err := netns.At(e.netnsDir(), id).Readdress(); err != nil {
			return fmt.Errorf("%w: restoring sandbox %q's network: %v", errdefs.ErrUnavailable, id, err)
		}
	}
	pidFile := filepath.Join(sb.bundle, "restore.pid")
	os.Remove(pidFile)
	// --background: the sandbox runs once its kernel's state is loaded,
	// and reads its memory's pages after runsc returns, from descriptors
	// runsc passed it, so the checkpoint's files can go at once.
	cmd := exec.CommandContext(cctx, bin, append(args, "restore", "--background", "--image-path="+e.checkpointDir(id), "--bundle", sb.bundle, "--pid-file", pidFile, "--detach", name)...)
	cmd.Env = runtimeEnv
	// As at create, the container's stdio is /dev/null (the restored init
	// takes runsc's), and the sandbox outlives this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// runsc holds the engine's lock of the sandbox too, as at checkpoint:
	// should this process die, the next resume waits for this restore to
	// end before it stops what it left and restores again, instead of
	// racing it (a runsc restore that fails destroys the container of
	// its name). runsc sets every descriptor it inherits close-on-exec
	// before it starts the sandbox and the gofer, so the lock goes with
	// runsc restore, not with the sandbox.
	cmd.ExtraFiles = []*os.File{lk.File()}
	err = cmd.Run()
	lap("restore")
	if err != nil {
		e.stopRuntime(cctx, sb, state, name, nil)
		if !sb.st.Paused && !e.checkpointed(id) {
			// Only a checkpoint a pause cut short may be torn; a whole one
			// (marked, or recorded paused) is tried again.
			return engine.Lost("sandbox %q died while it was paused, and its checkpoint does not restore (%v)%s", id, err, runtimeLog(sb.bundle))
		}
		return fmt.Errorf("%w: restoring sandbox %q: %v%s", errdefs.ErrUnavailable, id, err, runtimeLog(sb.bundle))
	}
	// The pid file spares asking runsc for its state (an exec of runsc).
	pid, err := readPid(pidFile)
	if err != nil {
		pid, err = e.statePid(cctx, bin, state, name)
	}
	if err != nil {
		e.stopRuntime(cctx, sb, state, name, nil)
		return err
	}
	start, ok := procStart(pid)
	if !ok {
		// As a restore that fails: what runsc left goes, and a paused
		// sandbox stays so, its checkpoint untouched.
		e.stopRuntime(cctx, sb, state, name, nil)
		if !sb.st.Paused && !e.checkpointed(id) {
			return engine.Lost("sandbox %q died while it was paused, and it ended as its checkpoint was restored%s; remove it (`airlock sandbox rm %s`)", id, runtimeLog(sb.bundle), id)
		}
		return fmt.Errorf("%w: sandbox %q ended as it was restored%s; it stays paused: `airlock sandbox resume %s` tries again, `airlock sandbox rm %s` frees it", errdefs.ErrUnavailable, id, runtimeLog(sb.bundle), id, id)
	}
	sb.st.Paused, sb.st.Pid, sb.st.Start, sb.st.Control = false, pid, start, ""
	sb.st.Resumed = mark
	lap("pid")
	if c, err := gvisor.Find(cctx, state, name); err == nil {
		sb.st.Control = c.Socket
	} else {
		e.log.Debug("gVisor control socket unusable after restore; execs use runsc exec", "sandbox", name, "err", err)
	}
	lap("control")
	if err := e.writeState(sb); err != nil {
		// Unrecorded, the restored sandbox would run as paused: it stops,
		// and its checkpoint, untouched, restores on the next resume.
		e.stopRuntime(cctx, sb, state, name, nil)
		return fmt.Errorf("%w; sandbox %q stays paused: `airlock sandbox resume %s` tries again", err, id, id)
	}
	// The kernel's state goes first, then the mark, whose nonce the state
	// now names: a resume cut short from here on is seen as done, never as
	// a pause to finish from a checkpoint half removed. (A mark of an
	// older airlock's holds no nonce: it goes first.)
	dir := e.checkpointDir(id)
	first := []string{checkpointImage, checkpointDone}
	if mark == "" {
		first = []string{checkpointDone, checkpointImage}
	}
	for _, f := range first {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			e.log.Warn("removing a used checkpoint", "sandbox_id", id, "err", err)
		}
	}
	// The pages, as large as the sandbox's memory, take tens of
	// milliseconds to free: moved aside, they go after the resume returns
	// (Close waits, or a process of their own does), and with the sandbox
	// should that not happen. One that cannot be moved goes now: removed
	// in the background under its own name, it could take a next pause's
	// checkpoint with it.
	used := filepath.Join(e.checkpointsDir(), usedPrefix+id+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	remove := func() {
		if err := os.RemoveAll(used); err != nil {
			e.log.Warn("removing a used checkpoint", "sandbox_id", id, "err", err)
		}
	}
	switch {
	case os.Rename(dir, used) != nil:
		used = dir
		remove()
	case !e.detached || !removeDetached(used):
		e.bg.Go(remove)
	}
	e.log.Debug("sandbox resumed", "sandbox_id", id, "pid", pid, "steps", lap("moved aside"))
	return nil
}

// removeDetached starts `rm -rf -- path` in a session of its own, which
// outlives this process, and reports whether it started. Its exit is
// waited for, should this process live that long.
func removeDetached(path string) bool {
	rm, err := exec.LookPath("rm")
	if err != nil {
		return false
	}
	cmd := exec.Command(rm, "-rf", "--", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false
	}
	go cmd.Wait()
	return true
}

// usedPrefix names a resumed sandbox's checkpoint being removed, in the
// checkpoints directory: .used-<id>-<suffix>.
const usedPrefix = ".used-"

// usedOwner is the sandbox id of a used checkpoint's name, or false.
func usedOwner(name string) (string, bool) { return ownerOf(name, usedPrefix) }

// checkpointExit bounds the wait for a sandbox to end after runsc
// checkpoint did: its kernel was killed as the checkpoint ended, and it
// exits within milliseconds.
const checkpointExit = 10 * time.Second

// checkpointEnded waits for the sandbox process to end after a checkpoint
// whose pausing process died, and reports whether it did. gVisor kills
// the sandbox's kernel once a checkpoint without --leave-running is over,
// whether it was written whole or not, and the process then exits on its
// own time: until it does, the sandbox looks alive. Only a checkpoint
// that never reached the sandbox leaves it running.
func (e *Engine) checkpointEnded(ctx context.Context, sb *sandbox) bool {
	deadline := time.Now().Add(checkpointExit)
	for sb.alive() == nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// stopwatch times a pause's or a resume's steps for the debug log: each
// call records the time since the one before under its name and returns
// all of them so far.
func stopwatch() func(step string) string {
	last := time.Now()
	var steps []string
	return func(step string) string {
		now := time.Now()
		steps = append(steps, fmt.Sprintf("%s %.1fms", step, float64(now.Sub(last).Microseconds())/1000))
		last = now
		return strings.Join(steps, ", ")
	}
}

// readPid reads a pid file runsc wrote.
func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: %q", path, b)
	}
	return pid, nil
}

// execSpawn starts a detached program through the sandbox's spawner, so
// that it descends from the init and survives a pause. ok is false only
// when the agent knows no spawner (a sandbox an older airlock made); the
// caller then starts the program another way. A spawner that takes no
// request is asked again for up to spawnerWait, as the init starts it at
// boot, beside the first execs; past that it is not running (a process of
// the sandbox may have ended it), and the program is refused rather than
// started where a pause or a snapshot's restore would end it. A request
// the spawner may have read is never started again: without its answer,
// the program's start is reported unknown.
func (s *sandbox) execSpawn(ctx context.Context, pr *specs.Process) (exit engine.Exit, ok bool, err error) {
	q := *pr
	q.Args = append([]string{agentPath, "spawn", "--"}, pr.Args...)
	deadline := time.Now().Add(spawnerWait)
	for {
		// The spawn client's answer is a line or a frame; what else a
		// process of the sandbox writes there is not held.
		stdout, stderr := capbuf.New(spawnOutput), capbuf.New(spawnOutput)
		p := &engine.Process{Stdout: stdout, Stderr: stderr}
		exit, err = s.execControl(ctx, p, &q, spawnTimeout)
		if err != nil {
			return exit, true, err
		}
		switch {
		case exit.TimedOut || exit.Killed || exit.Code == agent.SpawnUnanswered:
			// Cut short, or the spawner's answer never came: it may run.
		case exit.Code == 0 && bytes.HasPrefix(stdout.Bytes(), []byte(agent.Spawned)):
			return exit, true, nil
		case exit.Code == 0 && olderAgent(stdout.Bytes()):
			return exit, false, nil
		case exit.Code == agent.SpawnUnreachable:
			if time.Now().Before(deadline) {
				s.e.log.Debug("the spawner takes no request yet; asking again", "sandbox_id", s.st.ID)
				select {
				case <-ctx.Done():
					return engine.Exit{Killed: true, Code: -1}, true, nil
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			return exit, true, fmt.Errorf("%w: starting %q detached in sandbox %q: the sandbox's spawner has taken no request for %v (a process of the sandbox may have ended it), and a program started otherwise would not survive a pause; run it without --detach, or in a new sandbox",
				errdefs.ErrFailedPrecondition, pr.Args[0], s.st.ID, spawnerWait)
		case exit.Code == 0:
			// The spawner's word was lost on its way to the host.
		default:
			return exit, true, fmt.Errorf("%w: starting %q detached in sandbox %q: %s (exit %s)", errdefs.ErrUnknown, pr.Args[0], s.st.ID, bytes.TrimSpace(stderr.Bytes()), strconv.Itoa(exit.Code))
		}
		return exit, true, fmt.Errorf("%w: whether %q started detached in sandbox %q is unknown, so it was not started again: %s (exit %s)", errdefs.ErrDataLoss, pr.Args[0], s.st.ID, bytes.TrimSpace(stderr.Bytes()), strconv.Itoa(exit.Code))
	}
}

// spawnOutput bounds what is kept of each of a spawn client's streams.
const spawnOutput = 4096

// olderAgent reports whether out, what `airlock-agent spawn` wrote, is an
// exec agent's Ready frame: an agent from before the spawner took `spawn`
// for no subcommand, served nothing on its stdin and ended at its end,
// having started nothing.
func olderAgent(out []byte) bool {
	f, err := agent.NewReader(bytes.NewReader(out), agent.MaxPayload).Read()
	return err == nil && f.Type == agent.Ready
}

// spawnTimeout bounds a spawn client's life: it only asks and exits.
const spawnTimeout = 10 * time.Second

// spawnerWait is how long a detached exec waits for the spawner to take
// requests: the init starts it at boot, and on a loaded host the first
// exec may come before it listens.
const spawnerWait = 5 * time.Second
