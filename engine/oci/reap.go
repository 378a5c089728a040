package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

const namePrefix = "airlock-"

// Leftovers implements engine.Reaper: runtime containers named airlock-*,
// bundles, and run cgroups.
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
	bundles, _ := os.ReadDir(filepath.Join(e.root, "oci", "bundles"))
	for _, b := range bundles {
		seen[b.Name()] = true
	}
	for _, id := range cgroup.IDs() {
		seen[id] = true
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
		{e.runsc, filepath.Join(e.root, "oci", "runsc")},
		{e.runc, filepath.Join(e.root, "oci", "runc")},
	}
}

// Reap implements engine.Reaper: kill the run's cgroup, delete its runtime
// containers, unmount its root overlay and remove its bundle.
func (e *Engine) Reap(ctx context.Context, id string) error {
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
	bundle := filepath.Join(e.root, "oci", "bundles", id)
	syscall.Unmount(filepath.Join(bundle, "rootfs"), syscall.MNT_DETACH)
	if err := os.RemoveAll(bundle); err != nil {
		errs = append(errs, fmt.Errorf("removing bundle: %w", err))
	}
	return errors.Join(errs...)
}
