package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/netns"
)

const namePrefix = "airlock-"

// cgroupGrace spares an idle run cgroup no trace in this root names, for
// as long as another root's create may take to put its first process in.
const cgroupGrace = time.Minute

// Leftovers implements engine.Reaper: runtime containers named airlock-*
// and runsc's files of them, bundles, checkpoints and egress network
// namespaces, all under this root; and run cgroups with nothing in them
// that none of those names (the cgroups are shared by every root).
func (e *Engine) Leftovers(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	for _, rt := range e.runtimes() {
		if _, err := os.Stat(rt.state); err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, rt.bin, "--root", rt.state, "list", "--quiet").Output()
		if err != nil {
			continue // a runtime that is not installed holds nothing
		}
		for _, name := range strings.Fields(string(out)) {
			if id, ok := strings.CutPrefix(name, namePrefix); ok {
				seen[id] = true
			}
		}
	}
	// runsc's files of a sandbox it no longer lists, or cannot (runsc
	// gone): its control socket, its state lock alone (a `runsc run`
	// killed as it began), its state file.
	socks, _ := filepath.Glob(filepath.Join(e.runscState(), "runsc-"+namePrefix+"*.sock"))
	for _, s := range socks {
		seen[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s), "runsc-"+namePrefix), ".sock")] = true
	}
	files, _ := filepath.Glob(filepath.Join(e.runscState(), namePrefix+"*_sandbox:*"))
	for _, f := range files {
		id, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(f), namePrefix), "_sandbox:")
		seen[id] = true
	}
	// Checkpoints of paused sandboxes, and used ones a resume left to
	// remove.
	ckpts, _ := os.ReadDir(e.checkpointsDir())
	for _, c := range ckpts {
		if id, ok := usedOwner(c.Name()); ok {
			seen[id] = true
		} else {
			seen[c.Name()] = true
		}
	}
	bundles, _ := os.ReadDir(filepath.Join(e.root, "oci", "bundles"))
	for _, b := range bundles {
		seen[b.Name()] = true
	}
	nets, _ := netns.List(e.netnsDir())
	for _, id := range nets {
		seen[id] = true
	}
	// Run cgroups are the host's, not this root's: a group this root has
	// no other trace of may be another root's run, and is taken only when
	// nothing runs in it and it is older than a create. A sandbox's is
	// never taken so: an idle old one may be another root's paused
	// sandbox, which its own root resumes into it.
	for _, id := range cgroup.IDs() {
		if !seen[id] && !strings.HasPrefix(id, "sb-") && cgroup.Idle(id, cgroupGrace) {
			seen[id] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return ids, nil
}

type runtimeState struct{ bin, state string }

func (e *Engine) runtimes() []runtimeState {
	return []runtimeState{
		{e.runsc, e.runscState()},
		{e.runc, e.runcState()},
	}
}

// runscState and runcState are the runtimes' state roots (--root).
func (e *Engine) runscState() string { return filepath.Join(e.root, "oci", "runsc") }
func (e *Engine) runcState() string  { return filepath.Join(e.root, "oci", "runc") }

// netnsDir holds sandboxes' egress network namespaces (internal/netns).
func (e *Engine) netnsDir() string { return filepath.Join(e.root, "oci", "netns") }

// Reap implements engine.Reaper: kill the run's cgroup, delete its runtime
// containers, remove its egress network namespaces, unmount its root
// overlay and remove its bundle, any checkpoint and any snapshot of it
// cut short. Whole snapshots belong to templates, not to a run: the
// service removes those no template names (engine.Snapshotter).
//
// It first takes the sandbox's lock, waiting (at most cleanupTimeout) for
// a create, pause or resume of it to end: the runsc that one started
// holds the lock too, and outlives an airlock process killed meanwhile,
// so freeing the sandbox under it would leave what it makes afterwards.
func (e *Engine) Reap(ctx context.Context, id string) error {
	lctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	lk, err := e.lock(lctx, id)
	if err != nil {
		return fmt.Errorf("reaping %q, whose create, pause or resume has not ended: %w", id, err)
	}
	defer lk.Release(true)
	return e.reap(ctx, id)
}

// reap is Reap for a caller that holds the sandbox's lock.
func (e *Engine) reap(ctx context.Context, id string) error {
	var errs []error
	if err := cgroup.Remove(ctx, id); err != nil {
		errs = append(errs, err)
	}
	for _, rt := range e.runtimes() {
		if _, err := os.Stat(rt.state); err == nil {
			// Deleting a container the runtime does not know is an error
			// from the runtime, and fine here.
			exec.CommandContext(ctx, rt.bin, "--root", rt.state, "delete", "--force", namePrefix+id).Run()
		}
	}
	if err := forgetRunsc(ctx, e.runscState(), namePrefix+id); err != nil {
		errs = append(errs, err)
	}
	// Its namespaces end once unbound, their processes being gone.
	if err := netns.Remove(e.netnsDir(), id); err != nil {
		errs = append(errs, err)
	}
	if err := removeBundle(e.bundleDir(id)); err != nil {
		errs = append(errs, err)
	}
	// A paused sandbox's checkpoint goes with it, used ones a resume left
	// to remove, and a snapshot of it that was cut short.
	if err := os.RemoveAll(e.checkpointDir(id)); err != nil {
		errs = append(errs, err)
	}
	// By the owner each name gives, not by a glob: ids may hold '-', and
	// ".used-a-*" would take sandbox "a-b"'s too.
	for _, d := range []struct{ dir, prefix string }{{e.checkpointsDir(), usedPrefix}, {e.snapshotsDir(), newPrefix}} {
		ents, _ := os.ReadDir(d.dir)
		for _, ent := range ents {
			if owner, ok := ownerOf(ent.Name(), d.prefix); !ok || owner != id {
				continue
			}
			if err := os.RemoveAll(filepath.Join(d.dir, ent.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ownerOf is the sandbox id of name, prefix+<id>-<suffix> (the suffix
// has no '-'), or false.
func ownerOf(name, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", false
	}
	return rest[:i], true
}
