package oci

// Snapshots of warmed gVisor sandboxes, and new sandboxes restored from
// them (engine.Snapshotter). A snapshot is `runsc checkpoint` of a live
// sandbox into <root>/oci/snapshots/<name> (0700, its files 0600), with a
// manifest naming it (snapshot.go). A new sandbox is made as Create makes
// one, its own id, bundle, root overlay, cgroup and mounts, and started by
// `runsc restore` from the snapshot in place of `runsc run`.
//
// Found by experiment with the runsc setup builds: a checkpoint restores
// into another container id and another bundle, and a bind mount whose
// source differs (a new sandbox's /tmp, workspace, /out) is taken, as
// long as the mounts' destinations, types and options are those of the
// checkpoint (runsc checks them and refuses one more or one less). The
// snapshot is read, never written, by a restore: many sandboxes restore
// from one, at once.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/isolation"
)

func (e *Engine) snapshotsDir() string { return filepath.Join(e.root, "oci", "snapshots") }

func (e *Engine) snapshotDir(name string) string { return filepath.Join(e.snapshotsDir(), name) }

// newPrefix names a snapshot being written, in the snapshots directory:
// .new-<id>-<random> (os.MkdirTemp's, digits).
const newPrefix = ".new-"

// refuseSnapshot explains why a sandbox under runc has no snapshot.
func refuseSnapshot(what string) error {
	return fmt.Errorf("%w: %s runs under runc (--isolation seccomp), which cannot checkpoint a sandbox's processes and memory; only gVisor sandboxes have snapshots (use --isolation gvisor)", errdefs.ErrNotImplemented, what)
}

// Snapshot implements engine.Snapshotter: sandbox id, live, is
// checkpointed into a new snapshot and its processes end. Its record
// stays, paused, for the caller to destroy.
func (e *Engine) Snapshot(ctx context.Context, id string) (_ string, err error) {
	if err := checkSandboxID(id); err != nil {
		return "", err
	}
	lk, err := e.lock(ctx, id)
	if err != nil {
		return "", err
	}
	defer lk.Release(true)
	sb, err := e.openState(id)
	if err != nil {
		return "", err
	}
	if sb.st.Mode == isolation.Seccomp {
		return "", refuseSnapshot(fmt.Sprintf("sandbox %q", id))
	}
	if sb.st.Policy == "" {
		return "", fmt.Errorf("%w: sandbox %q was made before snapshots recorded a sandbox's policy; make a new one", errdefs.ErrInvalidArgument, id)
	}
	if !sb.st.Agent || sb.st.Control == "" {
		// Its detached programs were started by runsc exec, and a restore
		// ends those: only the init's descendants, through the spawner,
		// outlive it.
		return "", fmt.Errorf("%w: sandbox %q has no spawner (no exec agent bound, or its control socket was unusable at create), so no program of it would survive a restore; snapshot a new sandbox (see `airlock --debug` for why)", errdefs.ErrFailedPrecondition, id)
	}
	if err := sb.alive(); err != nil {
		return "", err
	}
	bin, state, args := e.runtimeFor(sb.st.Mode, sb.bundle)
	rt, err := engine.BinaryVersion(ctx, bin, filepath.Join(e.root, "cache"))
	if err != nil {
		return "", fmt.Errorf("%w: reading runsc's version for a snapshot: %v", errdefs.ErrUnavailable, err)
	}
	if err := os.MkdirAll(e.snapshotsDir(), 0o700); err != nil {
		return "", fmt.Errorf("%w: creating the snapshots directory: %v", errdefs.ErrUnavailable, err)
	}
	// Written under a name of its own, then renamed to its content's: a
	// snapshot cut short is never found under a name.
	tmp, err := os.MkdirTemp(e.snapshotsDir(), newPrefix+id+"-")
	if err != nil {
		return "", fmt.Errorf("%w: creating a snapshot of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	defer os.RemoveAll(tmp)
	room, err := e.reserveRoom(id, tmp, fmt.Sprintf("a snapshot of sandbox %q", id))
	if err != nil {
		return "", err
	}
	defer room.Release()
	name := sb.name()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout(room.need))
	defer cancel()
	lap := stopwatch()
	// Uncompressed, and without the pages that hold only zeros: a restore
	// then maps the pages file as it is, and reads it in the background.
	ck := exec.CommandContext(cctx, bin, append(args, "checkpoint", "--compression=none", "--exclude-committed-zero-pages", "--image-path="+tmp, name)...)
	ck.ExtraFiles = []*os.File{lk.File(), room.File()}
	out, err := ck.CombinedOutput()
	lap("checkpoint")
	room.Release()
	// Whatever happened, the sandbox's processes are to end: a checkpoint
	// stops them, and a failed one may have stopped them half-way.
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer scancel()
		e.stopRuntime(sctx, sb, state, name, nil)
		sb.st.Paused, sb.st.Pid, sb.st.Start, sb.st.Control = true, 0, 0, ""
		if werr := e.writeState(sb); werr != nil && err == nil {
			err = werr
		}
	}()
	if err != nil {
		return "", fmt.Errorf("%w: checkpointing sandbox %q for a snapshot: %v: %s", errdefs.ErrUnavailable, id, err, out)
	}
	m := &snapshotManifest{Version: manifestVersion, Image: sb.st.Image, Policy: sb.st.Policy, Runtime: rt, Agent: sb.st.Agent, AgentVersion: agentVersion(sb.st.Agent), BootID: sb.st.BootID,
		Files: map[string]string{}, CreatedAt: time.Now().UTC()}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return "", fmt.Errorf("%w: reading the snapshot of %q: %v", errdefs.ErrUnavailable, id, err)
	}
	for _, ent := range ents {
		p := filepath.Join(tmp, ent.Name())
		// runsc writes its images 0644; a snapshot holds the sandbox's
		// memory, for root alone.
		if err := os.Chmod(p, 0o600); err != nil {
			return "", fmt.Errorf("%w: restricting the snapshot of %q: %v", errdefs.ErrUnavailable, id, err)
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return "", fmt.Errorf("%w: hashing the snapshot of %q: %v", errdefs.ErrUnavailable, id, err)
		}
		m.Files[ent.Name()] = sum
	}
	lap("hash")
	b, snap := m.encode()
	if err := atomicfile.WriteFile(filepath.Join(tmp, manifestFile), b, 0o600); err != nil {
		return "", fmt.Errorf("%w: writing the snapshot's manifest: %v", errdefs.ErrUnavailable, err)
	}
	if err := os.Rename(tmp, e.snapshotDir(snap)); err != nil {
		return "", fmt.Errorf("%w: storing snapshot %s: %v", errdefs.ErrUnavailable, snap, err)
	}
	e.log.Debug("sandbox snapshotted", "sandbox_id", id, "snapshot", snap, "steps", lap("stored"))
	return snap, nil
}

// maxRestoreLog caps what is read of a restore's log for its error.
const maxRestoreLog = 1 << 20

// restoreRefusal is the clear refusal of snapshot snap after its restore
// into bundle failed, when runsc's restore log says why (unreopenedError);
// nil when it does not.
func restoreRefusal(bundle, snap string) error {
	logs, _ := filepath.Glob(filepath.Join(bundle, "logs", "*.restore.txt"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(f, maxRestoreLog))
		f.Close()
		if err := unreopenedError(snap, b); err != nil {
			return err
		}
	}
	return nil
}

// fileSHA256 hashes the file at p.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Restore implements engine.Snapshotter.
func (e *Engine) Restore(ctx context.Context, s *engine.SandboxSpec, snapshot string) (engine.Sandbox, error) {
	if err := checkSnapshotName(snapshot); err != nil {
		return nil, err
	}
	return e.create(ctx, s, snapshot)
}

// checkSnapshot refuses snapshot snap for sandbox s unless it fits: a
// gVisor sandbox, and the image, policy, runsc and agent
// the snapshot was taken with. The files' hashes are not read again here
// (hashing costs more than the rest of a restore): the manifest, which
// holds them, must hash to the name, and the directory is root's alone.
func (e *Engine) checkSnapshot(ctx context.Context, snap string, s *engine.SandboxSpec, agent bool) error {
	if s.Policy.Isolation == isolation.Seccomp {
		return refuseSnapshot(fmt.Sprintf("sandbox %q", s.ID))
	}
	m, err := e.readSnapshot(snap)
	if err != nil {
		return err
	}
	rt, err := engine.BinaryVersion(ctx, e.runsc, filepath.Join(e.root, "cache"))
	if err != nil {
		return fmt.Errorf("%w: reading runsc's version: %v", errdefs.ErrUnavailable, err)
	}
	return m.fits(snap, snapshotWant{Image: s.Image, Policy: policyDigest(s.Policy), Runtime: rt, Agent: agent, BootID: true})
}

// readSnapshot reads snapshot snap's manifest, checked against its name.
func (e *Engine) readSnapshot(snap string) (*snapshotManifest, error) {
	if err := checkSnapshotName(snap); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(e.snapshotDir(snap), manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: snapshot %s is gone; create its template again (`airlock template create NAME --replace --warm ...`)", errdefs.ErrNotFound, snap)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading snapshot %s: %v", errdefs.ErrUnavailable, snap, err)
	}
	return decodeManifest(snap, b)
}

// RemoveSnapshot implements engine.Snapshotter. Sandboxes restored from
// it run on: runsc holds what it still reads open.
func (e *Engine) RemoveSnapshot(ctx context.Context, name string) error {
	if err := checkSnapshotName(name); err != nil {
		return err
	}
	if err := os.RemoveAll(e.snapshotDir(name)); err != nil {
		return fmt.Errorf("%w: removing snapshot %s: %v", errdefs.ErrUnavailable, name, err)
	}
	return nil
}

// Snapshots implements engine.Snapshotter. A snapshot being written (not
// yet under its name) is not listed.
func (e *Engine) Snapshots(ctx context.Context) (map[string]time.Time, error) {
	ents, err := os.ReadDir(e.snapshotsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]time.Time{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing snapshots: %v", errdefs.ErrUnavailable, err)
	}
	out := map[string]time.Time{}
	for _, ent := range ents {
		if checkSnapshotName(ent.Name()) != nil {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			continue
		}
		out[ent.Name()] = fi.ModTime()
	}
	return out, nil
}
