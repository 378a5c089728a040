package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// Leftovers implements engine.Reaper: containers and volumes carrying
// airlock's id label. It also removes sandbox logs that no container owns
// any more.
func (e *Engine) Leftovers(ctx context.Context) ([]string, error) {
	ids, err := e.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	e.sweepSandboxLogs(ctx)
	vols, err := e.cli.VolumeList(ctx, volume.ListOptions{Filters: e.ours()})
	if err != nil {
		return nil, unavailable(e.cli.DaemonHost(), err)
	}
	for _, v := range vols.Volumes {
		if id := v.Labels[LabelID]; id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// sweepSandboxLogs removes <sandbox-logs>/<container id> directories whose
// container dockerd no longer has. A directory younger than a minute may
// belong to a container being created, and is left.
func (e *Engine) sweepSandboxLogs(ctx context.Context) {
	f, err := e.facts(ctx)
	if err != nil {
		return
	}
	pattern := f.sandboxLogs
	if filepath.Base(filepath.Clean(pattern)) != "%ID%" {
		return // not a layout airlock registered
	}
	dirs, _ := filepath.Glob(strings.ReplaceAll(filepath.Clean(pattern), "%ID%", "*"))
	if len(dirs) == 0 {
		return
	}
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, c := range list {
		known[c.ID] = true
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && !known[filepath.Base(d)] && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(d)
		}
	}
}

// Reap implements engine.Reaper: force-remove this root's container of
// the run with its anonymous volumes, this root's volumes labelled with
// the run's id, and its parent cgroup. A named volume a container mounts
// is not airlock's (its sandboxes mount binds and tmpfs only) and stays.
func (e *Engine) Reap(ctx context.Context, id string) error {
	var errs []error
	list, err := e.containersOf(ctx, id)
	if err != nil {
		errs = append(errs, unavailable(e.cli.DaemonHost(), err))
	}
	var f daemonFacts
	if len(list) > 0 {
		f, _ = e.facts(ctx)
	}
	var vols []string
	for _, c := range list {
		if err := e.removeContainer(ctx, c.ID); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
		if dir := f.sandboxLogDir(c.ID); dir != "" {
			os.RemoveAll(dir)
		}
	}
	if labelled, err := e.cli.VolumeList(ctx, volume.ListOptions{Filters: e.ofID(id)}); err != nil {
		errs = append(errs, unavailable(e.cli.DaemonHost(), err))
	} else {
		for _, v := range labelled.Volumes {
			vols = append(vols, v.Name)
		}
	}
	for _, v := range vols {
		if err := e.cli.VolumeRemove(ctx, v, true); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing volume %q: %w", v, err))
		}
	}
	if err := cgroup.Remove(ctx, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
